"""One partition as the broker serves it: its log, leadership and high watermark.

`Partition` owns the partition's state that changes with writes: the high
watermark (the offset below which every in-sync replica has the data;
consumers never see past it), the producer state (idempotent producers and
open transactions) and from both the last stable offset (read_committed
consumers never see past it: the high watermark, or the first offset of the
earliest transaction not yet decided and replicated). Transaction markers are
written by `append_marker_as_leader` (the coordinator's WriteTxnMarkers) or
copied by a follower; an abort adds its entry to the segment's `.txnindex`
before the transaction counts as closed. Leadership
(leader, epoch, ISR) comes from the controller's orders; the replica manager
changes it with `become_leader` / `become_follower`. Whenever the high
watermark or the log end moves, ``on_progress(tp)`` tells the replica
manager, which wakes the requests waiting on this partition.

As leader it tracks each follower's progress from the follower's fetches
(`update_follower_fetch_state`): the high watermark is the smallest log end
of the in-sync replicas, a follower that reaches it joins the ISR, and one
that has not caught up for ``replica.lag.time.max.ms`` leaves it
(`maybe_shrink_isr`). An ISR change is asked of the controller
(``request_isr``) and takes effect only once the controller wrote it
(`isr_change_answered`); while it is pending, the high watermark counts the
larger of the old and the asked ISR (Kafka's "maximal ISR"), and acks=all
counts the smaller, so neither can run ahead of what the controller knows.

Every write to the log goes through `writes` (`OrderedWrites`), one at a time in
order: its checks run on the event loop when its turn comes, the write itself on
an I/O thread, the state it changes is updated back on the loop. A write that
finds the log truncated or the leadership changed while it was being written
(``_log_changes`` moved) rebuilds the producer state from the log, which holds
whatever it wrote, and a leader's write is answered NOT_LEADER_OR_FOLLOWER.

As follower it appends the leader's batches as they are (`append_as_follower`),
truncates where its log diverges from the leader's (`truncate_to`) and moves its
log start up to the leader's (`maybe_increment_log_start_offset`), which is how
DeleteRecords reaches it: the leader's `low_watermark`, the smallest log start
of the ISR, is what DeleteRecords waits for.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kbroker._kbroker import (
    AppendInfo,
    BatchInfo,
    LogSlice,
    ProducerBatch,
    end_txn_marker_batch,
)
from kbroker.errors import ErrorCode, PartitionError
from kbroker.log import Log, TopicPartition
from kbroker.log.io_threads import IoThreads, OrderedWrites, Ready, written_now
from kbroker.metadata.model import PartitionState
from kbroker.replication.producer_state import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
    wall_ms,
)
from kbroker.replication.txn import AppendOrigin

log = logging.getLogger(__name__)

# Every log fence this process hands out (`Partition._move_fence`).
_FENCES = itertools.count(1)

# Producer batches read per call while rebuilding producer state.
_SCAN_BATCHES = 4096


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ProduceResult:
    base_offset: int
    log_append_time: int
    log_start_offset: int
    # The offset after the last record appended (or found duplicate).
    end_offset: int


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower, from its fetches (Kafka's remote replica)."""

    broker_id: int
    # The follower's log end: the offset of its last fetch (-1: not fetched yet).
    log_end_offset: int = -1
    log_start_offset: int = -1
    # When it last had everything the leader had (monotonic ms; 0: never).
    last_caught_up_ms: int = 0
    # The leader's log end and the time at its previous fetch.
    last_fetch_leader_end: int = -1
    last_fetch_ms: int = 0


# Asks the controller for a new ISR of a partition this broker leads.
IsrRequester = Callable[["Partition", list[int]], None]
# Told of a marker a follower copied: (partition, producer id, committed, offset).
MarkerObserver = Callable[[TopicPartition, int, bool, int], None]


class Partition:
    def __init__(
        self,
        log_: Log,
        state: PartitionState,
        broker_id: int,
        new: bool = False,
        high_watermark: int | None = None,
        io: IoThreads | None = None,
    ) -> None:
        """``new``: the log was just created, so there is no producer state to rebuild.
        ``high_watermark``: the last one checkpointed (None: the log end, a single node's).
        ``io``: the threads writes run on (None: inline)."""
        self.log = log_
        self.io = io
        self.writes = OrderedWrites()
        # Moves with every truncation and leadership change: a write that sees it move
        # between its prepare and its finish cannot trust what it prepared.
        self._log_changes = 0
        self._move_fence()
        self.closed = False
        # The end of what the producer state has taken from the log (each write's
        # finish moves it; writes started after may already be in the log).
        self._applied_end = log_.log_end_offset
        self.tp = log_.tp
        self.state = state
        self.broker_id = broker_id
        end = log_.log_end_offset
        if high_watermark is None:
            high_watermark = end
        self.high_watermark = min(max(high_watermark, log_.log_start_offset), end)
        self.producers = ProducerStateManager()
        self.on_progress: Callable[[TopicPartition], None] | None = None
        # Set by the replica manager: told of each marker this replica copies as follower.
        self.on_follower_marker: MarkerObserver | None = None
        # Told when the controller fences this leadership.
        self.on_fenced: Callable[[TopicPartition], None] | None = None
        # Set by the replica manager in a cluster: how ISR changes reach the controller,
        # and who hears of those written (old ISR, new ISR).
        self.request_isr: IsrRequester | None = None
        self.on_isr_change: Callable[[list[int], list[int]], None] | None = None
        # Leader: the followers' progress, the ISR asked for and not answered yet, where
        # this leader's epoch starts, and whether the controller fenced this leadership.
        self.followers: dict[int, FollowerProgress] = {}
        self.pending_isr: list[int] | None = None
        self.epoch_start_offset = end
        self.fenced = False
        if not new:
            self._rebuild_producer_state()
        self.producers.on_high_watermark(self.high_watermark)
        # Producer state is saved when the log rolls (and at close), so a restart after a
        # crash replays at most the segments since.
        self._snapshot_segment = log_.active_segment_base_offset
        if self.is_leader:
            self._start_leading(monotonic_ms())
            self._maybe_advance_high_watermark()  # alone in the ISR: up to the log end

    # -- leadership ----------------------------------------------------------

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id and not self.fenced

    @property
    def replicas(self) -> list[int]:
        return self.state.replicas

    @property
    def isr(self) -> list[int]:
        """The ISR the controller wrote (what acks=all and min.insync.replicas count)."""
        return self.state.isr

    @property
    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark waits for: the written one and, while a change is
        pending, the one asked for too."""
        isr = set(self.state.isr)
        if self.pending_isr is not None:
            isr.update(self.pending_isr)
        return isr

    def become_leader(self, state: PartitionState) -> None:
        """This broker leads from ``state.leader_epoch`` on."""
        self._move_fence()
        self.state = state
        self.fenced = False
        self._start_leading(monotonic_ms())
        self._maybe_advance_high_watermark()

    def _start_leading(self, now_ms: int) -> None:
        self.pending_isr = None
        # Followers asking where the previous epoch ended learn it from here (an empty
        # log has nothing to truncate: its first append records the epoch). A follower
        # append still being written (on an I/O thread) lands before the epoch's start.
        self.epoch_start_offset = self.log.start_epoch_at_log_end(self.state.leader_epoch)
        self.followers = {
            r: FollowerProgress(r, last_caught_up_ms=now_ms if r in self.state.isr else 0)
            for r in self.state.replicas
            if r != self.broker_id
        }

    def become_follower(self, state: PartitionState) -> None:
        """Another broker leads; this one stops answering reads and writes."""
        self._move_fence()
        self.state = state
        self.fenced = False
        self.followers = {}
        self.pending_isr = None

    def check_enough_replicas_reached(
        self, required_offset: int, min_insync_replicas: int
    ) -> tuple[bool, ErrorCode]:
        """acks=all: (done, error) for records ending at ``required_offset``."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.state.isr) < min_insync_replicas:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fences requests from clients with a different view of leadership (KIP-320)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.state.leader_epoch:
            return
        if current_leader_epoch < self.state.leader_epoch:
            raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH)
        raise PartitionError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # -- followers' progress (leader) ------------------------------------------

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int
    ) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end): notes its progress,
        then the ISR may grow and the high watermark move. False if it is no replica."""
        progress = self.followers.get(replica_id)
        if progress is None:
            return False
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end = leader_end
        progress.last_fetch_ms = now_ms
        progress.log_end_offset = fetch_offset
        progress.log_start_offset = log_start_offset
        self._maybe_expand_isr(progress)
        self._maybe_advance_high_watermark()
        return True

    def _maybe_expand_isr(self, progress: FollowerProgress) -> None:
        if (
            self.pending_isr is not None
            or self.request_isr is None
            or progress.broker_id in self.state.isr
            or not self.is_leader
        ):
            return
        caught_up = progress.log_end_offset >= max(self.high_watermark, self.epoch_start_offset)
        if caught_up:
            self._ask_isr([*self.state.isr, progress.broker_id], "caught up")

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> None:
        """Drops from the ISR the followers that have not caught up for ``max_lag_ms``."""
        if self.pending_isr is not None or self.request_isr is None or not self.is_leader:
            return
        leader_end = self.log.log_end_offset
        lagging = [
            r
            for r in self.state.isr
            if r != self.broker_id
            and (p := self.followers.get(r)) is not None
            and p.log_end_offset != leader_end
            and now_ms - p.last_caught_up_ms > max_lag_ms
        ]
        if lagging:
            self._ask_isr([r for r in self.state.isr if r not in lagging], f"{lagging} lag")

    def _ask_isr(self, isr: list[int], why: str) -> None:
        assert self.request_isr is not None
        log.info(
            "%s: asking for ISR %s (was %s): %s, high watermark %d, log end %d",
            self.tp,
            isr,
            self.state.isr,
            why,
            self.high_watermark,
            self.log.log_end_offset,
        )
        self.pending_isr = isr
        self.request_isr(self, isr)

    def isr_change_answered(
        self,
        error: ErrorCode,
        state: PartitionState | None,
        asked: list[int] | None = None,
        asked_in_epoch: int | None = None,
    ) -> None:
        """The controller's answer to the ISR change ``asked`` in leader epoch
        ``asked_in_epoch`` (None: the pending one): the written state, or why not. An
        answer to a change that is no longer pending changes nothing."""
        if self.pending_isr is None:
            return
        if asked is not None and (
            asked != self.pending_isr or asked_in_epoch != self.state.leader_epoch
        ):
            return
        if error == ErrorCode.NONE and state is not None:
            if state.leader_epoch != self.state.leader_epoch or state.version < self.state.version:
                return  # an answer about another leadership: a newer order already came
            self.pending_isr = None
            before = self.state.isr
            self.state = PartitionState(
                replicas=list(self.state.replicas),
                leader=self.state.leader,
                leader_epoch=self.state.leader_epoch,
                isr=list(state.isr),
                controller_epoch=self.state.controller_epoch,
                version=state.version,
                offline_replicas=list(self.state.offline_replicas),
            )
            log.info("%s: ISR now %s (partition epoch %d)", self.tp, state.isr, state.version)
            if self.on_isr_change is not None:
                self.on_isr_change(before, self.state.isr)
            self._maybe_advance_high_watermark()
            if self.on_progress is not None:
                self.on_progress(self.tp)  # acks=all waits count the ISR
            return
        self.pending_isr = None
        if error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            # Leadership moved on without this broker hearing of it yet: it stops
            # taking writes until the controller's next order.
            log.warning("%s: the controller fenced this leader (%s)", self.tp, error.name)
            self.fenced = True
            if self.on_fenced is not None:
                self.on_fenced(self.tp)
            if self.on_progress is not None:
                self.on_progress(self.tp)
        else:
            log.info("%s: ISR change refused (%s); kept %s", self.tp, error.name, self.state.isr)

    @property
    def low_watermark(self) -> int:
        """The smallest log start offset of the replicas in the ISR (the leader's own
        alone, when no follower has reported one yet): what DeleteRecords waits for."""
        low = self.log.log_start_offset
        for r in self.maximal_isr:
            progress = self.followers.get(r)
            if progress is not None and progress.log_start_offset >= 0:
                low = min(low, progress.log_start_offset)
        return low

    # -- writes ----------------------------------------------------------------

    def append_as_leader(
        self,
        batches: bytes | memoryview,
        infos: list[BatchInfo],
        required_acks: int,
        min_insync_replicas: int,
        log_append_time: bool,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        guard: VerificationGuard | None = None,
        verification: bool = False,
    ) -> asyncio.Future[ProduceResult]:
        """Appends validated data batches (all or none), handling idempotent retries and
        the producer's transaction, after the writes before it. ``origin`` decides what
        is checked; ``guard`` and ``verification`` are KIP-890's (see
        `ProducerStateManager.check`)."""
        return self.writes.submit(
            *self._leader_append(
                batches,
                infos,
                required_acks,
                min_insync_replicas,
                log_append_time,
                origin,
                guard,
                verification,
                inline=False,
            ),
            # An idempotent batch's sequence is checked against the batches before it.
            alone=any(i.producer_id >= 0 for i in infos),
        )

    def append_as_leader_now(
        self,
        batches: bytes | memoryview,
        infos: list[BatchInfo],
        required_acks: int = 1,
        min_insync_replicas: int = 1,
        log_append_time: bool = False,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        guard: VerificationGuard | None = None,
        verification: bool = False,
    ) -> ProduceResult:
        """`append_as_leader` on this thread, for callers without an event loop."""
        return self.writes.run_inline(
            *self._leader_append(
                batches,
                infos,
                required_acks,
                min_insync_replicas,
                log_append_time,
                origin,
                guard,
                verification,
                inline=True,
            )
        )

    def _leader_append(
        self,
        batches: bytes | memoryview,
        infos: list[BatchInfo],
        required_acks: int,
        min_insync_replicas: int,
        log_append_time: bool,
        origin: AppendOrigin,
        guard: VerificationGuard | None,
        verification: bool,
        inline: bool,
    ) -> tuple[
        Callable[[], tuple[int, int] | Ready[ProduceResult]],
        Callable[[tuple[int, int]], Any],
        Callable[[tuple[int, int], AppendInfo], ProduceResult],
    ]:
        """The three steps of a leader's append (see `OrderedWrites`); ``inline``: the
        write writes itself, else it starts the write on an I/O thread."""
        idempotent = [i for i in infos if i.producer_id >= 0]

        def prepare() -> tuple[int, int] | Ready[ProduceResult]:
            self._check_can_append(required_acks, min_insync_replicas)
            if idempotent:
                if len(infos) != 1:
                    raise PartitionError(
                        ErrorCode.INVALID_RECORD,
                        "an idempotent produce carries one batch per partition",
                    )
                info = infos[0]
                duplicate = self.producers.check(
                    info.producer_id,
                    info.producer_epoch,
                    info.base_sequence,
                    info.last_offset_delta,
                    transactional=info.is_transactional,
                    origin=origin,
                    guard=guard,
                    verification=verification,
                )
                if duplicate is not None:
                    return Ready(
                        ProduceResult(
                            duplicate.first_offset,
                            -1,
                            self.log.log_start_offset,
                            duplicate.last_offset + 1,
                        )
                    )
            return self._log_changes, self.state.leader_epoch

        def write(prepared: tuple[int, int]) -> Any:
            return self._append(inline, batches, prepared, log_append_time)

        def finish(prepared: tuple[int, int], appended: AppendInfo) -> ProduceResult:
            self._check_unchanged(prepared[0])
            if idempotent:
                info = infos[0]
                self.producers.update(
                    info.producer_id,
                    info.producer_epoch,
                    info.base_sequence,
                    info.last_offset_delta,
                    appended.first_offset,
                    appended.max_timestamp,  # the append time on LogAppendTime topics
                    transactional=info.is_transactional,
                )
            return self._written_as_leader(appended)

        return prepare, write, finish

    def append_marker_as_leader(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        min_insync_replicas: int,
        log_append_time: bool,
    ) -> asyncio.Future[ProduceResult]:
        """Writes a transaction marker (WriteTxnMarkers, acks=all) after the writes before
        it: the producer's transaction on this partition closes, an abort is indexed.
        Refused with INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED for a stale
        marker."""
        return self.writes.submit(
            *self._marker_append(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                committed,
                min_insync_replicas,
                log_append_time,
                inline=False,
            )
        )

    def append_marker_as_leader_now(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        min_insync_replicas: int = 1,
        log_append_time: bool = False,
    ) -> ProduceResult:
        """`append_marker_as_leader` on this thread, for callers without an event loop."""
        return self.writes.run_inline(
            *self._marker_append(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                committed,
                min_insync_replicas,
                log_append_time,
                inline=True,
            )
        )

    def _marker_append(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        min_insync_replicas: int,
        log_append_time: bool,
        inline: bool,
    ) -> tuple[
        Callable[[], tuple[int, int]],
        Callable[[tuple[int, int]], Any],
        Callable[[tuple[int, int], AppendInfo], ProduceResult],
    ]:
        """The three steps of writing a transaction marker (see `OrderedWrites`)."""

        def prepare() -> tuple[int, int]:
            self._check_can_append(-1, min_insync_replicas)
            self.producers.check_marker(
                producer_id, producer_epoch, coordinator_epoch, AppendOrigin.COORDINATOR
            )
            return self._log_changes, self.state.leader_epoch

        def write(prepared: tuple[int, int]) -> Any:
            batch = end_txn_marker_batch(
                producer_id, producer_epoch, coordinator_epoch, committed, wall_ms()
            )
            return self._append(inline, batch, prepared, log_append_time)

        def finish(prepared: tuple[int, int], appended: AppendInfo) -> ProduceResult:
            self._check_unchanged(prepared[0])
            self.producers.append_marker(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                appended.first_offset,
                appended.max_timestamp,
                committed,
                self._index_abort,
            )
            return self._written_as_leader(appended)

        return prepare, write, finish

    def _written_as_leader(self, appended: AppendInfo) -> ProduceResult:
        """A leader's write is in its producer's state: the rest follows, and its answer."""
        self._applied_end = appended.last_offset + 1
        self._after_append()
        return ProduceResult(
            appended.first_offset,
            appended.log_append_time,
            self.log.log_start_offset,
            appended.last_offset + 1,
        )

    def _append(
        self,
        inline: bool,
        batches: bytes | memoryview,
        prepared: tuple[int, int],
        log_append_time: bool,
    ) -> Any:
        """A leader's write, prepared under (fence, leader epoch): written now
        (``inline``), or its future (an I/O thread's)."""
        fence, leader_epoch = prepared
        if inline:
            return self.log.append(batches, leader_epoch, log_append_time)
        if self.io is not None:
            return self.io.append(self.log, batches, leader_epoch, log_append_time, fence)
        return written_now(self.log.append, batches, leader_epoch, log_append_time)

    def _move_fence(self) -> None:
        """The partition changed hands or is cut: writes prepared before cannot trust
        what they checked. Those still queued on the I/O threads are refused by the log
        (waiting here for the one being written); those written meanwhile see
        ``_log_changes`` moved when they finish."""
        # Fences are unique in the process: a log outlives the Partition objects that
        # serve it one after another.
        self._log_changes = next(_FENCES)
        self.log.set_fence(self._log_changes)

    def _check_unchanged(self, log_changes: int) -> None:
        """A leader's write whose partition was truncated or changed hands while it was
        being written: the producer state is rebuilt from the log (which holds whatever
        it wrote), and the write is answered as a leader's that no longer leads."""
        if log_changes == self._log_changes:
            return
        if not self.closed:
            self._reload_producer_state()
        raise PartitionError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER, "the leadership changed while the batch was written"
        )

    def _check_can_append(self, required_acks: int, min_insync_replicas: int) -> None:
        if not self.is_leader or self.closed:
            # Closed: no longer served here (stopped, deleted, moved away); a write that
            # queued behind the close is answered as the leader that no longer leads.
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.state.isr) < min_insync_replicas:
            raise PartitionError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR of {len(self.state.isr)} is below min.insync.replicas={min_insync_replicas}",
            )

    def _after_append(self) -> None:
        self._maybe_snapshot_producers()
        if not self._maybe_advance_high_watermark() and self.on_progress is not None:
            self.on_progress(self.tp)  # followers waiting for new data

    def _index_abort(self, txn: CompletedTxn) -> None:
        """The `.txnindex` entry of an aborted transaction (before it counts as closed)."""
        self.log.add_aborted_txn(
            txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
        )

    def _maybe_advance_high_watermark(self) -> bool:
        """Moves the high watermark to the smallest log end of the (maximal) ISR; True
        when it moved (and ``on_progress`` was told)."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        if len(self.state.isr) > 1 or self.pending_isr is not None:
            for r in self.maximal_isr:
                if r != self.broker_id:
                    progress = self.followers.get(r)
                    new_hw = min(new_hw, -1 if progress is None else progress.log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.producers.on_high_watermark(new_hw)
            if self.on_progress is not None:
                self.on_progress(self.tp)
            return True
        return False

    # -- follower --------------------------------------------------------------

    def append_as_follower(self, batches: bytes | memoryview) -> asyncio.Future[AppendInfo]:
        """Appends the leader's batches as they are, after the writes before; their
        producers' state follows (transactions open and close, aborts are indexed, as on
        the leader)."""
        return self.writes.submit(*self._follower_append(batches, inline=False), alone=False)

    def append_as_follower_now(self, batches: bytes | memoryview) -> AppendInfo:
        """`append_as_follower` on this thread, for callers without an event loop."""
        return self.writes.run_inline(*self._follower_append(batches, inline=True))

    def _follower_append(
        self, batches: bytes | memoryview, inline: bool
    ) -> tuple[
        Callable[[], int],
        Callable[[int], Any],
        Callable[[int, AppendInfo], AppendInfo],
    ]:
        def prepare() -> int:
            return self._log_changes

        def write(fence: int) -> Any:
            if inline:
                return self.log.append_as_follower(batches)
            if self.io is not None:
                return self.io.append_as_follower(self.log, batches, fence)
            return written_now(self.log.append_as_follower, batches)

        def finish(log_changes: int, appended: AppendInfo) -> AppendInfo:
            if log_changes != self._log_changes:
                # Truncated or promoted while the batches were written: the log is the
                # truth of what stayed.
                if not self.closed:
                    self._reload_producer_state()
                return appended
            self._follower_appended(appended)
            return appended

        return prepare, write, finish

    def _follower_appended(self, appended: AppendInfo) -> None:
        self._applied_end = appended.last_offset + 1
        markers: list[tuple[int, bool, int]] = []
        for b in appended.producer_batches:
            if not b.is_control:
                self.producers.update(
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    b.last_offset - b.base_offset,
                    b.base_offset,
                    b.max_timestamp,
                    transactional=b.is_transactional,
                )
            elif b.control_type in (CONTROL_ABORT, CONTROL_COMMIT):
                committed = b.control_type == CONTROL_COMMIT
                self.producers.append_marker(
                    b.producer_id,
                    b.producer_epoch,
                    b.coordinator_epoch,
                    b.base_offset,
                    b.max_timestamp,
                    committed,
                    self._index_abort,
                )
                markers.append((b.producer_id, committed, b.base_offset))
        self._maybe_snapshot_producers()
        if self.on_follower_marker is not None:
            for producer_id, committed, offset in markers:
                self.on_follower_marker(self.tp, producer_id, committed, offset)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """The leader's high watermark, bounded by what this follower has."""
        self.high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        self.producers.on_high_watermark(self.high_watermark)

    def truncate_to(self, offset: int) -> None:
        """Drops this replica's records from ``offset`` on (they diverge from the leader's)."""
        self._move_fence()
        if offset >= self.log.log_end_offset:
            # No record goes, but an epoch this replica began at its log end as a leader
            # that wrote nothing does (the log drops it): fetching with it, the leader
            # would answer each fetch with the same divergence, and nothing would move.
            self.log.truncate_to(offset)
            return
        log.info(
            "%s: truncating from %d to %d (high watermark %d)",
            self.tp,
            self.log.log_end_offset,
            offset,
            self.high_watermark,
        )
        try:
            self.log.truncate_to(offset)
        finally:
            # A full disk can refuse what the cut writes (checkpoints, indexes) after the
            # records went: what follows the log follows its end as it is now.
            end = self.log.log_end_offset
            self.high_watermark = min(self.high_watermark, end)
            if self.producers.has_txn_state:
                # A cut marker reopens its transaction: replay from the saved state.
                self._reload_producer_state()
            else:
                self.producers.truncate(end)
            self._applied_end = min(self._applied_end, end)
        self._snapshot_producers()  # a saved state from above the cut no longer fits

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empties this replica and starts it at ``offset`` (the leader's log start)."""
        self._move_fence()
        log.info("%s: emptied to start at the leader's log start %d", self.tp, offset)
        self.log.truncate_fully_and_start_at(offset)
        self._applied_end = offset
        self.producers = ProducerStateManager(self.producers.expiration_ms, self.producers.clock)
        self.high_watermark = offset
        self._snapshot_producers()

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """The leader's log start moved (retention, DeleteRecords): this replica follows,
        never above its own high watermark."""
        target = min(offset, self.high_watermark)
        if target > self.log.log_start_offset:
            self.log.delete_records_before(target)

    # -- reads ---------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool, upper_bound: int | None = None
    ) -> LogSlice | None:
        """Reads whole batches from ``offset``, never past ``upper_bound`` (default: the HW).

        Raises OffsetOutOfRangeError outside [log start, log end].
        """
        bound = self.high_watermark if upper_bound is None else upper_bound
        if bound <= offset <= self.log.log_end_offset:
            return None
        return self.log.read(offset, max_bytes, bound, min_one_batch)

    @property
    def last_stable_offset(self) -> int:
        """The offset read_committed consumers read up to: the high watermark, or the
        first offset of the earliest transaction still open or whose marker is not
        replicated yet (never below the log start). Never past what the producer state
        has taken either: a write still finishing may open a transaction the state does
        not know yet, though its records are in the log and replicated."""
        upper = min(self.high_watermark, max(self._applied_end, self.log.log_start_offset))
        first = self.producers.first_unstable_offset
        if first is None:
            return upper
        return min(upper, max(first, self.log.log_start_offset))

    # -- maintenance -------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: offset -1 means the high watermark."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
        return self.log.delete_records_before(offset)

    def close(self) -> None:
        self._move_fence()
        self.closed = True
        self._snapshot_producers()

    def _maybe_snapshot_producers(self) -> None:
        """After a write's finish: a snapshot when the log rolled, at the end of what the
        producer state has taken (later writes may be in the log already)."""
        active = self.log.active_segment_base_offset
        if active != self._snapshot_segment:
            self._snapshot_segment = active
            self._snapshot_producers(self._applied_end)

    def _snapshot_producers(self, at: int | None = None) -> None:
        """Saves the producer state as of offset ``at`` (None: the log end, unless a
        write is under way, whose producer the state has not taken yet: no snapshot)."""
        if at is None:
            if self.writes.writing:
                return  # the next roll or close saves it
            at = self.log.log_end_offset
        try:
            # The state saved at an offset covers the markers below it: their .txnindex
            # entries must be on disk before it is.
            self.log.sync_txn_indexes()
            self.producers.write_snapshot(self.log.dir, at)
        except OSError as exc:
            log.warning("could not save producer state of %s: %s", self.tp, exc)

    def _rebuild_producer_state(self) -> None:
        """Loads the saved producer state and replays the log after it (from the log
        start when there is none, or when recovery cut a damaged transaction index,
        whose entries only a replay of every marker restores)."""
        start = 0
        if not self.log.txn_index_damaged:
            start = self.producers.load_snapshot(self.log.dir, self.log.log_end_offset)
        start = max(start, self.log.log_start_offset)
        self.producers.rebuild(self._producer_batches(start), self._index_abort)

    def _reload_producer_state(self) -> None:
        """Producer state anew from the snapshot and the log (after a truncation)."""
        self._applied_end = self.log.log_end_offset
        self.producers = ProducerStateManager(self.producers.expiration_ms, self.producers.clock)
        start = self.producers.load_snapshot(self.log.dir, self.log.log_end_offset)
        start = max(start, self.log.log_start_offset)
        self.producers.rebuild(self._producer_batches(start), self._index_abort)
        self.producers.on_high_watermark(self.high_watermark)

    def _producer_batches(self, offset: int) -> Iterator[ProducerBatch]:
        """The batches with a producer id from ``offset`` to the log end."""
        end = self.log.log_end_offset
        while offset < end:
            batches, following = self.log.producer_batches_from(offset, _SCAN_BATCHES)
            yield from batches
            if following <= offset:
                return
            offset = following
