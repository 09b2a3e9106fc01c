"""The log cleaner: compaction of the logs whose cleanup.policy includes compact.

It owns the choice of what to clean and when, and how far (a partition's last
stable offset); the Rust core owns the work (offset map, rewrite, transactions'
aborted records and markers, crash-safe segment swap; see rust/src/cleaner.rs). One
pass runs at a time, in a worker thread with the GIL released, so neither the
event loop nor the log's readers and writers wait on it. A log whose pass
fails is left alone for a while instead of being retried in a loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kbroker._kbroker import KBrokerError
from kbroker.config import BrokerConfig
from kbroker.log.log import CleanableInfo, CleanerConfig, CleanStats, Log, TopicPartition
from kbroker.log.manager import LogManager

log = logging.getLogger(__name__)

# A log whose pass failed waits this many backoffs before the next try.
FAILED_LOG_BACKOFFS = 10


@dataclass(frozen=True)
class CleanerSettings:
    """The broker's log.cleaner.* settings."""

    enable: bool = True
    backoff_ms: int = 15_000
    config: CleanerConfig = field(default_factory=CleanerConfig)

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> CleanerSettings:
        return cls(
            enable=config["log.cleaner.enable"],
            backoff_ms=config["log.cleaner.backoff.ms"],
            config=CleanerConfig(
                dedupe_buffer_bytes=config["log.cleaner.dedupe.buffer.size"],
                load_factor=config["log.cleaner.io.buffer.load.factor"],
                io_buffer_bytes=config["log.cleaner.io.buffer.size"],
                io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
            ),
        )


# The highest offset a log's cleaner may reach: its last stable offset, which is
# at most its high watermark. Data above the high watermark may still be truncated
# and must not erase older values of its keys; below the last stable offset every
# transaction has ended, so the core can tell committed records from aborted ones
# (by the segments' aborted-transaction index) and decide about their markers.
MaxOffsetFor = Callable[[TopicPartition], "int | None"]


def _no_bound(_tp: TopicPartition) -> int | None:
    return None


class LogCleaner:
    """Picks the dirtiest compacted log and cleans it, one pass at a time."""

    def __init__(
        self,
        logs: LogManager,
        settings: Callable[[], CleanerSettings],
        max_offset_for: MaxOffsetFor = _no_bound,
        on_pass: Callable[[CleanStats, float], None] | None = None,
    ) -> None:
        """``on_pass(stats, dirty_ratio)`` hears of each finished pass (cleaner metrics)."""
        self._logs = logs
        self._on_pass = on_pass
        self._settings = settings
        self._max_offset_for = max_offset_for
        # Logs whose last pass failed, with the monotonic time they may retry.
        self._failed: dict[TopicPartition, float] = {}

    def pick(self) -> tuple[Log, CleanableInfo] | None:
        """The log most in need of a pass, if any is due.

        Logs past max.compaction.lag.ms or with an expired tombstone horizon
        come first; then the highest dirty ratio.
        """
        now = time.monotonic()
        best: tuple[tuple[bool, float], Log, CleanableInfo] | None = None
        for log_ in self._logs.logs():
            if self._failed.get(log_.tp, 0.0) > now:
                continue
            try:
                info = log_.cleanable(self._max_offset_for(log_.tp))
            except (OSError, KBrokerError, ValueError):
                continue
            if not info.due:
                continue
            rank = (info.compaction_lag_due or info.delete_horizon_due, info.dirty_ratio)
            if best is None or rank > best[0]:
                best = (rank, log_, info)
        return None if best is None else (best[1], best[2])

    def clean_once(self) -> CleanStats | None:
        """Cleans the dirtiest due log (blocking). None when none is due."""
        picked = self.pick()
        if picked is None:
            return None
        log_, info = picked
        settings = self._settings()
        try:
            stats = log_.clean(settings.config, self._max_offset_for(log_.tp))
        except (OSError, KBrokerError, ValueError) as exc:
            log.error("cleaning %s failed: %s", log_.tp, exc)
            self._failed[log_.tp] = (
                time.monotonic() + FAILED_LOG_BACKOFFS * settings.backoff_ms / 1000
            )
            return None
        self._failed.pop(log_.tp, None)
        if self._on_pass is not None:
            self._on_pass(stats, info.dirty_ratio)
        log.info(
            "cleaned %s (dirty ratio %.2f): %d -> %d bytes, %d records removed, "
            "%d tombstones dropped, %d aborted records and %d transaction markers removed, "
            "%d segments written in %d ms%s%s",
            log_.tp,
            info.dirty_ratio,
            stats.bytes_read,
            stats.bytes_written,
            stats.records_removed,
            stats.tombstones_dropped,
            stats.aborted_records_removed,
            stats.markers_removed,
            stats.segments_written,
            stats.elapsed_ms,
            "" if stats.complete else " (more passes needed)",
            " (aborted: the log changed)" if stats.aborted else "",
        )
        return stats

    async def run(self) -> None:
        """Cleans due logs until cancelled, sleeping log.cleaner.backoff.ms when idle."""
        while True:
            settings = self._settings()
            stats = await asyncio.to_thread(self.clean_once) if settings.enable else None
            if stats is None or stats.aborted:
                await asyncio.sleep(max(settings.backoff_ms, 10) / 1000)
