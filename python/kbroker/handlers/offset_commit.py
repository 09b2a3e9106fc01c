"""OffsetCommit (8): store a group's consumed positions, with an error per partition.

Members commit within their generation (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID
and REBALANCE_IN_PROGRESS otherwise); consumers that assign partitions
themselves commit with generation -1 to an empty group. v2-4 may ask for a
retention time; the metadata string and (v6+) leader epoch are kept and
returned by OffsetFetch. The answer waits until the commit is stored.

With an authorizer, as Kafka: the group needs Read (or every partition is
GROUP_AUTHORIZATION_FAILED), each topic Read (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.coordinator.store import answered
from kbroker.handlers.authorization import GROUP, TOPIC, Op, authorize, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import OffsetCommitResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Topic = OffsetCommitResponse.Topic
Partition = OffsetCommitResponse.Topic.Partition


def handle_offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    order: list[tuple[str, list[int]]] = []
    early: dict[tuple[str, int], ErrorCode] = {}
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        for topic in request.topics:
            order.append((topic.name, [p.partition_index for p in topic.partitions]))
            for p in topic.partitions:
                early[(topic.name, p.partition_index)] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return _respond(answered({}), order, early)
    denied = refused(broker, ctx, Op.READ, TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        indexes = []
        for p in topic.partitions:
            if topic.name in denied:
                early[(topic.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                indexes.append(p.partition_index)
                continue
            epoch = p.committed_leader_epoch if version >= 6 else -1
            offsets[(topic.name, p.partition_index)] = (
                p.committed_offset,
                epoch,
                p.committed_metadata,
            )
            indexes.append(p.partition_index)
        order.append((topic.name, indexes))
    if early and not offsets:
        return _respond(answered({}), order, early)
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    stored = broker.coordinator.offsets.commit_offsets(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 7 else None,
        request.generation_id_or_member_epoch,
        offsets,
        retention,
        version,
    )
    return _respond(stored, order, early)


async def _respond(
    stored: asyncio.Future[dict[tuple[str, int], ErrorCode]],
    order: list[tuple[str, list[int]]],
    early: dict[tuple[str, int], ErrorCode],
) -> Any:
    results = early | await stored
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            Topic(
                name=name,
                partitions=[
                    Partition(partition_index=i, error_code=results[(name, i)]) for i in indexes
                ],
            )
            for name, indexes in order
        ],
    )


HANDLERS = {ApiKey.OFFSET_COMMIT: handle_offset_commit}
