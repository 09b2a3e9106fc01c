"""DescribeProducers (61): the producers each replica of a partition knows, as Kafka answers
kafka-transactions.sh describe-producers and find-hanging.

For each producer of a partition this broker holds, as leader or follower (a follower's
producer state is rebuilt from the batches and markers it replicates; Kafka answers from
either, and the tool's ``--broker-id`` asks a given replica, which find-hanging does for
every partition a broker holds): its id and epoch, the last sequence it wrote, the time
of its last write, the coordinator epoch of its last transaction marker, and the first
offset of its open transaction here (-1: none). A partition is answered
NOT_LEADER_OR_FOLLOWER when it exists but this broker holds no replica of it,
UNKNOWN_TOPIC_OR_PARTITION when it does not exist; a topic with an illegal name
INVALID_TOPIC_EXCEPTION. With an authorizer, each topic needs Read
(TOPIC_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import TOPIC, Op, refused
from kbroker.log import TopicPartition
from kbroker.log.log import illegal_topic_name
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DescribeProducersResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

TopicResponse = DescribeProducersResponse.Topic
PartitionResponse = DescribeProducersResponse.Topic.Partition
ProducerResponse = DescribeProducersResponse.Topic.Partition.Producer


def _error(index: int, code: ErrorCode, message: str | None = None) -> Any:
    return PartitionResponse(
        partition_index=index, error_code=code, error_message=message, active_producers=[]
    )


def _partition(broker: Broker, tp: TopicPartition) -> Any:
    partition = broker.replica_manager.get_partition(tp)
    if partition is None:
        if broker.metadata_cache.partition_state(tp.topic, tp.partition) is not None:
            return _error(tp.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)  # other brokers'
        return _error(tp.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    producers = [
        ProducerResponse(
            producer_id=pid,
            producer_epoch=entry.epoch,
            last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.txn_first_offset,
        )
        for pid, entry in partition.producers.entries().items()
    ]
    return PartitionResponse(
        partition_index=tp.partition,
        error_code=ErrorCode.NONE,
        error_message=None,
        active_producers=producers,
    )


def handle_describe_producers(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    denied = refused(broker, ctx, Op.READ, TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        name = topic.name
        topic_error: tuple[ErrorCode, str | None] | None = None
        illegal = illegal_topic_name(name)
        if illegal is not None:
            topic_error = (ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)
        elif name in denied:
            topic_error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        elif broker.metadata_cache.topic(name) is None:
            topic_error = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        partitions = [
            _error(index, *topic_error)
            if topic_error is not None
            else _partition(broker, TopicPartition(name, index))
            for index in topic.partition_indexes
        ]
        topics.append(TopicResponse(name=name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


HANDLERS = {ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers}
