"""SyncGroup (14): the leader hands out the assignment; every member gets its part.

Followers wait until the leader's SyncGroup arrives. An empty assignment is
still a well-formed (empty) byte string, never null.
With an authorizer the group needs Read (GROUP_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.coordinator import SyncResult
from kbroker.handlers.authorization import GROUP, Op, authorize
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import SyncGroupResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def _response(result: SyncResult) -> Any:
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment or b"",
    )


async def _wait(pending: asyncio.Future[SyncResult]) -> Any:
    return _response(await asyncio.shield(pending))


def handle_sync_group(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return _response(SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    result = broker.coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        [(a.member_id, bytes(a.assignment)) for a in request.assignments],
    )
    if isinstance(result, SyncResult):
        return _response(result)
    return _wait(result)


HANDLERS = {ApiKey.SYNC_GROUP: handle_sync_group}
