"""ListConfigResources (74, version 1; Kafka 4.1).

What config resources there are, of the types asked for (none asked: every
type listed here). Kafka 4.1's kafka-configs asks it before describing a
group, to tell "doesn't exist and doesn't have dynamic config" apart from a
group with none. Version 0 (ListClientMetricsResources) is not served, as a
Kafka 3.9 ZooKeeper-mode broker does not serve it.

- GROUP (32): the groups this broker coordinates and every group that has or
  had configs (as Kafka 4.1.1 lists them).
- TOPIC (2): every topic; BROKER (4): every live broker's id.
- CLIENT_METRICS (16): none (kbroker has no client metrics subscriptions).

Another type is refused (INVALID_REQUEST). With an authorizer, as Kafka:
DescribeConfigs on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import ListConfigResourcesResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

TOPIC = 2
BROKER = 4
CLIENT_METRICS = 16
GROUP = 32
LISTED = (TOPIC, BROKER, CLIENT_METRICS, GROUP)


def _names(broker: Broker, resource_type: int) -> list[str]:
    if resource_type == TOPIC:
        return sorted(broker.metadata_cache.topics())
    if resource_type == BROKER:
        return sorted(str(b.broker_id) for b in broker.metadata_cache.alive_brokers())
    if resource_type == GROUP:
        _, groups = broker.coordinator.list_groups()
        known = {g.group_id for g in groups}
        return sorted(known | set(broker.group_configs.configured_groups()))
    return []


def handle_list_config_resources(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    Resource = ListConfigResourcesResponse.ConfigResource

    def answer(error: ErrorCode, resources: list[Any]) -> Any:
        return ListConfigResourcesResponse(
            throttle_time_ms=0, error_code=error, config_resources=resources
        )

    if broker.authorizer is not None and not authorize_cluster(broker, ctx, Op.DESCRIBE_CONFIGS):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    wanted = list(request.resource_types) or list(LISTED)
    if any(t not in LISTED for t in wanted):
        return answer(ErrorCode.INVALID_REQUEST, [])
    resources = [
        Resource(resource_name=name, resource_type=t)
        for t in dict.fromkeys(wanted)
        for name in _names(broker, t)
    ]
    return answer(ErrorCode.NONE, resources)


HANDLERS = {ApiKey.LIST_CONFIG_RESOURCES: handle_list_config_resources}
