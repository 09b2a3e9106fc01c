"""Heartbeat (12): a member says it is alive; the answer says whether to rejoin.

REBALANCE_IN_PROGRESS tells the member to rejoin; UNKNOWN_MEMBER_ID and
ILLEGAL_GENERATION that it was dropped or is behind.
With an authorizer the group needs Read (GROUP_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import GROUP, Op, authorize
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import HeartbeatResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return HeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
        )
    error = broker.coordinator.heartbeat(
        request.group_id,
        request.member_id,
        request.group_instance_id if ctx.api_version >= 3 else None,
        request.generation_id,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


HANDLERS = {ApiKey.HEARTBEAT: handle_heartbeat}
