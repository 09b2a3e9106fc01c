"""Idempotent producer state of one partition.

For each producer id the partition remembers its epoch and the last few
batches it appended (first/last sequence and offsets), as Kafka does, so a
retried batch is recognised and answered with its original offsets instead
of being appended twice, and a gap in sequences is refused.

A producer whose last write is ``producer.id.expiration.ms`` old is
forgotten (its next write is taken at any sequence), as Kafka does: its last
write's time is the largest batch max timestamp seen from it (the append
time on LogAppendTime topics). `expire_producers_periodically` does it for
every partition every ``producer.id.expiration.check.interval.ms``; a
snapshot leaves expired producers out, and loading drops them too.
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
from typing import TYPE_CHECKING

from kbroker.metadata import write_atomically

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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


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

    def __len__(self) -> int:
        return len(self._producers)

    def check(
        self, producer_id: int, epoch: int, first_seq: int, last_offset_delta: int
    ) -> BatchMeta | None:
        """Checks a batch before it is appended.

        Returns the cached metadata of an identical earlier batch (a
        duplicate: answer with its offsets, append nothing), None if the
        batch may be appended, and raises ProducerStateError otherwise.
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            # Unknown producer (new, or its state expired): any sequence is
            # accepted, as the log that held its history may be gone.
            return None
        if epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        last_seq = last_sequence(first_seq, last_offset_delta)
        if epoch > entry.epoch:
            if first_seq != 0:
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, "
                    f"not {first_seq}",
                )
            return None
        for meta in entry.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        if entry.batches and not _in_sequence(entry.last_seq, first_seq):
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} sent sequence {first_seq}, expected {entry.last_seq + 1}",
            )
        return None

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_offset_delta: int,
        first_offset: int,
        timestamp: int,
    ) -> None:
        """Records an appended batch."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            entry = ProducerEntry(epoch)
            self._producers[producer_id] = entry
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

    def truncate(self, offset: int) -> None:
        """Forgets batches at or after ``offset`` (the log was truncated)."""
        for pid in list(self._producers):
            entry = self._producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self._producers[pid]
            else:
                entry.batches = collections.deque(kept, maxlen=RECENT_BATCHES)

    def producer_ids(self) -> list[int]:
        return list(self._producers)

    def _is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        # Kafka's test: currentTimeMs - lastTimestamp >= producer.id.expiration.ms.
        return now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int | None = None) -> int:
        """Drops producers whose last write is ``expiration_ms`` old; returns how many."""
        now = self.clock() if now_ms is None else now_ms
        stale = [pid for pid, e in self._producers.items() if self._is_expired(e, now)]
        for pid in stale:
            del self._producers[pid]
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
                producers[int(pid)] = entry
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable (%s); producer state is rebuilt from the log", path, exc)
            return 0
        self._producers = producers
        self.remove_expired()
        return offset

    def rebuild(self, batches: Iterable[tuple[int, int, int, int, int, int]]) -> None:
        """Replays (producer_id, epoch, base_seq, last_offset_delta, base_offset, max_ts) of
        logged batches (after `load_snapshot`); producers that have expired are dropped."""
        for pid, epoch, base_seq, delta, base_offset, ts in batches:
            if pid >= 0:
                self.update(pid, epoch, base_seq, delta, base_offset, ts)
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
