"""LeaveGroup (13): members leave; v3+ several at once, by member or instance id.

v0-2 name one member and carry its error at the top level; v3+ answer per
member (KIP-345 batch leave, used by admin tools to remove static members).
With an authorizer the group needs Read (GROUP_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import GROUP, Op, authorize
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import LeaveGroupResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


async def handle_leave_group(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return LeaveGroupResponse(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[]
        )
    if version < 3:
        leaving: list[tuple[str, str | None]] = [(request.member_id, None)]
    else:
        leaving = [(m.member_id or "", m.group_instance_id) for m in request.members]
    answer = broker.coordinator.leave_group(request.group_id, leaving)
    top, errors = answer if isinstance(answer, tuple) else await answer
    if version < 3:
        if top == ErrorCode.NONE and errors:
            top = errors[0]
        return LeaveGroupResponse(throttle_time_ms=0, error_code=top)
    members = [
        LeaveGroupResponse.Member(member_id=member_id, group_instance_id=instance, error_code=error)
        for (member_id, instance), error in zip(leaving, errors, strict=False)
    ]
    return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=members)


HANDLERS = {ApiKey.LEAVE_GROUP: handle_leave_group}
