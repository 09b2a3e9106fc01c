"""Fetch (1): read committed data from partitions, long-polling for min_bytes.

Record bytes are never copied into Python on the hot path: each partition's
data is a LogSlice placed in the response as a RecordsPlaceholder, which
the server sends from the segment file with sendfile. Consumers never see
past the high watermark (read_uncommitted) or the last stable offset
(read_committed).

Fetch sessions (KIP-227) are answered session-less: session id 0, so
clients keep sending full fetch requests.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from kbroker._kbroker import OffsetOutOfRangeError
from kbroker.errors import PartitionError
from kbroker.network.request import RequestContext
from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode, RecordsPlaceholder
from kbroker.protocol.messages.core import FetchResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker
    from kbroker.replication.partition import Partition

TopicResponse = FetchResponse.Topic
PartitionResponse = FetchResponse.Topic.Partition

READ_COMMITTED = 1
# Longest wait a client may ask for; longer asks are shortened.
MAX_WAIT_MS = 30_000


class _Reader:
    """One fetch request: resolves its partitions once, reads them as often as needed."""

    def __init__(self, broker: Broker, ctx: RequestContext, request: Any) -> None:
        self.version = ctx.api_version
        self.request = request
        self.errors = broker.logs.errors
        self.max_bytes = request.max_bytes if self.version >= 3 else 0x7FFFFFFF
        self.committed = self.version >= 4 and request.isolation_level == READ_COMMITTED
        # (topic response, [(partition request, Partition | None, error)])
        self.plan: list[tuple[Any, list[tuple[Any, Partition | None, ErrorCode]]]] = []
        for topic in request.topics:
            if self.version >= 13:
                known = broker.metadata.topic_by_id(topic.topic_id)
                name = None if known is None else known.name
            else:
                name = topic.topic
            entries: list[tuple[Any, Partition | None, ErrorCode]] = []
            for p in topic.partitions:
                if name is None:
                    entries.append((p, None, ErrorCode.UNKNOWN_TOPIC_ID))
                    continue
                partition = broker.partition(name, p.partition)
                if partition is None:
                    entries.append((p, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                try:
                    partition.check_leader_epoch(p.current_leader_epoch)
                except PartitionError as exc:
                    entries.append((p, None, exc.code))
                    continue
                entries.append((p, partition, ErrorCode.NONE))
            self.plan.append((topic, entries))

    def read(self) -> tuple[Any, int, bool]:
        """Builds a response from what is there now: (response, bytes, any error)."""
        remaining = self.max_bytes
        total = 0
        errors = False
        responses = []
        for topic, entries in self.plan:
            parts = []
            for req, partition, error in entries:
                if partition is None:
                    parts.append(_error(req.partition, error))
                    errors = True
                    continue
                hw = partition.high_watermark
                lso = partition.last_stable_offset
                records: Any = b""
                code = ErrorCode.NONE
                try:
                    limit = min(req.partition_max_bytes, remaining)
                    if limit > 0 or total == 0:
                        sl = partition.read(
                            req.fetch_offset,
                            max(limit, 0),
                            total == 0,
                            lso if self.committed else hw,
                        )
                        if sl is not None:
                            n = len(sl)
                            records = RecordsPlaceholder(n, sl)
                            total += n
                            remaining -= n
                except OffsetOutOfRangeError:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                    errors = True
                except PartitionError as exc:
                    code = exc.code
                    errors = True
                except OSError as exc:
                    self.errors.failed("reading", partition.tp, exc)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                    errors = True
                parts.append(
                    PartitionResponse(
                        partition_index=req.partition,
                        error_code=code,
                        high_watermark=hw,
                        last_stable_offset=lso,
                        log_start_offset=partition.log.log_start_offset,
                        aborted_transactions=[] if self.committed else None,
                        preferred_read_replica=-1,
                        records=records,
                    )
                )
            responses.append(
                TopicResponse(
                    topic=topic.topic if self.version < 13 else "",
                    topic_id=topic.topic_id if self.version >= 13 else ZERO_UUID,
                    partitions=parts,
                )
            )
        body = FetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=responses
        )
        return body, total, errors

    def partitions(self) -> list[Partition]:
        return [p for _, entries in self.plan for _, p, _ in entries if p is not None]


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


def handle_fetch(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 7 and request.session_epoch > 0:
        # An incremental fetch in a session this broker never created.
        return FetchResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            session_id=0,
            responses=[],
        )
    reader = _Reader(broker, ctx, request)
    body, total, errors = reader.read()
    wait_ms = min(max(request.max_wait_ms, 0), MAX_WAIT_MS)
    if total >= request.min_bytes or errors or wait_ms == 0 or not reader.partitions():
        return body
    return _long_poll(reader, request.min_bytes, wait_ms)


async def _long_poll(reader: _Reader, min_bytes: int, wait_ms: int) -> Any:
    """Waits until min_bytes are there or max_wait_ms passes (DelayedFetch)."""
    deadline = time.monotonic() + wait_ms / 1000
    partitions = reader.partitions()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        waiters = [p.wait_for_data() for p in partitions]
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        body, total, errors = reader.read()
        if total >= min_bytes or errors:
            return body
    body, _, _ = reader.read()
    return body


HANDLERS = {ApiKey.FETCH: handle_fetch}
