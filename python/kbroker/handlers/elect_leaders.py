"""ElectLeaders (43): on a single node every partition's one replica is its preferred
leader and leads already, so no election is ever needed.

As Kafka answers: ELECTION_NOT_NEEDED for each partition named (preferred or unclean
election alike: the leader is live), UNKNOWN_TOPIC_OR_PARTITION for one that does not
exist; ``topic_partitions`` null asks for every partition, and then partitions that need
no election are left out (each topic is listed with no partition, as Kafka 4.1 does).
Messages are Kafka's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def handle_elect_leaders(broker: Broker, ctx: RequestContext, request: Any) -> Any:
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
