"""AlterReplicaLogDirs (34): move replicas between a broker's log directories.

kbroker has one log directory (``log.dirs``), so a replica can only be asked to stay where
it is. Each partition is answered as Kafka answers it: NONE for a replica this broker
hosts, asked into its own log directory (named as DescribeLogDirs names it, or by its
absolute path); LOG_DIR_NOT_FOUND for any other directory; UNKNOWN_TOPIC_OR_PARTITION for a
partition that does not exist and REPLICA_NOT_AVAILABLE for one another broker hosts;
INVALID_TOPIC_EXCEPTION, before anything else, for a topic whose name is too long for the
directory a moving replica would need (over 255 bytes with its suffix). Results come in
the order asked (Kafka's follow its hash map). With an
authorizer it needs Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED for every
partition), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import AlterReplicaLogDirsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Result = AlterReplicaLogDirsResponse.Result
Partition = AlterReplicaLogDirsResponse.Result.Partition

# A moving replica's directory: "<topic>-<partition>.<32 hex digits>-future".
_FUTURE_SUFFIX = len(".") + 32 + len("-future")
MAX_DIR_NAME = 255


def _outcome(broker: Broker, ours: set[str], path: str, topic: str, index: int) -> int:
    if len(f"{topic}-{index}".encode()) + _FUTURE_SUFFIX > MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if path not in ours:
        return ErrorCode.LOG_DIR_NOT_FOUND
    known = broker.metadata_cache.topic(topic)
    if known is None or index not in known.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if broker.partition(topic, index) is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    return ErrorCode.NONE


def handle_alter_replica_log_dirs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    allowed = authorize_cluster(broker, ctx, Op.ALTER)
    # The log directory's names: as DescribeLogDirs gives it, or its absolute path.
    ours = {str(broker.data_dir.absolute()), str(broker.data_dir.resolve())}
    results: dict[str, list[Any]] = {}
    for d in request.dirs:
        for t in d.topics:
            for index in t.partitions:
                code = (
                    _outcome(broker, ours, d.path, t.name, index)
                    if allowed
                    else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                )
                results.setdefault(t.name, []).append(
                    Partition(partition_index=index, error_code=code)
                )
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0,
        results=[Result(topic_name=name, partitions=parts) for name, parts in results.items()],
    )


HANDLERS = {ApiKey.ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs}
