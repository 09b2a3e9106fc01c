"""JoinGroup (11): a member joins (or rejoins) a group and waits for the rebalance.

v4+ new members first get MEMBER_ID_REQUIRED with their id and must join
again with it (KIP-394); v5+ carry group.instance.id (static membership).
The answer may wait for the whole rebalance; the leader's answer lists the
members and their metadata so that it can compute the assignment.
With an authorizer the group needs Read (GROUP_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.coordinator import JoinRequest, JoinResult
from kbroker.handlers.authorization import GROUP, Op, authorize
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import JoinGroupResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def _response(result: JoinResult, version: int) -> Any:
    name = result.protocol_name
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Not nullable before v7.
        protocol_name=name if version >= 7 or name is not None else "",
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.Member(member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ],
    )


def _protocols(declared: list[Any]) -> list[tuple[str, bytes]]:
    """(name, metadata) in preference order; a name given twice counts once (the first)."""
    out: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for p in declared:
        if p.name not in seen:
            seen.add(p.name)
            out.append((p.name, bytes(p.metadata)))
    return out


async def _wait(pending: asyncio.Future[JoinResult], version: int) -> Any:
    # shield: a client that disconnects must not cancel the group's own future.
    return _response(await asyncio.shield(pending), version)


def handle_join_group(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return _response(JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=""), version)
    req = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if version >= 5 else None,
        require_known_member_id=version >= 4,
        client_id=ctx.client_id,
        client_host=ctx.client_host,
        rebalance_timeout_ms=request.rebalance_timeout_ms
        if version >= 1
        else request.session_timeout_ms,
        session_timeout_ms=request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=_protocols(request.protocols),
    )
    result = broker.coordinator.join_group(req)
    if isinstance(result, JoinResult):
        return _response(result, version)
    return _wait(result, version)


HANDLERS = {ApiKey.JOIN_GROUP: handle_join_group}
