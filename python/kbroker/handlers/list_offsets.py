"""ListOffsets (2): earliest, latest, by timestamp, and max timestamp (v7+).

Offsets by time come from the time index and, within a batch, from the
record timestamps (Rust). Answers never point past what a consumer may
read: the high watermark, or the last stable offset for read_committed.
With an authorizer each topic needs Describe (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.errors import PartitionError
from kbroker.handlers.authorization import TOPIC, Op, refused
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import ListOffsetsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker
    from kbroker.replication.partition import Partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1

TopicResponse = ListOffsetsResponse.Topic
PartitionResponse = ListOffsetsResponse.Topic.Partition


def _lookup(
    partition: Partition, timestamp: int, committed: bool, from_replica: bool
) -> tuple[int, int]:
    """(timestamp, offset) answering one partition's query (a follower's: up to the
    log end)."""
    if from_replica:
        bound = partition.log.log_end_offset
    else:
        bound = partition.last_stable_offset if committed else partition.high_watermark
    if timestamp == LATEST:
        return -1, bound
    if timestamp == EARLIEST:
        return -1, partition.log.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        ts, offset = partition.log.max_timestamp_and_offset()
        if offset < 0 or offset >= bound:
            return -1, -1
        return ts, offset
    if timestamp < 0:
        raise PartitionError(ErrorCode.INVALID_REQUEST, f"timestamp {timestamp} has no meaning")
    found = partition.log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= bound:
        return -1, -1
    offset, ts = found
    return ts, offset


def handle_list_offsets(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    committed = version >= 2 and request.isolation_level == READ_COMMITTED
    denied = refused(broker, ctx, Op.DESCRIBE, TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            code = ErrorCode.NONE
            ts = offset = -1
            epoch = -1
            try:
                if topic.name in denied:
                    raise PartitionError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partition = broker.replica_manager.leader_partition(
                    tp, p.current_leader_epoch if version >= 4 else -1
                )
                if p.timestamp == MAX_TIMESTAMP and version < 7:
                    raise PartitionError(ErrorCode.UNSUPPORTED_VERSION)
                ts, offset = _lookup(partition, p.timestamp, committed, request.replica_id >= 0)
                epoch = partition.leader_epoch
            except PartitionError as exc:
                code = exc.code
            except OSError as exc:
                broker.logs.errors.failed("reading", tp, exc)
                code = ErrorCode.KAFKA_STORAGE_ERROR
            results.append(
                PartitionResponse(
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(TopicResponse(name=topic.name, partitions=results))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


HANDLERS = {ApiKey.LIST_OFFSETS: handle_list_offsets}
