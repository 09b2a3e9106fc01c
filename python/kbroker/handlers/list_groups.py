"""ListGroups (16): every group this coordinator knows, optionally by state (v4+)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey
from kbroker.protocol.messages.group import ListGroupsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_list_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    states = request.states_filter if ctx.api_version >= 4 else []
    error, groups = broker.coordinator.list_groups(states)
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=error,
        groups=[
            ListGroupsResponse.Group(
                group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state
            )
            for g in groups
        ],
    )


HANDLERS = {ApiKey.LIST_GROUPS: handle_list_groups}
