"""The broker's error classes: each carries the Kafka `ErrorCode` a client is answered with.

All derive from `KafkaError` (in the protocol layer, which owns the codes);
the class says what failed, the code says what the client sees:

- `TopicError`: a topic operation (create, delete, add partitions, configs).
- `PartitionError`: a read or write on one partition (leadership, ranges, producer state).
- `ResourceError`: one resource of a configs request.

A handler catches `KafkaError` and answers ``exc.code`` and ``str(exc)``.
"""

from __future__ import annotations

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["ErrorCode", "KafkaError", "PartitionError", "ResourceError", "TopicError"]


class TopicError(KafkaError):
    """A topic operation refused."""


class PartitionError(KafkaError):
    """A request on one partition refused."""


class ResourceError(KafkaError):
    """One resource of a DescribeConfigs/AlterConfigs request refused."""
