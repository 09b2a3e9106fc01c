"""DeleteGroups (42): removes empty groups with their committed offsets.

A group with members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
The answer waits until the tombstones are stored. With an authorizer each
group needs Delete (GROUP_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import GROUP, Op, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import DeleteGroupsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_delete_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    names = list(dict.fromkeys(request.groups_names))
    denied = refused(broker, ctx, Op.DELETE, GROUP, names)
    allowed = [g for g in names if g not in denied]
    return _respond(broker.coordinator.delete_groups(allowed), names, denied)


async def _respond(
    deleted: asyncio.Future[dict[str, ErrorCode]], names: list[str], denied: frozenset[str]
) -> Any:
    results = dict.fromkeys(denied, ErrorCode.GROUP_AUTHORIZATION_FAILED) | await deleted
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[DeleteGroupsResponse.Result(group_id=g, error_code=results[g]) for g in names],
    )


HANDLERS = {ApiKey.DELETE_GROUPS: handle_delete_groups}
