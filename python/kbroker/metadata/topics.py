"""Facts about topics that several layers share: internal names, name collisions, limits.

Owns `INTERNAL_TOPICS`, `collision_key`, the per-topic partition bound and
`NewTopic` (a validated CreateTopics entry). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kbroker.config import Value

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

MAX_PARTITIONS_PER_TOPIC = 100_000


def collision_key(name: str) -> str:
    """Topics whose names differ only in '.' and '_' collide (their metric names would)."""
    return name.replace(".", "_")


@dataclass(frozen=True)
class NewTopic:
    """A validated CreateTopics entry."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str | None]
    parsed: dict[str, Value]
    internal: bool = False
    # Replicas of each partition chosen by the client (cluster mode); None: placed by
    # the broker.
    assignment: Mapping[int, Sequence[int]] | None = None
