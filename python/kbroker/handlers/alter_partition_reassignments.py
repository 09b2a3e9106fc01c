"""AlterPartitionReassignments (45), as Kafka answers it with one broker.

A reassignment that keeps the replicas a partition has is done at once and answered
NONE; one naming a broker that is not registered, none, or a broker twice is
INVALID_REPLICA_ASSIGNMENT, and so (in a cluster, until followers replicate) is one that
moves a replica to another broker; in a cluster only the controller answers (others:
NOT_CONTROLLER); a cancellation (replicas null)
finds NO_REASSIGNMENT_IN_PROGRESS; an unknown partition is UNKNOWN_TOPIC_OR_PARTITION.
Messages are Kafka's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    if sorted(replicas) != sorted(current):
        # Only in a cluster: a replica elsewhere would have to copy the log.
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "moving a replica to another broker needs replication, which kbroker does not have yet",
        )
    # The replicas the partition has already.
    return ErrorCode.NONE, None


def handle_alter_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if broker.cluster is not None and broker.cluster.controller is None:
        # Clients send reassignments to the controller.
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NOT_CONTROLLER,
            error_message="This is not the correct controller for this cluster.",
            responses=[],
        )
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
