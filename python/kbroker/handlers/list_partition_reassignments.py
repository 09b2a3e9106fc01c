"""ListPartitionReassignments (46): the reassignments in progress.

In a cluster the controller answers (`Controller.list_partition_reassignments`): every
partition being reassigned, or those of the ones named that are, with its replicas and
those being added and removed; other brokers answer NOT_CONTROLLER, as Kafka's do. A
single node completes a reassignment as it is made (see alter_partition_reassignments),
so it lists none, as Kafka does when nothing moves. With an authorizer it needs
Describe on the cluster (CLUSTER_AUTHORIZATION_FAILED), checked first, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.errors import KafkaError
from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import ListPartitionReassignmentsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Topic = ListPartitionReassignmentsResponse.Topic
Partition = ListPartitionReassignmentsResponse.Topic.Partition


def _answer(code: ErrorCode, message: str | None, topics: list[Any]) -> Any:
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=code, error_message=message, topics=topics
    )


async def _list_in_cluster(broker: Broker, request: Any) -> Any:
    assert broker.cluster is not None
    controller = broker.cluster.controller
    if controller is None:
        return _answer(
            ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.", []
        )
    wanted = None
    if request.topics is not None:
        wanted = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        moving = await controller.list_partition_reassignments(wanted)
    except KafkaError as exc:
        return _answer(ErrorCode(exc.code), exc.message, [])
    by_topic: dict[str, list[Any]] = {}
    for tp, a in sorted(moving.items()):
        by_topic.setdefault(tp.topic, []).append(
            Partition(
                partition_index=tp.partition,
                replicas=list(a.replicas),
                adding_replicas=list(a.adding),
                removing_replicas=list(a.removing),
            )
        )
    return _answer(
        ErrorCode.NONE,
        None,
        [Topic(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(broker, ctx, Op.DESCRIBE):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", [])
    if broker.cluster is not None:
        return _list_in_cluster(broker, request)
    return _answer(ErrorCode.NONE, None, [])


HANDLERS = {ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments}
