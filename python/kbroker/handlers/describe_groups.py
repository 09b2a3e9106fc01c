"""DescribeGroups (15): state, protocol and members of groups.

A group the coordinator does not know, or one of the consumer group protocol, is
described as Dead with no error in v0-5 and GROUP_ID_NOT_FOUND (with a message)
from v6, as Kafka 4 answers. Member metadata and assignments are shown only
while the group is Stable, as Kafka does. With an authorizer each group
needs Describe (GROUP_AUTHORIZATION_FAILED); the authorized operations, when
asked for, are what the principal may do to the group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import GROUP, Op, authorize, authorized_operations
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import INT32_MIN, DescribeGroupsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Group = DescribeGroupsResponse.Group
Member = DescribeGroupsResponse.Group.Member


def handle_describe_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    include_ops = ctx.api_version >= 3 and request.include_authorized_operations
    groups = []
    for group_id in request.groups:
        if not authorize(broker, ctx, Op.DESCRIBE, GROUP, group_id):
            groups.append(
                Group(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=INT32_MIN,
                )
            )
            continue
        d = broker.coordinator.describe_group(group_id, ctx.api_version)
        groups.append(
            Group(
                error_code=d.error,
                error_message=d.message,
                group_id=group_id,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol_name,
                members=[
                    Member(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members or []
                ],
                authorized_operations=authorized_operations(broker, ctx, GROUP, group_id)
                if include_ops and d.error == ErrorCode.NONE
                else INT32_MIN,
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


HANDLERS = {ApiKey.DESCRIBE_GROUPS: handle_describe_groups}
