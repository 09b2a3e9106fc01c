"""ListGroups (16): every group this coordinator knows, optionally by state (v4+) and
type (v5+: classic or consumer).

With an authorizer, as Kafka: Describe on the cluster lists every group;
otherwise only the groups the principal may Describe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import GROUP, Op, authorize_cluster, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey
from kbroker.protocol.messages.group import ListGroupsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_list_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    states = request.states_filter if ctx.api_version >= 4 else []
    types = request.types_filter if ctx.api_version >= 5 else []
    error, groups = broker.coordinator.list_groups(states, types)
    if broker.authorizer is not None and not authorize_cluster(broker, ctx, Op.DESCRIBE):
        hidden = refused(broker, ctx, Op.DESCRIBE, GROUP, (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id not in hidden]
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=error,
        groups=[
            ListGroupsResponse.Group(
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in groups
        ],
    )


HANDLERS = {ApiKey.LIST_GROUPS: handle_list_groups}
