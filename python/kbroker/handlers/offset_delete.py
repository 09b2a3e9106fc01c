"""OffsetDelete (47): removes committed offsets of topics a group no longer consumes.

Partitions of topics the group's members subscribe to get
GROUP_SUBSCRIBED_TO_TOPIC; an unknown group gets GROUP_ID_NOT_FOUND. The
answer waits until the tombstones are stored. With an authorizer, as Kafka:
the group needs Delete (GROUP_AUTHORIZATION_FAILED), each topic Read
(TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.coordinator.store import answered
from kbroker.handlers.authorization import GROUP, TOPIC, Op, authorize, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import OffsetDeleteResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Topic = OffsetDeleteResponse.Topic
Partition = OffsetDeleteResponse.Topic.Partition


def handle_offset_delete(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    wanted = list(
        dict.fromkeys((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    )
    if not authorize(broker, ctx, Op.DELETE, GROUP, request.group_id):
        return _respond(answered((ErrorCode.GROUP_AUTHORIZATION_FAILED, {})), wanted, {})
    denied = refused(broker, ctx, Op.READ, TOPIC, (t for t, _ in wanted))
    early = dict.fromkeys(
        (tp for tp in wanted if tp[0] in denied), ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    allowed = [tp for tp in wanted if tp not in early]
    return _respond(
        broker.coordinator.offsets.delete_offsets(request.group_id, allowed), wanted, early
    )


async def _respond(
    deleted: asyncio.Future[tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]],
    wanted: list[tuple[str, int]],
    early: dict[tuple[str, int], ErrorCode],
) -> Any:
    error, results = await deleted
    results = early | results
    if error != ErrorCode.NONE:
        return OffsetDeleteResponse(error_code=error, throttle_time_ms=0, topics=[])
    topics: dict[str, list[Any]] = {}
    for name, index in wanted:
        topics.setdefault(name, []).append(
            Partition(partition_index=index, error_code=results[(name, index)])
        )
    return OffsetDeleteResponse(
        error_code=ErrorCode.NONE,
        throttle_time_ms=0,
        topics=[Topic(name=name, partitions=parts) for name, parts in topics.items()],
    )


HANDLERS = {ApiKey.OFFSET_DELETE: handle_offset_delete}
