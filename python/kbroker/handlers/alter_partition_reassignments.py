"""AlterPartitionReassignments (45): moving partitions' replicas to other brokers.

In a cluster the controller does it (`Controller.alter_partition_reassignments`,
Kafka's rules and codes: INVALID_REPLICA_ASSIGNMENT for an empty list, a broker twice
or a broker that is not registered, NO_REASSIGNMENT_IN_PROGRESS for a cancellation
(replicas null) with nothing to cancel, UNKNOWN_TOPIC_OR_PARTITION for a partition
that does not exist); other brokers answer NOT_CONTROLLER, as Kafka's do.

A single node answers as Kafka does with one broker: a reassignment that keeps the
replicas a partition has is done at once and answered NONE; one naming a broker that
is not registered, none, or a broker twice is INVALID_REPLICA_ASSIGNMENT; a
cancellation finds NO_REASSIGNMENT_IN_PROGRESS; an unknown partition is
UNKNOWN_TOPIC_OR_PARTITION. Messages are Kafka's.
With an authorizer it needs Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED on the
request and each partition), checked first, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbroker.errors import KafkaError
from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import AlterPartitionReassignmentsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

TopicResult = AlterPartitionReassignmentsResponse.Topic
PartitionResult = AlterPartitionReassignmentsResponse.Topic.Partition


def _check(broker: Broker, current: list[int] | None, replicas: list[int] | None) -> Any:
    """(error, message) for one partition of a known topic (``current``: its replicas)."""
    if current is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No ongoing reassignment for this partition."
    if not replicas:
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    if len(set(replicas)) != len(replicas):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes duplicate replicas.",
        )
    registered = {b.broker_id for b in broker.metadata_cache.alive_brokers()}
    for r in replicas:
        if r not in registered:
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {r}, but no such broker "
                "is registered.",
            )
    # One broker: the replica the partition has already.
    return ErrorCode.NONE, None


def _refused(code: ErrorCode, message: str | None) -> Any:
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=code, error_message=message, responses=[]
    )


async def _reassign_in_cluster(broker: Broker, request: Any) -> Any:
    assert broker.cluster is not None
    controller = broker.cluster.controller
    if controller is None:
        # Clients send reassignments to the controller.
        return _refused(
            ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster."
        )
    targets: dict[TopicPartition, Sequence[int] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            replicas = None if p.replicas is None else list(p.replicas)
            targets[TopicPartition(t.name, p.partition_index)] = replicas
    try:
        results = await controller.alter_partition_reassignments(targets)
    except KafkaError as exc:
        return _refused(ErrorCode(exc.code), exc.message)
    by_topic: dict[str, list[Any]] = {}
    for tp in targets:
        error = results.get(tp)
        by_topic.setdefault(tp.topic, []).append(
            PartitionResult(
                partition_index=tp.partition,
                error_code=ErrorCode.NONE if error is None else error.code,
                error_message=None if error is None else error.message,
            )
        )
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=[TopicResult(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def _unauthorized(request: Any) -> Any:
    """Kafka's answer without Alter on the cluster: the error, on every partition too."""
    code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        responses=[
            TopicResult(
                name=t.name,
                partitions=[
                    PartitionResult(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def handle_alter_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(broker, ctx, Op.ALTER):
        return _unauthorized(request)
    if broker.cluster is not None:
        return _reassign_in_cluster(broker, request)
    topics = broker.metadata_cache.topics()
    responses = []
    for t in request.topics:
        topic = topics.get(t.name)
        parts = []
        for p in t.partitions:
            state = None if topic is None else topic.partitions.get(p.partition_index)
            code, message = _check(broker, None if state is None else state.replicas, p.replicas)
            if topic is None:
                message = f"Unable to find a topic named {t.name}."
            elif state is None:
                message = f"Unable to find partition {t.name}:{p.partition_index}."
            parts.append(
                PartitionResult(
                    partition_index=p.partition_index, error_code=code, error_message=message
                )
            )
        responses.append(TopicResult(name=t.name, partitions=parts))
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, responses=responses
    )


HANDLERS = {ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments}
