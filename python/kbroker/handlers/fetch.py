"""Fetch (1): read committed data from partitions, long-polling for min_bytes.

Record bytes are never copied into Python on the hot path: each partition's
data is a LogSlice placed in the response as a RecordsPlaceholder, which
the server sends from the segment file with sendfile. Consumers never see
past the high watermark (read_uncommitted) or the last stable offset
(read_committed, whose answer also lists the transactions aborted in the
data it carries, from the segments' transaction indexes: the consumer
drops their records).

The replica manager reads, and holds the request in its fetch purgatory
until ``min_bytes`` are there or ``max_wait_ms`` passes (DelayedFetch).

A follower's fetch (``replica_id`` set) reads up to the log end and counts as
its progress; from v12 a fetch names the epoch of its last batch and gets
``diverging_epoch`` when its log parts from the leader's there.

Fetch sessions (KIP-227) are answered session-less: session id 0, so
clients keep sending full fetch requests.

A consumer with a ``consumer_byte_rate`` quota (followers never have one)
fetches at most what its quota allows in one go; a response that puts it
over its quota is answered without data, with the throttle time, and the
connection is paused for that time (Kafka's way: the records are fetched
again, from the same offset, once the throttle is over, so none is lost or
delivered twice).

With an authorizer, as Kafka: a consumer needs Read on each topic, a
follower (replica id >= 0) ClusterAction on the cluster, or every partition
is answered TOPIC_AUTHORIZATION_FAILED: only brokers may fetch as replicas
(CVE-2018-1288), and a refused one reads nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.futures import then
from kbroker.handlers.authorization import TOPIC, Op, authorize_cluster, refused
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode, RecordsPlaceholder
from kbroker.protocol.messages.core import FetchResponse
from kbroker.replication.replica_manager import FetchParams, FetchPartition, ReadResult

if TYPE_CHECKING:
    from kbroker.broker import Broker

TopicResponse = FetchResponse.Topic
PartitionResponse = FetchResponse.Topic.Partition

READ_COMMITTED = 1
# Per topic in request order: (topic entry, [(partition entry, its index in the replica
# manager's fetches, or the error it is answered with)]).
Plan = list[tuple[Any, list[tuple[Any, int | ErrorCode]]]]
# Longest wait a client may ask for; longer asks are shortened.
MAX_WAIT_MS = 30_000


def handle_fetch(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if version >= 7 and request.session_epoch > 0:
        # An incremental fetch in a session this broker never created.
        return FetchResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            session_id=0,
            responses=[],
        )
    committed = version >= 4 and request.isolation_level == READ_COMMITTED
    if version >= 15:
        state = request.replica_state
        replica_id = -1 if state is None else state.replica_id
    else:
        replica_id = request.replica_id
    max_bytes = request.max_bytes if version >= 3 else 0x7FFFFFFF
    min_bytes = request.min_bytes
    quota = broker.quotas.fetch.enabled and replica_id < 0
    if quota:
        max_bytes = broker.quotas.fetch_max_bytes(ctx.principal, ctx.client_id, max_bytes)
        min_bytes = min(min_bytes, max_bytes)
    params = FetchParams(
        max_wait_ms=min(max(request.max_wait_ms, 0), MAX_WAIT_MS),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        read_committed=committed,
        replica_id=max(replica_id, -1),
    )
    plan: Plan = []
    fetches: list[FetchPartition] = []
    names = [_name(broker, version, topic) for topic in request.topics]
    denied: frozenset[str] = frozenset()
    if broker.authorizer is not None:
        if replica_id >= 0:
            if not authorize_cluster(broker, ctx, Op.CLUSTER_ACTION):
                denied = frozenset(n for n in names if n is not None)
        else:
            denied = refused(broker, ctx, Op.READ, TOPIC, (n for n in names if n is not None))
    for topic, name in zip(request.topics, names, strict=True):
        entries: list[tuple[Any, int | ErrorCode]] = []
        for p in topic.partitions:
            if name is None:
                entries.append((p, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            if name in denied:
                entries.append((p, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            entries.append((p, len(fetches)))
            fetches.append(
                FetchPartition(
                    TopicPartition(name, p.partition),
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                    p.last_fetched_epoch if version >= 12 else -1,
                    p.log_start_offset,
                )
            )
        plan.append((topic, entries))
    done = broker.replica_manager.fetch_records(params, fetches)
    if quota:
        return then(
            done, lambda results: _throttled(broker, ctx, version, committed, plan, results)
        )
    if done.done():
        return _response(version, committed, plan, done.result())
    return then(done, lambda results: _response(version, committed, plan, results))


def _name(broker: Broker, version: int, topic: Any) -> str | None:
    """The topic a fetch entry names (by id from v13: None when the id is unknown)."""
    if version < 13:
        return str(topic.topic)
    known = broker.metadata_cache.topic_by_id(topic.topic_id)
    return None if known is None else known.name


def _throttled(
    broker: Broker,
    ctx: RequestContext,
    version: int,
    committed: bool,
    plan: Plan,
    results: list[ReadResult],
) -> Any:
    """The answer to a consumer with a byte-rate quota: the data, or, once over the quota,
    none and the throttle time."""
    size = response_size(plan, results)
    throttle_ms = broker.quotas.fetch_throttle_ms(ctx.principal, ctx.client_id, size)
    if throttle_ms <= 0:
        return _response(version, committed, plan, results)
    ctx.connection.mute_for(throttle_ms / 1000)
    return FetchResponse(
        throttle_time_ms=throttle_ms, error_code=ErrorCode.NONE, session_id=0, responses=[]
    )


# What a fetch response holds besides the records, for the size a byte-rate quota counts:
# its header and top-level fields, each topic's name (or id) and fields, each partition's.
_RESPONSE_BYTES = 20
_TOPIC_BYTES = 24
_PARTITION_BYTES = 50


def response_size(plan: Plan, results: list[ReadResult]) -> int:
    """About the size of the response (exact for the records, which dominate)."""
    size = _RESPONSE_BYTES
    for topic, entries in plan:
        size += (
            _TOPIC_BYTES + len(getattr(topic, "topic", "") or "") + _PARTITION_BYTES * len(entries)
        )
    for r in results:
        if r.records is not None:
            size += len(r.records)
    return size


def _response(
    version: int,
    committed: bool,
    plan: Plan,
    results: list[ReadResult],
) -> Any:
    responses = []
    for topic, entries in plan:
        parts = []
        for req, i in entries:
            if isinstance(i, ErrorCode):
                parts.append(_error(req.partition, i))
                continue
            r = results[i]
            records = r.records
            diverging = None
            if r.diverging_epoch is not None:
                diverging = PartitionResponse.EpochEndOffset(
                    epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1]
                )
            parts.append(
                PartitionResponse(
                    partition_index=req.partition,
                    error_code=r.error,
                    high_watermark=r.high_watermark,
                    last_stable_offset=r.last_stable_offset,
                    log_start_offset=r.log_start_offset,
                    aborted_transactions=_aborted(committed, r.aborted_transactions),
                    preferred_read_replica=-1,
                    records=b"" if records is None else RecordsPlaceholder(len(records), records),
                    diverging_epoch=diverging,
                )
            )
        responses.append(
            TopicResponse(
                topic=topic.topic if version < 13 else "",
                topic_id=topic.topic_id if version >= 13 else ZERO_UUID,
                partitions=parts,
            )
        )
    return FetchResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=responses
    )


def _aborted(committed: bool, aborted: list[tuple[int, int]] | None) -> list[Any] | None:
    """A read_committed answer's aborted transactions (an empty list when none); None
    for read_uncommitted."""
    if not committed:
        return None
    entry = PartitionResponse.AbortedTransaction
    return [entry(producer_id=pid, first_offset=first) for pid, first in aborted or ()]


def _error(index: int, code: ErrorCode) -> Any:
    return PartitionResponse(
        partition_index=index,
        error_code=code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )


HANDLERS = {ApiKey.FETCH: handle_fetch}
