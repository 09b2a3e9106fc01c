"""ConsumerGroupHeartbeat (68): a member of a consumer group (KIP-848) joins, stays, leaves.

Everything a member says and is told goes through this one API: its
subscription, what it owns, its epoch, and back its assignment (by topic id)
and the heartbeat interval. The coordinator's rules are in
`kbroker.coordinator.consumer_coordinator`. With an authorizer the group
needs Read, as in Kafka. A broker whose `group.coordinator.rebalance.protocols`
leaves out ``consumer``, or while ``group.version`` is finalized at 0, answers
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.coordinator.consumer_coordinator import HeartbeatRequest
from kbroker.handlers.authorization import GROUP, Op, authorize
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import ConsumerGroupHeartbeatResponse as Response

if TYPE_CHECKING:
    from kbroker.broker import Broker


def _refused(error: ErrorCode, message: str | None = None) -> Any:
    return Response(
        throttle_time_ms=0,
        error_code=error,
        error_message=message,
        member_id=None,
        member_epoch=0,
        heartbeat_interval_ms=0,
        assignment=None,
    )


async def handle_consumer_group_heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    groups = broker.coordinator.consumer_groups
    if not groups.enabled:
        return _refused(
            ErrorCode.UNSUPPORTED_VERSION,
            "The consumer group protocol is disabled "
            "(group.coordinator.rebalance.protocols, or group.version 0).",
        )
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    owned = (
        None
        if request.topic_partitions is None
        else {tp.topic_id: list(tp.partitions) for tp in request.topic_partitions}
    )
    result = await groups.heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=request.subscribed_topic_names,
            subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=ctx.client_id or "",
            client_host=ctx.client_host,
            version=ctx.api_version,
        )
    )
    if result.error != ErrorCode.NONE:
        return _refused(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = Response.Assignment(
            topic_partitions=[
                Response.Assignment.TopicPartitions(topic_id, sorted(partitions))
                for topic_id, partitions in sorted(result.assignment.items())
            ]
        )
    return Response(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )


HANDLERS = {ApiKey.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat}
