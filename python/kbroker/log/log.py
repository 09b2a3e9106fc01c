"""One partition's log: the Rust segment log, named by topic and partition.

The Rust core owns the files (segments, indexes, checkpoints, recovery); this
module gives it an identity (`TopicPartition`, whose directory name it is, and
Kafka's rules for a legal topic name), translates Kafka's topic-level setting
names into its config, and logs what recovery did to each segment.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kbroker import _kbroker
from kbroker._kbroker import (
    AppendInfo,
    CleanableInfo,
    CleanerConfig,
    CleanStats,
    LogConfig,
    LogSlice,
    ProducerBatch,
    RecoveryNote,
    StaleLeaderEpochError,
    UnexpectedAppendOffsetError,
)
from kbroker.config import LONG_MAX, Value

log = logging.getLogger(__name__)

__all__ = [
    "AppendInfo",
    "CleanStats",
    "CleanableInfo",
    "CleanerConfig",
    "Log",
    "LogConfig",
    "LogSlice",
    "ProducerBatch",
    "RecoveryNote",
    "StaleLeaderEpochError",
    "TopicPartition",
    "UnexpectedAppendOffsetError",
    "illegal_topic_name",
    "log_config_from_topic",
]

# Kafka's legal topic names; they double as directory names.
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_TOPIC_NAME_LENGTH = 249


def illegal_topic_name(name: str) -> str | None:
    """Why ``name`` cannot be a topic's name, in the words Kafka's INVALID_TOPIC_EXCEPTION
    carries (tools print them), or None for a legal name."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (
            f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
        )
    elif not TOPIC_NAME.match(name):
        reason = (
            f"'{name}' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    else:
        return None
    return f"Topic name is invalid: {reason}"


_DIR_NAME = re.compile(r"^([a-zA-Z0-9._-]{1,249})-(\d{1,10})$")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    @property
    def dirname(self) -> str:
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dirname(cls, name: str) -> TopicPartition | None:
        match = _DIR_NAME.match(name)
        if not match or match.group(1) in (".", ".."):
            return None
        return cls(match.group(1), int(match.group(2)))

    def __str__(self) -> str:
        return self.dirname


# Recovery note kinds (see RecoveryNote) that drop data.
DATA_DROPPING_RECOVERY = frozenset({"truncated", "deleted-segment", "reset"})


def _segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def _log_recovery_note(tp: TopicPartition, note: RecoveryNote) -> None:
    """One log line per thing recovery did: WARN when data was dropped or a file ignored."""
    segment = _segment_name(note.segment)
    if note.kind == "truncated":
        log.warning(
            "recovery of %s truncated segment %s at byte %d (offset %d): dropped %d bytes: %s",
            tp,
            segment,
            note.position,
            note.offset,
            note.bytes,
            note.detail,
        )
    elif note.kind == "deleted-segment":
        log.warning(
            "recovery of %s deleted segment %s (offset %d on, %d bytes) %s",
            tp,
            segment,
            note.offset,
            note.bytes,
            note.detail,
        )
    elif note.kind == "reset":
        log.warning(
            "recovery of %s deleted every segment (offset %d on, %d bytes): %s",
            tp,
            note.offset,
            note.bytes,
            note.detail,
        )
    elif note.kind == "bad-checkpoint":
        log.warning("recovery of %s treated a damaged checkpoint as missing: %s", tp, note.detail)
    elif note.kind == "cut-txn-index":
        log.warning(
            "recovery of %s cut the transaction index of segment %s (%s); it is rebuilt "
            "from the log's markers",
            tp,
            segment,
            note.detail,
        )
    else:
        log.info("recovery of %s rebuilt the indexes of segment %s", tp, segment)


def log_config_from_topic(config: Mapping[str, Value]) -> LogConfig:
    """Builds the storage config from effective topic-level settings."""

    def num(name: str) -> int:
        value = config[name]
        assert isinstance(value, int) and not isinstance(value, bool), name
        return value

    flush_messages = num("flush.messages")
    policy = config["cleanup.policy"]
    assert isinstance(policy, list), "cleanup.policy"
    ratio = config["min.cleanable.dirty.ratio"]
    assert isinstance(ratio, float | int), "min.cleanable.dirty.ratio"
    return LogConfig(
        segment_bytes=num("segment.bytes"),
        segment_ms=num("segment.ms"),
        segment_index_bytes=num("segment.index.bytes"),
        index_interval_bytes=num("index.interval.bytes"),
        retention_ms=num("retention.ms"),
        retention_bytes=num("retention.bytes"),
        flush_messages=min(flush_messages, LONG_MAX),
        flush_ms=num("flush.ms"),
        file_delete_delay_ms=num("file.delete.delay.ms"),
        cleanup_compact="compact" in policy,
        cleanup_delete="delete" in policy,
        delete_retention_ms=num("delete.retention.ms"),
        min_compaction_lag_ms=num("min.compaction.lag.ms"),
        max_compaction_lag_ms=num("max.compaction.lag.ms"),
        min_cleanable_dirty_ratio=float(ratio),
    )


class Log:
    """The log of one topic-partition."""

    __slots__ = ("_log", "tp")

    def __init__(self, tp: TopicPartition, raw: _kbroker.Log) -> None:
        self.tp = tp
        self._log = raw

    @classmethod
    def open(
        cls, data_dir: Path, tp: TopicPartition, config: LogConfig, same_kernel: bool = False
    ) -> Log:
        """Opens (creating or recovering) the log of ``tp`` under ``data_dir``.
        ``same_kernel``: its last writer ran under the kernel running now (see
        `kbroker.log.kernel_mark`), so an unclean shutdown left at most a torn tail."""
        raw = _kbroker.Log(str(data_dir / tp.dirname), config, now_ms(), same_kernel)
        return cls.opened(tp, raw)

    @classmethod
    def opened(cls, tp: TopicPartition, raw: _kbroker.Log) -> Log:
        """The log of ``tp`` over a core log just opened, telling what its recovery did."""
        for note in raw.recovery_notes:
            _log_recovery_note(tp, note)
        return cls(tp, raw)

    @property
    def core(self) -> _kbroker.Log:
        """The Rust log itself (for the I/O threads, which write to it without the GIL)."""
        return self._log

    @property
    def recovery_notes(self) -> list[RecoveryNote]:
        """What recovery did when the log was opened."""
        return self._log.recovery_notes

    @property
    def txn_index_damaged(self) -> bool:
        """Recovery cut a damaged transaction index: the markers must be replayed from the
        log start to restore it."""
        return any(note.kind == "cut-txn-index" for note in self._log.recovery_notes)

    @property
    def recovery_truncations(self) -> int:
        """Data-dropping recovery actions at open: cut tails, deleted segments, resets."""
        return sum(1 for note in self._log.recovery_notes if note.kind in DATA_DROPPING_RECOVERY)

    def append(
        self, batches: bytes | memoryview, leader_epoch: int = 0, log_append_time: bool = False
    ) -> AppendInfo:
        """Appends validated batches, assigning offsets from the log end. Raises
        StaleLeaderEpochError when ``leader_epoch`` is below the latest the log knows."""
        now = now_ms()
        return self._log.append(batches, leader_epoch, now if log_append_time else None, now)

    def append_as_follower(self, batches: bytes | memoryview) -> AppendInfo:
        """Appends a leader's batches as they are (offsets, epochs, timestamps kept).

        Checks their shape and CRCs and that offsets rise from the log end. Raises
        UnexpectedAppendOffsetError (an OffsetOutOfRangeError) when the first batch starts
        before the log end: a stale fetch answer, or, on an empty log, a leader whose log
        start is inside the batch (then ``truncate_fully_and_start_at`` its base offset
        and append again). The answer's ``producer_batches`` feed the producer state and
        ``last_leader_epoch`` is the last batch's epoch.
        """
        return self._log.append_as_follower(batches, now_ms())

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> LogSlice | None:
        return self._log.read(offset, max_bytes, max_offset, min_one_batch)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self._log.offset_for_timestamp(timestamp)

    # -- transactions ----------------------------------------------------------

    def add_aborted_txn(
        self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
    ) -> bool:
        """Records an aborted transaction in the `.txnindex` of the segment holding its
        marker (``last_offset``); False when that marker's entry is there already."""
        return self._log.add_aborted_txn(producer_id, first_offset, last_offset, last_stable_offset)

    def aborted_txns_for_slice(self, start: int, records: LogSlice) -> list[tuple[int, int]]:
        """(producer id, first offset) of each transaction a read_committed reader of
        ``records`` (read from ``start``) must know was aborted."""
        return self._log.aborted_txns_for_slice(start, records)

    def collect_aborted_txns(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the transactions aborted at or after ``start``
        that began below ``upper``."""
        return self._log.collect_aborted_txns(start, upper)

    def sync_txn_indexes(self) -> None:
        """fsync of the `.txnindex` files written since their last sync."""
        self._log.sync_txn_indexes()

    @property
    def aborted_txns(self) -> list[tuple[int, int, int, int]]:
        """Every `.txnindex` entry: (producer id, first offset, last offset, last stable
        offset), in marker order."""
        return self._log.aborted_txns()

    def producer_batches_from(
        self, offset: int, max_batches: int
    ) -> tuple[list[ProducerBatch], int]:
        """Up to ``max_batches`` batches with a producer id from the one holding ``offset``
        on (headers, and a marker's type and coordinator epoch), and the offset to go on
        from: the log end when done."""
        return self._log.producer_batches_from(offset, max_batches)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        return self._log.max_timestamp_and_offset()

    def truncate_to(self, offset: int) -> None:
        """Drops offsets >= ``offset`` (the batch holding it goes whole), indexes and
        leader epochs included. Raises OffsetOutOfRangeError below the log start."""
        self._log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empties the log (epochs included) and starts it again at ``offset``."""
        self._log.truncate_fully_and_start_at(offset)

    # -- leader epochs (KIP-101, KIP-279) ------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, where it ends); (-1, -1)
        for an unknown epoch above the latest, -1 or an empty cache."""
        return self._log.end_offset_for_epoch(epoch)

    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """Notes that ``epoch`` starts at ``start_offset`` (a new leader: its log end)."""
        self._log.maybe_assign_epoch_start_offset(epoch, start_offset)

    def set_fence(self, fence: int) -> None:
        """The log's fence from now on, once the write in progress is done: a write the
        I/O threads were given under another fence is refused when its turn comes."""
        self._log.set_fence(fence)

    def start_epoch_at_log_end(self, epoch: int) -> int:
        """A new leader's first act: ``epoch`` starts at the log end as it is once every
        append in progress is written (when the log holds anything). Returns that end."""
        return self._log.start_epoch_at_log_end(epoch)

    @property
    def latest_epoch(self) -> int | None:
        return self._log.latest_epoch

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (epoch, start offset) pairs, oldest first."""
        return self._log.epoch_entries

    def delete_records_before(self, offset: int) -> int:
        return self._log.delete_records_before(offset)

    def apply_retention(self, max_offset: int | None = None) -> int:
        """Deletes expired segments (time and size retention), only those ending at or
        below ``max_offset`` when given (the high watermark)."""
        return self._log.apply_retention(now_ms(), max_offset)

    def cleanable(self, max_offset: int | None = None) -> CleanableInfo:
        """How dirty the log is below ``max_offset`` and whether cleaning is due."""
        return self._log.cleanable(now_ms(), max_offset)

    def clean(self, config: CleanerConfig, max_offset: int | None = None) -> CleanStats:
        """One compaction pass below ``max_offset`` (blocking; run it in a thread)."""
        return self._log.clean(now_ms(), config, max_offset)

    def maybe_roll(self) -> None:
        self._log.maybe_roll(now_ms())

    def maybe_flush(self) -> bool:
        return self._log.maybe_flush(now_ms())

    def flush(self) -> None:
        self._log.flush()

    def close(self) -> None:
        self._log.close()

    def delete(self) -> None:
        self._log.delete()

    def set_config(self, config: LogConfig) -> None:
        self._log.set_config(config)

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._log.recovery_point

    @property
    def size_bytes(self) -> int:
        return self._log.size_bytes

    @property
    def segment_count(self) -> int:
        return self._log.segment_count

    @property
    def segment_base_offsets(self) -> list[int]:
        return self._log.segment_base_offsets

    @property
    def active_segment_base_offset(self) -> int:
        """Where the segment appends go to starts (it changes when the log rolls)."""
        return self._log.active_segment_base_offset

    @property
    def dir(self) -> Path:
        return Path(self._log.dir)

    def __repr__(self) -> str:
        return f"Log({self.tp}, start={self.log_start_offset}, end={self.log_end_offset})"
