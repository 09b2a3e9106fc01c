"""Idempotent and transactional producer state of one partition.

For each producer id the partition remembers its epoch, the last few
batches it appended (first/last sequence and offsets), as Kafka does, so a
retried batch is recognised and answered with its original offsets instead
of being appended twice, and a gap in sequences is refused; and, for
transactional producers, the coordinator epoch of its last marker and the
first offset of its ongoing transaction on this partition.

Transactions: a producer's first transactional batch opens its transaction
here (at that batch's offset); its COMMIT or ABORT marker closes it. Until a
closed transaction's marker is below the high watermark it stays "unreplicated".
The first unstable offset is the smallest first offset of the open and
unreplicated transactions; the last stable offset (what read_committed
consumers may read up to) is the high watermark capped by it. An abort marker
yields a `CompletedTxn` whose entry goes to the segment's `.txnindex` (the
caller writes it; the transaction counts as closed only once it is written).
Kafka's rules are kept: a write with an older epoch is refused
(INVALID_PRODUCER_EPOCH), as is a marker of an older coordinator epoch
(TRANSACTION_COORDINATOR_FENCED) and a non-transactional batch while the
producer's transaction is open (INVALID_TXN_STATE). KIP-890: a client's
transactional batch that opens a transaction must carry the verification
guard this state handed out when the coordinator was asked about it
(`maybe_start_verification`), else INVALID_TXN_STATE.

A producer whose last write is ``producer.id.expiration.ms`` old is
forgotten (its next write is taken at any sequence), as Kafka does, unless
its transaction is open: its last write's time is the largest batch max
timestamp seen from it (the append time on LogAppendTime topics).
`expire_producers_periodically` does it for every partition every
``producer.id.expiration.check.interval.ms``; a snapshot leaves expired
producers out, and loading drops them too.

The state is saved in the partition directory (``producer-state.json``, kbroker's
own JSON, as of a log offset: `write_snapshot`); at start it is loaded and the
log replayed from that offset (`load_snapshot`), or from the log start when no
snapshot fits.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kbroker.metadata.store import write_atomically
from kbroker.replication.txn import AppendOrigin

if TYPE_CHECKING:
    from kbroker.config import BrokerConfig

from kbroker.errors import ErrorCode, PartitionError

# How many recent batches per producer are remembered for duplicate checks
# (a producer has at most 5 requests in flight per partition).
RECENT_BATCHES = 5
INT32_MAX = 2**31 - 1
log = logging.getLogger(__name__)

SNAPSHOT_FILE = "producer-state.json"
# Kafka's defaults of producer.id.expiration.ms and its check interval.
DEFAULT_EXPIRATION_MS = 86_400_000
DEFAULT_CHECK_INTERVAL_MS = 600_000
# Partitions handled between yields to the event loop while expiring.
_EXPIRE_CHUNK = 1000
# No epoch known yet (Kafka's RecordBatch.NO_PRODUCER_EPOCH).
NO_EPOCH = -1


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ProducerStateError(PartitionError):
    """A batch the producer state refuses."""


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: collections.deque[BatchMeta] = field(
        default_factory=lambda: collections.deque(maxlen=RECENT_BATCHES)
    )
    last_timestamp: int = -1
    # The coordinator epoch of the last marker written for it (-1: none yet).
    coordinator_epoch: int = -1
    # The first offset of its open transaction on this partition (-1: none open).
    txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        """A new epoch forgets the batches of the old one (Kafka's maybeUpdateProducerEpoch)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed."""

    producer_id: int
    first_offset: int
    # The marker's offset.
    last_offset: int
    aborted: bool
    # For the .txnindex entry: the first offset of the earliest transaction of another
    # producer still open, or the marker's offset + 1.
    last_stable_offset: int


class VerificationGuard:
    """A token of one KIP-890 verification: only the append made with the token the
    state holds for the producer may open its transaction (identity compared)."""

    __slots__ = ()


@dataclass(slots=True)
class _Verification:
    guard: VerificationGuard
    epoch: int
    # The lowest sequence seen while verifying: a batch with a higher one cannot open the
    # transaction (an earlier batch is still on its way).
    lowest_sequence: int
    created_ms: int


class ProducerBatchFacts(Protocol):
    """The header facts a replay needs (`kbroker._kbroker.ProducerBatch`)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def control_type(self) -> int: ...
    @property
    def coordinator_epoch(self) -> int: ...


# Control types of transaction markers (the control record key's type).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Records an aborted transaction in the transaction index (raises on failure, before
# the transaction counts as closed).
AbortRecorder = Callable[[CompletedTxn], None]


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    """Sequence of a batch's last record; sequences wrap from 2^31-1 to 0."""
    return (first_seq + last_offset_delta) % (INT32_MAX + 1)


def _in_sequence(last_seq: int, next_first_seq: int) -> bool:
    return next_first_seq == (0 if last_seq == INT32_MAX else last_seq + 1)


class ProducerStateManager:
    def __init__(
        self,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        """``expiration_ms`` is producer.id.expiration.ms (the periodic check keeps it
        current); ``clock`` gives the time in ms (tests inject one)."""
        self._producers: dict[int, ProducerEntry] = {}
        self.expiration_ms = expiration_ms
        self.clock = clock
        # Open transactions: producer id -> first offset.
        self._ongoing: dict[int, int] = {}
        # Closed transactions whose marker is not below the high watermark yet:
        # first offset -> marker offset.
        self._unreplicated: dict[int, int] = {}
        # The smallest first offset of both (None: every offset is stable).
        self.first_unstable_offset: int | None = None
        # KIP-890: producers being verified with their coordinator.
        self._verifying: dict[int, _Verification] = {}
        # A transactional batch or a marker was seen: truncation must replay the log
        # (a cut marker reopens its transaction), not just forget batches.
        self.has_txn_state = False

    def __len__(self) -> int:
        return len(self._producers)

    def _update_first_unstable(self) -> None:
        firsts = [*self._ongoing.values(), *self._unreplicated]
        self.first_unstable_offset = min(firsts) if firsts else None

    # -- checks before an append ------------------------------------------------

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_offset_delta: int,
        *,
        transactional: bool = False,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        guard: VerificationGuard | None = None,
        verification: bool = False,
    ) -> BatchMeta | None:
        """Checks a data batch before it is appended (Kafka's ProducerAppendInfo).

        Returns the cached metadata of an identical earlier batch (a client's
        duplicate: answer with its offsets, append nothing), None if the
        batch may be appended, and raises ProducerStateError otherwise.
        ``verification``: transaction.partition.verification.enable, under
        which a transactional batch that opens a transaction needs ``guard``.
        """
        entry = self._producers.get(producer_id)
        last_seq = last_sequence(first_seq, last_offset_delta)
        if origin == AppendOrigin.CLIENT and entry is not None and entry.epoch == epoch:
            for meta in entry.batches:
                if meta.first_seq == first_seq and meta.last_seq == last_seq:
                    return meta
        open_txn = entry is not None and entry.txn_first_offset >= 0
        if (
            origin != AppendOrigin.REPLICATION
            and transactional
            and not open_txn
            and verification
            and (guard is None or self.verification_guard(producer_id) is not guard)
        ):
            raise ProducerStateError(
                ErrorCode.INVALID_TXN_STATE, "Record was not part of an ongoing transaction"
            )
        if entry is not None and epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if origin == AppendOrigin.CLIENT:
            self._check_sequence(producer_id, entry, epoch, first_seq)
        if open_txn and not transactional:
            raise ProducerStateError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {producer_id} wrote a non-transactional batch while its "
                "transaction is open",
            )
        return None

    def _check_sequence(
        self, producer_id: int, entry: ProducerEntry | None, epoch: int, first_seq: int
    ) -> None:
        verifying = self._verifying.get(producer_id)
        if verifying is not None and first_seq > verifying.lowest_sequence:
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} sent sequence {first_seq} before "
                f"{verifying.lowest_sequence}, the earliest being verified",
            )
        if entry is None or entry.epoch == NO_EPOCH:
            # Unknown producer (new, or its state expired): any sequence is accepted,
            # as the log that held its history may be gone.
            return
        if epoch != entry.epoch:
            if first_seq != 0:
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, "
                    f"not {first_seq}",
                )
            return
        if not _in_sequence(entry.last_seq, first_seq):
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} sent sequence {first_seq}, expected {entry.last_seq + 1}",
            )

    def check_marker(
        self, producer_id: int, epoch: int, coordinator_epoch: int, origin: AppendOrigin
    ) -> None:
        """Checks a transaction marker before it is appended: not of an older producer
        epoch (INVALID_PRODUCER_EPOCH) nor of an older coordinator
        (TRANSACTION_COORDINATOR_FENCED). Replicated markers are never refused."""
        if origin == AppendOrigin.REPLICATION:
            return
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker of producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )

    # -- updates after an append ------------------------------------------------

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_offset_delta: int,
        first_offset: int,
        timestamp: int,
        *,
        transactional: bool = False,
    ) -> None:
        """Records an appended data batch; a transactional one opens the producer's
        transaction if none is open."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(epoch)
            self._producers[producer_id] = entry
        entry.set_epoch(epoch)
        entry.batches.append(
            BatchMeta(
                first_seq,
                last_sequence(first_seq, last_offset_delta),
                first_offset,
                first_offset + last_offset_delta,
                timestamp,
            )
        )
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if transactional:
            self.has_txn_state = True
            self._verifying.pop(producer_id, None)
            if entry.txn_first_offset < 0:
                entry.txn_first_offset = first_offset
                self._ongoing[producer_id] = first_offset
                self._update_first_unstable()

    def append_marker(
        self,
        producer_id: int,
        epoch: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        committed: bool,
        record_abort: AbortRecorder | None = None,
    ) -> CompletedTxn | None:
        """Records an appended transaction marker at ``offset``: the producer's open
        transaction closes (None when none was open: nothing to index, the LSO is not
        held by it). An aborted one is first given to ``record_abort`` (the
        `.txnindex` entry); if that raises, nothing changes."""
        self.has_txn_state = True
        entry = self._producers.get(producer_id)
        completed = None
        if entry is not None and entry.txn_first_offset >= 0:
            others = [f for pid, f in self._ongoing.items() if pid != producer_id]
            completed = CompletedTxn(
                producer_id,
                entry.txn_first_offset,
                offset,
                not committed,
                min(others) if others else offset + 1,
            )
            if completed.aborted and record_abort is not None:
                record_abort(completed)
        if entry is None:
            entry = ProducerEntry(epoch)
            self._producers[producer_id] = entry
        entry.set_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        entry.txn_first_offset = -1
        self._verifying.pop(producer_id, None)
        if completed is not None:
            self._ongoing.pop(producer_id, None)
            self._unreplicated[completed.first_offset] = offset
            self._update_first_unstable()
        return completed

    def on_high_watermark(self, high_watermark: int) -> None:
        """Closed transactions whose marker is below ``high_watermark`` are stable now."""
        if not self._unreplicated:
            return
        done = [f for f, last in self._unreplicated.items() if last < high_watermark]
        if done:
            for first in done:
                del self._unreplicated[first]
            self._update_first_unstable()

    # -- KIP-890 verification ---------------------------------------------------

    def has_ongoing_txn(self, producer_id: int) -> bool:
        return producer_id in self._ongoing

    def maybe_start_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard | None:
        """The guard to verify ``producer_id``'s next transactional batch with, or None
        when its transaction is open here already (no verification needed). A
        verification in progress is joined (its lowest sequence lowered); a newer epoch
        starts a new one."""
        if producer_id in self._ongoing:
            return None
        state = self._verifying.get(producer_id)
        if state is None or epoch > state.epoch:
            state = _Verification(VerificationGuard(), epoch, sequence, self.clock())
            self._verifying[producer_id] = state
        elif epoch == state.epoch:
            state.lowest_sequence = min(state.lowest_sequence, sequence)
        return state.guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        state = self._verifying.get(producer_id)
        return None if state is None else state.guard

    # -- truncation and expiry --------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Forgets batches at or after ``offset`` (the log was truncated). Only right
        for a partition without transactional state (`has_txn_state`): one with it is
        rebuilt from its snapshot and log instead."""
        for pid in list(self._producers):
            entry = self._producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self._producers[pid]
            else:
                entry.batches = collections.deque(kept, maxlen=RECENT_BATCHES)
        self._verifying.clear()
        if offset < 0:
            self._ongoing.clear()
            self._unreplicated.clear()
            self.has_txn_state = False
            self._update_first_unstable()

    def producer_ids(self) -> list[int]:
        return list(self._producers)

    def entries(self) -> dict[int, ProducerEntry]:
        """The producers known (DescribeProducers); the caller does not change them."""
        return self._producers

    def _is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        # Kafka's test: no open transaction, and
        # currentTimeMs - lastTimestamp >= producer.id.expiration.ms.
        return entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int | None = None) -> int:
        """Drops producers whose last write is ``expiration_ms`` old (and verifications
        that old); returns how many producers."""
        now = self.clock() if now_ms is None else now_ms
        stale = [pid for pid, e in self._producers.items() if self._is_expired(e, now)]
        for pid in stale:
            del self._producers[pid]
        for pid in [
            p for p, v in self._verifying.items() if now - v.created_ms >= self.expiration_ms
        ]:
            del self._verifying[pid]
        return len(stale)

    # -- snapshots ----------------------------------------------------------

    def write_snapshot(self, directory: Path, offset: int) -> None:
        """Saves the state as of log offset ``offset``, expired producers left out.

        Atomic and durable: a temp file, fsync'ed, renamed over the old one,
        and the directory fsync'ed. A snapshot that records no producer only
        spares the next start a scan of the log, so it skips both fsyncs
        (a shutdown with many idle partitions stays quick): lost or torn, it
        is rebuilt from the log.
        """
        self.remove_expired()
        data = {
            "offset": offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "batches": [
                        [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                        for b in e.batches
                    ],
                    "last_timestamp": e.last_timestamp,
                    "coordinator_epoch": e.coordinator_epoch,
                    "txn_first_offset": e.txn_first_offset,
                }
                for pid, e in self._producers.items()
            },
        }
        path = directory / SNAPSHOT_FILE
        if self._producers:
            write_atomically(path, json.dumps(data))
            return
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk keeps no half-written copy
            raise

    def load_snapshot(self, directory: Path, log_end: int) -> int:
        """Loads a snapshot; returns the offset to rebuild from (0 if none fits)."""
        path = directory / SNAPSHOT_FILE
        if not path.exists():
            return 0
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            offset = int(data["offset"])
            if offset > log_end:
                return 0
            producers: dict[int, ProducerEntry] = {}
            for pid, raw in data["producers"].items():
                entry = ProducerEntry(int(raw["epoch"]))
                for first_seq, last_seq, first_offset, last_offset, ts in raw["batches"]:
                    entry.batches.append(
                        BatchMeta(first_seq, last_seq, first_offset, last_offset, ts)
                    )
                    entry.last_timestamp = max(entry.last_timestamp, ts)
                entry.last_timestamp = max(entry.last_timestamp, int(raw.get("last_timestamp", -1)))
                entry.coordinator_epoch = int(raw.get("coordinator_epoch", -1))
                entry.txn_first_offset = int(raw.get("txn_first_offset", -1))
                producers[int(pid)] = entry
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable (%s); producer state is rebuilt from the log", path, exc)
            return 0
        self._producers = producers
        self._ongoing = {
            pid: e.txn_first_offset for pid, e in producers.items() if e.txn_first_offset >= 0
        }
        self._unreplicated.clear()
        self._verifying.clear()
        self.has_txn_state = bool(self._ongoing) or any(
            e.coordinator_epoch >= 0 for e in producers.values()
        )
        self._update_first_unstable()
        self.remove_expired()
        return offset

    def rebuild(
        self,
        batches: Iterable[ProducerBatchFacts],
        record_abort: AbortRecorder | None = None,
    ) -> None:
        """Replays logged batches (after `load_snapshot`): data batches and markers, each
        abort given to ``record_abort`` as when it was appended; producers that have
        expired are dropped."""
        for b in batches:
            if b.producer_id < 0:
                continue
            if b.is_control:
                if b.control_type in (CONTROL_ABORT, CONTROL_COMMIT):
                    self.append_marker(
                        b.producer_id,
                        b.producer_epoch,
                        b.coordinator_epoch,
                        b.base_offset,
                        b.max_timestamp,
                        b.control_type == CONTROL_COMMIT,
                        record_abort,
                    )
                continue
            self.update(
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
                b.last_offset - b.base_offset,
                b.base_offset,
                b.max_timestamp,
                transactional=b.is_transactional,
            )
        self.remove_expired()


def expire_idle_producers(managers: Iterable[ProducerStateManager], expiration_ms: int) -> int:
    """One pass of producer expiry over ``managers``; returns the producers dropped."""
    dropped = 0
    for manager in managers:
        manager.expiration_ms = expiration_ms
        dropped += manager.remove_expired()
    return dropped


async def expire_producers_periodically(
    managers: Callable[[], Iterable[ProducerStateManager]], config: BrokerConfig
) -> None:
    """Runs `expire_idle_producers` over ``managers()`` (every partition's producer state)
    every producer.id.expiration.check.interval.ms, until cancelled.

    It runs on the event loop, which owns the producer state, yielding now
    and then so that many partitions never stall it.
    """
    while True:
        await asyncio.sleep(config.get_int("producer.id.expiration.check.interval.ms") / 1000)
        try:
            expiration_ms = config.get_int("producer.id.expiration.ms")
            dropped = 0
            batch: list[ProducerStateManager] = []
            for manager in list(managers()):
                batch.append(manager)
                if len(batch) == _EXPIRE_CHUNK:
                    dropped += expire_idle_producers(batch, expiration_ms)
                    batch.clear()
                    await asyncio.sleep(0)
            dropped += expire_idle_producers(batch, expiration_ms)
            if dropped:
                log.info("expired %d idle producer(s) (producer.id.expiration.ms)", dropped)
        except Exception:
            # A bug must not end producer expiry for good.
            log.exception("producer expiry pass failed")
