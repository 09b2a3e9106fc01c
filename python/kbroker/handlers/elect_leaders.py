"""ElectLeaders (43): in a cluster the controller elects (preferred or unclean); on a
single node every partition's one replica is its preferred leader and leads already,
so no election is ever needed.

As Kafka answers: ELECTION_NOT_NEEDED for each partition named (preferred or unclean
election alike: the leader is live), UNKNOWN_TOPIC_OR_PARTITION for one that does not
exist; ``topic_partitions`` null asks for every partition, and then partitions that need
no election are left out (each topic is listed with no partition, as Kafka 4.1 does).
Messages are Kafka's on a single node, the controller's in a cluster. With an
authorizer it needs Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED, on each
partition named too), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.controller.leader_election import ElectionType
from kbroker.errors import KafkaError
from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import ElectLeadersResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Result = ElectLeadersResponse.Result
PartitionResult = ElectLeadersResponse.Result.PartitionResult

NOT_NEEDED = "Leader election not needed for topic partition."


def _result(index: int, code: ErrorCode, message: str | None) -> Any:
    return PartitionResult(partition_id=index, error_code=code, error_message=message)


async def _elect_in_cluster(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    """The controller elects; another broker answers NOT_CONTROLLER (clients send
    ElectLeaders to the controller, which Metadata names)."""
    assert broker.cluster is not None
    controller = broker.cluster.controller
    if request.topic_partitions is None:
        asked = [
            TopicPartition(name, p)
            for name, topic in broker.metadata_cache.topics().items()
            for p in topic.partitions
        ]
    else:
        asked = [
            TopicPartition(tp.topic, p)
            for tp in request.topic_partitions
            for p in dict.fromkeys(tp.partitions)
        ]
    kind = ElectionType(request.election_type if ctx.api_version >= 1 else 0)
    outcome: dict[TopicPartition, KafkaError | None] = {}
    top = ErrorCode.NONE
    if controller is None:
        top = ErrorCode.NOT_CONTROLLER
        outcome = {tp: KafkaError(ErrorCode.NOT_CONTROLLER) for tp in asked}
    else:
        try:
            outcome = await controller.elect_leaders(asked, kind)
        except KafkaError as exc:
            top = ErrorCode(exc.code)
            outcome = {tp: exc for tp in asked}
    by_topic: dict[str, list[Any]] = {}
    for tp in asked:
        error = outcome.get(tp)
        if error is None:
            by_topic.setdefault(tp.topic, []).append(_result(tp.partition, ErrorCode.NONE, None))
            continue
        code = ErrorCode(error.code)
        if request.topic_partitions is None and code == ErrorCode.ELECTION_NOT_NEEDED:
            by_topic.setdefault(tp.topic, [])
            continue
        by_topic.setdefault(tp.topic, []).append(_result(tp.partition, code, str(error)))
    return ElectLeadersResponse(
        throttle_time_ms=0,
        error_code=top,
        replica_election_results=[
            Result(topic=name, partition_result=parts) for name, parts in by_topic.items()
        ],
    )


def _refused(request: Any) -> Any:
    """Kafka's answer without Alter on the cluster: the error, on every partition asked."""
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    by_topic: dict[str, list[Any]] = {}
    for tp in request.topic_partitions or []:
        parts = by_topic.setdefault(tp.topic, [])
        parts += [_result(p, code, None) for p in dict.fromkeys(tp.partitions)]
    return ElectLeadersResponse(
        throttle_time_ms=0,
        error_code=code,
        replica_election_results=[
            Result(topic=name, partition_result=parts) for name, parts in by_topic.items()
        ],
    )


def handle_elect_leaders(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(broker, ctx, Op.ALTER):
        return _refused(request)
    if broker.cluster is not None:
        return _elect_in_cluster(broker, ctx, request)
    results: list[Any] = []
    if request.topic_partitions is None:
        results = [
            Result(topic=name, partition_result=[]) for name in broker.metadata_cache.topics()
        ]
    else:
        topics = broker.metadata_cache.topics()
        wanted: dict[str, list[int]] = {}
        for tp in request.topic_partitions:
            wanted.setdefault(tp.topic, []).extend(tp.partitions)
        for name, indexes in wanted.items():
            topic = topics.get(name)
            parts = []
            for index in dict.fromkeys(indexes):
                if topic is None:
                    unknown = f"No such topic as {name}"
                    parts.append(_result(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown))
                elif index not in topic.partitions:
                    unknown = f"No such partition as {name}-{index}"
                    parts.append(_result(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown))
                else:
                    # The preferred leader (the first replica) leads: there is only one.
                    parts.append(_result(index, ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED))
            results.append(Result(topic=name, partition_result=parts))
    return ElectLeadersResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=results
    )


HANDLERS = {ApiKey.ELECT_LEADERS: handle_elect_leaders}
