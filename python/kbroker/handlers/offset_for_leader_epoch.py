"""OffsetForLeaderEpoch (23): the end offset of a leader epoch (KIP-101, KIP-320).

Per partition, as Kafka's leader answers: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, or a fenced ``current_leader_epoch``; otherwise for the
requested epoch the largest epoch at or below it that the log holds and the
offset where the next epoch starts; for the current epoch that is the log end
offset; an epoch above the current one, or -1, gets (-1, -1). Earlier
epochs come from the log's leader-epoch cache (``leader-epoch-checkpoint``),
which every append and every new leader keep.

With an authorizer, as Kafka: ClusterAction on the cluster (a follower) allows
every topic; otherwise each topic needs Describe (a consumer checking for
truncation, KIP-320), or is answered TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.errors import PartitionError
from kbroker.handlers.authorization import TOPIC, Op, authorize_cluster, refused
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import OffsetForLeaderEpochResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker
    from kbroker.replication.partition import Partition

TopicResult = OffsetForLeaderEpochResponse.Topic
PartitionResult = OffsetForLeaderEpochResponse.Topic.Partition

UNDEFINED = -1


def end_offset_for_epoch(partition: Partition, epoch: int) -> tuple[int, int]:
    """(epoch, end offset) as Kafka's leader epoch cache answers for ``epoch``."""
    current = partition.leader_epoch
    if epoch == current:
        return current, partition.log.log_end_offset
    if epoch < 0 or epoch > current:
        return UNDEFINED, UNDEFINED
    return partition.log.end_offset_for_epoch(epoch)


def _answer(broker: Broker, topic: str, p: Any) -> Any:
    def result(code: ErrorCode, epoch: int = UNDEFINED, end: int = UNDEFINED) -> Any:
        return PartitionResult(
            error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end
        )

    try:
        partition = broker.replica_manager.leader_partition(
            TopicPartition(topic, p.partition), p.current_leader_epoch
        )
    except PartitionError as exc:
        return result(exc.code)
    try:
        epoch, end = end_offset_for_epoch(partition, p.leader_epoch)
    except OSError as exc:
        broker.logs.errors.failed("reading", partition.tp, exc)
        return result(ErrorCode.KAFKA_STORAGE_ERROR)
    return result(ErrorCode.NONE, epoch, end)


def _refused(p: Any) -> Any:
    return PartitionResult(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        partition=p.partition,
        leader_epoch=UNDEFINED,
        end_offset=UNDEFINED,
    )


def handle_offset_for_leader_epoch(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    denied: frozenset[str] = frozenset()
    if broker.authorizer is not None and not authorize_cluster(broker, ctx, Op.CLUSTER_ACTION):
        denied = refused(broker, ctx, Op.DESCRIBE, TOPIC, (t.topic for t in request.topics))
    topics = [
        TopicResult(
            topic=t.topic,
            partitions=[
                _refused(p) if t.topic in denied else _answer(broker, t.topic, p)
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


HANDLERS = {ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch}
