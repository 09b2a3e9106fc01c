"""The exceptions of the cluster layer, one class per thing that can go wrong.

`ClusterError` is the base. ZooKeeper's own failures (`ZkError` and its
subclasses) say which operation on which path failed, so a caller can tell
"someone else got there first" (`ZkNodeExistsError`, `ZkBadVersionError`)
from "ZooKeeper is unreachable" (`ZkConnectionLossError`, `ZkTimeoutError`)
without knowing kazoo. Decoding a znode's data raises `ZkDataError`, and
nothing else.
"""

from __future__ import annotations


class ClusterError(Exception):
    """Base of every error raised by kbroker.cluster."""


class ZkConfigError(ClusterError):
    """A ZooKeeper setting (connect string, timeouts) is not usable."""


class ZkDataError(ClusterError):
    """A znode's data is not what Kafka 3.9 writes there (bad JSON, wrong types or version)."""


class ZkError(ClusterError):
    """A ZooKeeper operation failed; `path` is the znode it was about (chroot-relative)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ZkNoNodeError(ZkError):
    """The znode (or, for a create, its parent) does not exist."""


class ZkNodeExistsError(ZkError):
    """A create found the znode already there."""


class ZkBadVersionError(ZkError):
    """A conditional write or check named a version the znode no longer has."""


class ZkNotEmptyError(ZkError):
    """A delete found children under the znode."""


class ZkConnectionLossError(ZkError):
    """The connection dropped while the operation was in flight: it may or may not have happened."""


class ZkSessionExpiredError(ZkError):
    """The session ended (expired or closed); its ephemeral znodes and watches are gone."""


class ZkTimeoutError(ZkError):
    """No answer in time; like a connection loss, the operation may or may not have happened."""


class ZkNotStartedError(ZkError):
    """The client is not started, or was stopped."""


class ZkMultiError(ZkError):
    """A multi-op transaction was refused as a whole; `failed` is the index of the op that failed.

    `cause` is the typed error of that op (`ZkBadVersionError`, `ZkNodeExistsError`, ...).
    """

    def __init__(self, message: str, failed: int, cause: ZkError) -> None:
        super().__init__(message, cause.path)
        self.failed = failed
        self.cause = cause


class BrokerIdInUseError(ClusterError):
    """Another live ZooKeeper session holds this broker id's registration."""


class ControllerMovedError(ClusterError):
    """A controller write was fenced: another controller was elected since this epoch."""


class ProducerIdBlockError(ClusterError):
    """No producer-id block could be allocated (ids exhausted, or too many conflicting writers)."""
