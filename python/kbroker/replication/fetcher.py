"""Replica fetchers: how a follower copies its leaders' logs.

`ReplicaFetcherManager` keeps, per leader broker, ``num.replica.fetchers``
`ReplicaFetcher`s; a partition this broker follows goes to one of its
leader's fetchers (by a hash of its name). Each fetcher is one task on one
connection that, in a loop:

1. For partitions that just became followers (or found their log diverging),
   agrees with the leader where the logs part (KIP-101, KIP-279):
   OffsetForLeaderEpoch for the follower's latest leader epoch; the leader
   answers the largest epoch it has at or below it and where that epoch
   ends there; the follower truncates to the smaller of that end and its own
   end of the same epoch, and asks again when it did not know the leader's
   epoch. The old rule (truncate to the high watermark) is never used when
   both sides have epochs, so a committed record cannot be cut.
2. Fetches every other partition from the leader in one Fetch request
   (``replica_id`` set: the leader reads up to its log end and counts the
   fetch offset as this replica's progress), appends the batches as they
   are (offsets, epochs and timestamps kept; the Rust log checks shape and
   CRCs), and takes the leader's high watermark and log start offset.

Errors park a partition for ``replica.fetch.backoff.ms`` (a short while for
UNKNOWN_LEADER_EPOCH: the leader has not had its order yet); the controller's
next LeaderAndIsr re-adds it with the new epoch. A fetch offset the leader no
longer has (OFFSET_OUT_OF_RANGE) is resolved with ListOffsets: a follower
behind the leader's log start starts again there, one ahead of the leader's
log end (only after an unclean election) truncates to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kbroker._kbroker import (
    AppendInfo,
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from kbroker.config import BrokerConfig
from kbroker.futures import cancel_and_wait
from kbroker.log import TopicPartition
from kbroker.log.manager import StorageErrors
from kbroker.network.client import BrokerConnection, BrokerUnreachable
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.errors import to_error_code
from kbroker.protocol.messages.core import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from kbroker.replication.partition import Partition
from kbroker.security.client import ClientSecurity

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # topics by name; last_fetched_epoch and diverging_epoch
OFFSET_FOR_LEADER_EPOCH_VERSION = 3  # replica_id
LIST_OFFSETS_VERSION = 4  # current_leader_epoch
UNDEFINED = -1
EARLIEST = -2
LATEST = -1
# Wait before retrying a partition whose leader has not heard of its epoch yet.
UNKNOWN_EPOCH_BACKOFF_S = 0.05


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    num_fetchers: int = 1
    max_bytes: int = 1 << 20  # replica.fetch.max.bytes, per partition
    response_max_bytes: int = 10 << 20  # replica.fetch.response.max.bytes
    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    # How connections to leaders (their inter-broker listener) are secured.
    security: ClientSecurity = field(default_factory=ClientSecurity)

    @classmethod
    def from_config(
        cls, config: BrokerConfig, security: ClientSecurity | None = None
    ) -> FetcherSettings:
        return cls(
            security=security or ClientSecurity(),
            num_fetchers=config.get_int("num.replica.fetchers"),
            max_bytes=config.get_int("replica.fetch.max.bytes"),
            response_max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            wait_max_ms=config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=config.get_int("replica.fetch.min.bytes"),
            backoff_ms=config.get_int("replica.fetch.backoff.ms"),
            socket_timeout_ms=config.get_int("replica.socket.timeout.ms"),
        )


@dataclass(slots=True)
class _Target:
    """One partition a fetcher follows."""

    partition: Partition
    leader_epoch: int
    # Still to agree with the leader where the logs part.
    truncating: bool = True
    # Parked until this loop time (after an error).
    parked_until: float = 0.0
    # Records the leader has committed that this replica has not (at the last answer).
    lag: int = 0


class ReplicaFetcher:
    """Fetches the partitions it is given from one leader, on one connection."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        fetcher_id: int,
        host: str,
        port: int,
        settings: FetcherSettings,
        errors: StorageErrors | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.settings = settings
        # Where failed appends are told (logged at most once a minute, and the broker's
        # listeners told); without it, each is logged.
        self.errors = errors
        self.conn = BrokerConnection(
            host,
            port,
            f"replica-fetcher-{broker_id}-{leader_id}-{fetcher_id}",
            max_response_bytes=settings.response_max_bytes + (16 << 20),
            security=settings.security,
        )
        self.targets: dict[TopicPartition, _Target] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def endpoint(self) -> tuple[str, int]:
        return self.conn.host, self.conn.port

    def add(self, partition: Partition, leader_epoch: int) -> None:
        self.targets[partition.tp] = _Target(partition, leader_epoch)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def remove(self, tp: TopicPartition) -> None:
        self.targets.pop(tp, None)

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        await self.conn.close()

    # -- the loop --------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except BrokerUnreachable as exc:
                log.info("replica fetcher from broker %d: %s", self.leader_id, exc)
                self._park(self.targets.values(), self.settings.backoff_ms / 1000)
            except Exception:
                log.exception("replica fetcher from broker %d failed a round", self.leader_id)
                self._park(self.targets.values(), self.settings.backoff_ms / 1000)

    async def _round(self) -> None:
        now = asyncio.get_running_loop().time()
        ready = [t for t in self.targets.values() if t.parked_until <= now]
        if not ready:
            self._wake.clear()
            wait = min((t.parked_until for t in self.targets.values()), default=now + 3600) - now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(wait, 0.001))
            return
        truncating = [t for t in ready if t.truncating]
        if truncating:
            await self._truncate(truncating)
            return
        await self._fetch(ready)

    def _park(self, targets: Iterable[_Target], seconds: float) -> None:
        until = asyncio.get_running_loop().time() + seconds
        for t in targets:
            t.parked_until = until

    def _current(self, tp: TopicPartition, epoch: int) -> _Target | None:
        """The target of ``tp`` if it is still followed in ``epoch`` (answers to requests
        made before a newer order are ignored)."""
        t = self.targets.get(tp)
        return t if t is not None and t.leader_epoch == epoch else None

    # -- truncation (KIP-101, KIP-279) -------------------------------------------------

    async def _truncate(self, targets: list[_Target]) -> None:
        asked: dict[TopicPartition, tuple[_Target, int]] = {}
        topics: dict[str, list[Any]] = {}
        for t in targets:
            p = t.partition
            latest = p.log.latest_epoch
            if latest is None:
                # No epochs: an empty log, or records from before epochs were kept.
                if p.log.log_end_offset > p.high_watermark:
                    try:
                        p.truncate_to(p.high_watermark)
                    except OSError as exc:
                        self._write_failed(t, "truncate", exc)
                        continue
                t.truncating = False
                continue
            asked[p.tp] = (t, t.leader_epoch)
            topics.setdefault(p.tp.topic, []).append(
                OffsetForLeaderEpochRequest.Topic.Partition(
                    partition=p.tp.partition,
                    current_leader_epoch=t.leader_epoch,
                    leader_epoch=latest,
                )
            )
        if not asked:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=self.broker_id,
            topics=[
                OffsetForLeaderEpochRequest.Topic(topic=name, partitions=parts)
                for name, parts in topics.items()
            ],
        )
        response = await self.conn.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            request,
            self.settings.socket_timeout_ms / 1000,
        )
        for topic in response.topics:
            for r in topic.partitions:
                tp = TopicPartition(topic.topic, r.partition)
                entry = asked.get(tp)
                if entry is None:
                    continue
                t, epoch = entry
                if self._current(tp, epoch) is not t:
                    continue
                if r.error_code != ErrorCode.NONE:
                    self._on_error(t, to_error_code(r.error_code))
                    continue
                self._truncate_to_leader(t, r.leader_epoch, r.end_offset)

    def _truncate_to_leader(self, t: _Target, leader_epoch: int, leader_end: int) -> bool:
        """Truncates where the leader's log parts from this one, given the leader's (largest
        epoch <= the one asked about, where it ends); asks again when not sure yet. False
        when the truncation could not be written (reported, and the partition parked)."""
        p = t.partition
        end = p.log.log_end_offset
        if leader_end == UNDEFINED:
            log.warning(
                "%s: leader %d knows no epoch at or below ours; keeping the log end %d",
                p.tp,
                self.leader_id,
                end,
            )
            t.truncating = False
            return True
        ask_again = False
        mine_epoch, mine_end = (
            (UNDEFINED, UNDEFINED)
            if leader_epoch == UNDEFINED
            else p.log.end_offset_for_epoch(leader_epoch)
        )
        if mine_epoch == UNDEFINED or mine_end == UNDEFINED:
            cut = min(leader_end, end)
        elif mine_epoch != leader_epoch:
            # This replica never had the leader's epoch: cut to where its own earlier
            # epoch ends and ask again about that one.
            cut = min(mine_end, end)
            ask_again = True
        else:
            cut = min(mine_end, leader_end, end)
        try:
            p.truncate_to(cut)
        except OSError as exc:
            self._write_failed(t, "truncate", exc)
            return False
        t.truncating = ask_again and p.log.log_end_offset > 0 and p.log.latest_epoch is not None
        return True

    # -- fetching -----------------------------------------------------------------------

    async def _fetch(self, targets: list[_Target]) -> None:
        s = self.settings
        topics: dict[str, list[Any]] = {}
        sent: dict[TopicPartition, tuple[_Target, int, int]] = {}
        for t in targets:
            p = t.partition
            offset = p.log.log_end_offset
            latest = p.log.latest_epoch
            sent[p.tp] = (t, t.leader_epoch, offset)
            topics.setdefault(p.tp.topic, []).append(
                FetchRequest.Topic.Partition(
                    partition=p.tp.partition,
                    current_leader_epoch=t.leader_epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=UNDEFINED if latest is None else latest,
                    log_start_offset=p.log.log_start_offset,
                    partition_max_bytes=s.max_bytes,
                )
            )
        request = FetchRequest(
            replica_id=self.broker_id,
            max_wait_ms=s.wait_max_ms,
            min_bytes=s.min_bytes,
            max_bytes=s.response_max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.Topic(topic=name, partitions=ps) for name, ps in topics.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        response = await self.conn.request(
            ApiKey.FETCH, FETCH_VERSION, request, (s.wait_max_ms + s.socket_timeout_ms) / 1000
        )
        if response.error_code != ErrorCode.NONE:
            log.info(
                "replica fetch from broker %d: %s",
                self.leader_id,
                to_error_code(response.error_code).name,
            )
            self._park(targets, s.backoff_ms / 1000)
            return
        out_of_range: list[_Target] = []
        # Appends on the I/O threads: (target, its leader epoch, answer, the write).
        writing: list[tuple[_Target, int, Any, asyncio.Future[AppendInfo]]] = []
        for topic in response.responses:
            for r in topic.partitions:
                tp = TopicPartition(topic.topic, r.partition_index)
                entry = sent.get(tp)
                if entry is None:
                    continue
                t, epoch, offset = entry
                if self._current(tp, epoch) is not t or t.partition.log.log_end_offset != offset:
                    continue
                code = to_error_code(r.error_code)
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(t)
                elif code != ErrorCode.NONE:
                    self._on_error(t, code)
                else:
                    written = self._take(t, r)
                    if written is not None:
                        writing.append((t, epoch, r, written))
        if writing:
            await asyncio.wait([w for *_, w in writing])
            for t, epoch, r, written in writing:
                if self._current(t.partition.tp, epoch) is t:
                    self._appended(t, r, written)
                elif not written.cancelled():
                    written.exception()  # the partition moved on; the write's outcome is moot
        for t in out_of_range:
            await self._resolve_out_of_range(t)

    def _take(self, t: _Target, r: Any) -> asyncio.Future[AppendInfo] | None:
        """Takes a partition's fetch answer: the append still being written (`_appended`
        finishes the answer once it is), or None when the answer is taken."""
        if not self._follows_leader(t, r):
            return None
        if r.records is None or len(r.records) == 0:
            self._appended(t, r, None)
            return None
        written = t.partition.append_as_follower(r.records)
        if not written.done():
            return written
        self._appended(t, r, written)
        return None

    def _follows_leader(self, t: _Target, r: Any) -> bool:
        """Truncates where the leader says the logs diverge; False when the partition
        waits (truncating, or reported and parked) instead of taking the answer."""
        diverging = r.diverging_epoch
        if diverging is not None and diverging.end_offset >= 0:
            if not self._truncate_to_leader(t, diverging.epoch, diverging.end_offset):
                return False  # reported; fetched again after a backoff
            if t.truncating:
                return False
        return True

    def _appended(self, t: _Target, r: Any, written: asyncio.Future[AppendInfo] | None) -> None:
        """The follower's side of a fetch answer once its records are written (None: it
        had none): errors handled, the leader's high watermark and log start taken."""
        p = t.partition
        try:
            if written is not None:
                written.result()
        except UnexpectedAppendOffsetError as exc:
            _, first, _last, log_end = exc.args
            if log_end == p.log.log_start_offset and first < log_end:
                # An empty replica, and the leader's log start is inside the batch.
                try:
                    p.truncate_fully_and_start_at(first)
                    p.append_as_follower_now(r.records)
                except OSError as again:
                    self._write_failed(t, "append to", again)
                    return
            else:
                log.warning("%s: fetched records that do not follow the log: %s", p.tp, exc)
                self._park([t], self.settings.backoff_ms / 1000)
                return
        except (CorruptRecordError, InvalidRecordError) as exc:
            log.error("%s: leader %d sent bad records: %s", p.tp, self.leader_id, exc)
            self._park([t], self.settings.backoff_ms / 1000)
            return
        except OSError as exc:
            self._write_failed(t, "append to", exc)
            return
        if self.errors is not None and written is not None:
            self.errors.succeeded("append to", p.tp)
        p.update_follower_high_watermark(r.high_watermark)
        t.lag = max(0, r.high_watermark - p.log.log_end_offset)
        if r.log_start_offset >= 0:
            try:
                p.maybe_increment_log_start_offset(r.log_start_offset)
            except (OSError, OffsetOutOfRangeError) as exc:
                log.warning(
                    "%s: cannot move the log start to %d: %s", p.tp, r.log_start_offset, exc
                )

    def _write_failed(self, t: _Target, what: str, exc: OSError) -> None:
        """A write to the replica's log failed (a full disk): a storage failure, which the
        broker answers by stepping down, not a fetcher bug; the partition waits a backoff."""
        if self.errors is not None:
            self.errors.write_failed(what, t.partition.tp, exc)
        else:
            log.error("%s %s failed: %s", what, t.partition.tp, exc)
        self._park([t], self.settings.backoff_ms / 1000)

    def _on_error(self, t: _Target, code: ErrorCode) -> None:
        p = t.partition
        if code == ErrorCode.UNKNOWN_LEADER_EPOCH:
            self._park([t], UNKNOWN_EPOCH_BACKOFF_S)
            return
        log.info(
            "%s: leader %d answered %s (epoch %d)", p.tp, self.leader_id, code.name, t.leader_epoch
        )
        self._park([t], self.settings.backoff_ms / 1000)

    async def _resolve_out_of_range(self, t: _Target) -> None:
        p = t.partition
        leader_end = await self._leader_offset(t, LATEST)
        if leader_end is None or self._current(p.tp, t.leader_epoch) is not t:
            return
        end = p.log.log_end_offset
        if leader_end < end:
            log.warning(
                "%s: leader %d ends at %d, before this replica's end %d (an unclean "
                "election?): truncating",
                p.tp,
                self.leader_id,
                leader_end,
                end,
            )
            try:
                p.truncate_to(max(leader_end, p.log.log_start_offset))
            except OSError as exc:
                self._write_failed(t, "truncate", exc)
            return
        leader_start = await self._leader_offset(t, EARLIEST)
        if leader_start is None or self._current(p.tp, t.leader_epoch) is not t:
            return
        if leader_start > p.log.log_end_offset:
            try:
                p.truncate_fully_and_start_at(leader_start)
            except OSError as exc:
                self._write_failed(t, "truncate", exc)

    async def _leader_offset(self, t: _Target, which: int) -> int | None:
        tp = t.partition.tp
        request = ListOffsetsRequest(
            replica_id=self.broker_id,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.Topic(
                    name=tp.topic,
                    partitions=[
                        ListOffsetsRequest.Topic.Partition(
                            partition_index=tp.partition,
                            current_leader_epoch=t.leader_epoch,
                            timestamp=which,
                        )
                    ],
                )
            ],
        )
        response = await self.conn.request(
            ApiKey.LIST_OFFSETS,
            LIST_OFFSETS_VERSION,
            request,
            self.settings.socket_timeout_ms / 1000,
        )
        for topic in response.topics:
            for r in topic.partitions:
                if r.partition_index == tp.partition:
                    if r.error_code != ErrorCode.NONE:
                        self._on_error(t, to_error_code(r.error_code))
                        return None
                    return int(r.offset)
        self._park([t], self.settings.backoff_ms / 1000)
        return None


class ReplicaFetcherManager:
    """The fetchers of the partitions this broker follows, by leader."""

    def __init__(
        self, broker_id: int, settings: FetcherSettings, errors: StorageErrors | None = None
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.errors = errors
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        # Which fetcher each followed partition is on.
        self._on: dict[TopicPartition, tuple[int, int]] = {}
        self._closing: set[asyncio.Future[None]] = set()

    def _close_later(self, fetcher: ReplicaFetcher) -> None:
        task = asyncio.ensure_future(fetcher.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def fetcher_id(self, tp: TopicPartition) -> int:
        return (zlib.crc32(tp.topic.encode()) * 31 + tp.partition) % self.settings.num_fetchers

    def follow(
        self, partition: Partition, leader_id: int, leader_epoch: int, endpoint: tuple[str, int]
    ) -> None:
        """Fetches ``partition`` from ``leader_id`` (at ``endpoint``) in ``leader_epoch``, after
        agreeing where their logs part."""
        tp = partition.tp
        key = (leader_id, self.fetcher_id(tp))
        if self._on.get(tp, key) != key:
            self.stop_following([tp])
        fetcher = self._fetchers.get(key)
        if fetcher is not None and fetcher.endpoint != endpoint:
            # The leader came back at another address: a new connection.
            self._close_later(fetcher)
            moved = list(fetcher.targets.values())
            fetcher = None
            del self._fetchers[key]
        else:
            moved = []
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.broker_id, leader_id, key[1], *endpoint, self.settings, self.errors
            )
            self._fetchers[key] = fetcher
            for m in moved:
                fetcher.add(m.partition, m.leader_epoch)
        fetcher.add(partition, leader_epoch)
        self._on[tp] = key

    def stop_following(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            key = self._on.pop(tp, None)
            if key is None:
                continue
            fetcher = self._fetchers.get(key)
            if fetcher is None:
                continue
            fetcher.remove(tp)
            if not fetcher.targets:
                del self._fetchers[key]
                self._close_later(fetcher)

    def max_lag(self) -> int:
        """The most records any followed partition is behind its leader's high watermark
        (Kafka's ReplicaFetcherManager MaxLag)."""
        return max(
            (t.lag for f in list(self._fetchers.values()) for t in list(f.targets.values())),
            default=0,
        )

    async def close(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._on.clear()
        for f in fetchers:
            await f.close()
