"""OffsetFetch (9): a group's committed offsets, with their metadata and leader epoch.

v1 has only per-partition errors; v2-7 add a top-level error and let a null
topic list mean "every committed offset"; v8+ ask for several groups at once.
A partition without a committed offset gets offset -1 and no error.
With require_stable (v7+, KIP-447), a partition whose commit is being written or
waits for its transaction's marker is UNSTABLE_OFFSET_COMMIT (offset -1): the
client asks again.

With an authorizer, as Kafka: the group needs Describe (GROUP_AUTHORIZATION_FAILED);
a named partition of a topic the principal may not Describe is answered
TOPIC_AUTHORIZATION_FAILED, and "every committed offset" leaves such topics out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.coordinator import FetchedOffset
from kbroker.handlers.authorization import GROUP, TOPIC, Op, authorize, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import OffsetFetchResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Topic = OffsetFetchResponse.Topic
Partition = Topic.Partition


def _wanted(topics: list[Any] | None) -> list[tuple[str, int]] | None:
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _topics(fetched: list[FetchedOffset], error: ErrorCode = ErrorCode.NONE) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for f in fetched:
        c = f.committed
        by_topic.setdefault(f.topic, []).append(
            Partition(
                partition_index=f.partition,
                committed_offset=c.offset if c is not None else -1,
                committed_leader_epoch=c.leader_epoch if c is not None else -1,
                metadata=c.metadata if c is not None else "",
                error_code=error if error != ErrorCode.NONE else f.error,
            )
        )
    return [Topic(name=name, partitions=parts) for name, parts in by_topic.items()]


def _fetch(
    broker: Broker,
    ctx: RequestContext,
    group_id: str,
    wanted: list[tuple[str, int]] | None,
    require_stable: bool,
    member: tuple[str | None, int] | None = None,
) -> tuple[ErrorCode, list[FetchedOffset]]:
    """The group's committed offsets the principal may see (each partition it may not,
    when named, with TOPIC_AUTHORIZATION_FAILED)."""
    if not authorize(broker, ctx, Op.DESCRIBE, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    if broker.authorizer is None:
        return broker.coordinator.offsets.fetch_offsets(group_id, wanted, require_stable, member)
    if wanted is None:
        error, fetched = broker.coordinator.offsets.fetch_offsets(
            group_id, None, require_stable, member
        )
        hidden = refused(broker, ctx, Op.DESCRIBE, TOPIC, (f.topic for f in fetched))
        return error, [f for f in fetched if f.topic not in hidden]
    denied = refused(broker, ctx, Op.DESCRIBE, TOPIC, (t for t, _ in wanted))
    allowed = [(t, p) for t, p in wanted if t not in denied]
    error, fetched = broker.coordinator.offsets.fetch_offsets(
        group_id, allowed, require_stable, member
    )
    if error != ErrorCode.NONE:
        return error, fetched
    found = {(f.topic, f.partition): f for f in fetched}
    return error, [
        found.get((t, p)) or FetchedOffset(t, p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for t, p in wanted
    ]


def handle_offset_fetch(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    require_stable = version >= 7 and request.require_stable
    if version >= 8:
        groups = []
        for g in request.groups:
            # From v9 a member says who it is; a null member id is a tool's fetch.
            member = (g.member_id, g.member_epoch) if version >= 9 else None
            if member is not None and member[0] is None:
                member = None
            error, fetched = _fetch(
                broker, ctx, g.group_id, _wanted(g.topics), require_stable, member
            )
            groups.append(
                OffsetFetchResponse.Group(
                    group_id=g.group_id, topics=_topics(fetched), error_code=error
                )
            )
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    wanted = _wanted(request.topics)
    error, fetched = _fetch(broker, ctx, request.group_id, wanted, require_stable)
    if version < 2:
        # No top-level error before v2: every partition carries it.
        if error != ErrorCode.NONE:
            fetched = [FetchedOffset(t, p, None) for t, p in wanted or []]
        return OffsetFetchResponse(throttle_time_ms=0, topics=_topics(fetched, error))
    return OffsetFetchResponse(throttle_time_ms=0, topics=_topics(fetched), error_code=error)


HANDLERS = {ApiKey.OFFSET_FETCH: handle_offset_fetch}
