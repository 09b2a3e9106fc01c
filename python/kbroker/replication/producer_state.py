"""Idempotent producer state of one partition.

For each producer id the partition remembers its epoch and the last few
batches it appended (first/last sequence and offsets), as Kafka does, so a
retried batch is recognised and answered with its original offsets instead
of being appended twice, and a gap in sequences is refused.
"""

from __future__ import annotations

import collections
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.errors import ErrorCode, PartitionError

# How many recent batches per producer are remembered for duplicate checks
# (a producer has at most 5 requests in flight per partition).
RECENT_BATCHES = 5
INT32_MAX = 2**31 - 1
log = logging.getLogger(__name__)

SNAPSHOT_FILE = "producer-state.json"


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
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

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
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_seq}",
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

    def expire(self, now_ms: int, max_idle_ms: int) -> int:
        """Drops producers idle longer than ``max_idle_ms``; returns how many."""
        stale = [
            pid for pid, e in self._producers.items() if now_ms - e.last_timestamp > max_idle_ms
        ]
        for pid in stale:
            del self._producers[pid]
        return len(stale)

    # -- snapshots ----------------------------------------------------------

    def write_snapshot(self, directory: Path, offset: int) -> None:
        """Saves the state as of log offset ``offset`` (atomically)."""
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
        tmp = path.with_suffix(".tmp")
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
        return offset

    def rebuild(self, batches: Iterable[tuple[int, int, int, int, int, int]]) -> None:
        """Replays (producer_id, epoch, base_seq, last_offset_delta, base_offset, max_ts) of logged batches."""
        for pid, epoch, base_seq, delta, base_offset, ts in batches:
            if pid >= 0:
                self.update(pid, epoch, base_seq, delta, base_offset, ts)
