"""All partition logs of one data directory.

Owns the directory (an exclusive lock so two brokers never share it), opens
and recovers every partition found at start, creates and deletes logs, and
runs the background work: time-based flush (flush.ms), time-based roll
(segment.ms), retention (retention.ms / retention.bytes) and, given a
cleaner (kbroker.log.cleaner, which works on the logs of a manager),
compaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kbroker import _kbroker
from kbroker.log import kernel_mark
from kbroker.log.io_threads import IoThreads
from kbroker.log.log import Log, LogConfig, TopicPartition, now_ms
from kbroker.log.partition_metadata import encode_topic_id

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
# Directories of deleted topics are renamed with this suffix, then removed, so
# a crash half way through a delete never brings a partition back.
DELETED_SUFFIX = ".deleted"

ConfigFor = Callable[[str], LogConfig]
# Threads closing logs at shutdown.
CLOSE_THREADS = 8


def default_max_open_files() -> int:
    """log.max.open.files when unset: half the RLIMIT_NOFILE soft limit (the rest is
    for sockets and everything else), at least 16."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft // 2)


class BackgroundWork(Protocol):
    """Work that runs beside flush and retention until cancelled (the log cleaner)."""

    async def run(self) -> None: ...


class DataDirLocked(RuntimeError):
    """Another process holds the data directory."""


class StorageErrors:
    """Logs storage failures without flooding the log.

    Failures are keyed by what failed (``"append to", tp``). A key gets at
    most one ERROR line per ``interval_s``: the first failure of an episode
    says it failed, a long episode says every interval that it still fails,
    and the first success after a reported episode says (INFO) that it works
    again. A full disk hit by every produce request, or a nearly full one
    where appends fail and succeed by turns, thus costs a handful of lines.

    Failed writes of partition data (``write_failed``: appends, rolls, flushes,
    new logs) are also told to the listeners added with ``on_write_failure``,
    from whichever thread the write failed on.
    """

    @dataclass(slots=True)
    class _Episode:
        failures: int = 0
        reported: bool = False

    def __init__(self, interval_s: float = 60.0) -> None:
        self._interval_s = interval_s
        # (what, subject) -> its failure episode, while it lasts
        self._failing: dict[tuple[str, Hashable], StorageErrors._Episode] = {}
        # (what, subject) -> monotonic time of its last ERROR line
        self._last_reported: dict[tuple[str, Hashable], float] = {}
        self._lock = threading.Lock()
        self._write_listeners: list[Callable[[BaseException], object]] = []

    def on_write_failure(self, listener: Callable[[BaseException], object]) -> None:
        self._write_listeners.append(listener)

    def write_failed(self, what: str, subject: Hashable, exc: BaseException) -> None:
        """A write of partition data failed: logged as ``failed``, then told to listeners."""
        self.failed(what, subject, exc)
        for listener in self._write_listeners:
            listener(exc)

    def failed(self, what: str, subject: Hashable, exc: BaseException) -> None:
        key = (what, subject)
        now = time.monotonic()
        with self._lock:
            episode = self._failing.setdefault(key, StorageErrors._Episode())
            episode.failures += 1
            last = self._last_reported.get(key)
            if last is not None and now - last < self._interval_s:
                return
            self._last_reported[key] = now
            failures, reported = episode.failures, episode.reported
            episode.reported = True
        if reported:
            log.error("%s %s still failing (%d failures): %s", what, subject, failures, exc)
        else:
            log.error("%s %s failed: %s", what, subject, exc)

    def succeeded(self, what: str, subject: Hashable) -> None:
        if not self._failing:
            return
        with self._lock:
            episode = self._failing.pop((what, subject), None)
        if episode is not None and episode.reported:
            log.info("%s %s works again (after %d failures)", what, subject, episode.failures)


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        config_for: ConfigFor,
        recovery_threads: int = 2,
        max_open_files: int | None = None,
        io_threads: int = 0,
    ) -> None:
        """``config_for(topic)`` gives the storage config a topic's logs use.

        ``io_threads`` (num.io.threads) run the partitions' writes off the event loop
        (`IoThreads`); 0 writes inline.

        ``max_open_files`` bounds the segment files kept open process-wide
        (log.max.open.files); None takes half the RLIMIT_NOFILE soft limit
        when the manager opens.
        """
        self.data_dir = data_dir
        self._max_open_files = max_open_files
        # Data-dropping recovery actions (cut tails, deleted segments) since start.
        self.recovery_truncations = 0
        self._config_for = config_for
        self._recovery_threads = max(1, recovery_threads)
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self.errors = StorageErrors()
        # Data the disk refused may not read back as written: the next start checks all.
        self.errors.on_write_failure(lambda _exc: kernel_mark.forget(self.data_dir))
        self.io = IoThreads(io_threads)
        # Told the duration (ns) of each time-based flush (flush metrics).
        self.flush_observer: Callable[[int], None] | None = None
        # The offset retention stays below for a partition (its high watermark; None:
        # no bound, a log no partition serves).
        self.retention_bound: Callable[[TopicPartition], int | None] = lambda _tp: None

    # -- lifecycle ---------------------------------------------------------

    def open(self) -> None:
        """Locks the directory and opens (recovering as needed) every partition in it;
        a failure unlocks it again."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_dir_lock()
        try:
            self._open_logs()
        except BaseException:
            for log_ in self._logs.values():
                with contextlib.suppress(OSError):
                    log_.close()
            self._logs.clear()
            self._release_dir_lock()
            raise

    def _open_logs(self) -> None:
        max_open = self._max_open_files or default_max_open_files()
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and max_open > soft - 64:
            log.warning(
                "log.max.open.files=%d leaves little of RLIMIT_NOFILE=%d for connections",
                max_open,
                soft,
            )
        _kbroker.set_max_open_files(max_open)
        for leftover in self.data_dir.glob(f"*{DELETED_SUFFIX}"):
            shutil.rmtree(leftover, ignore_errors=True)
        found = [
            (tp, entry)
            for entry in sorted(self.data_dir.iterdir())
            if entry.is_dir() and (tp := TopicPartition.from_dirname(entry.name)) is not None
        ]
        same_kernel = kernel_mark.same_kernel(self.data_dir)
        # Recovery of each log runs in Rust with the GIL released, so threads help.
        with ThreadPoolExecutor(self._recovery_threads, thread_name_prefix="recover") as pool:
            opened = pool.map(
                lambda item: Log.open(
                    self.data_dir, item[0], self._config_for(item[0].topic), same_kernel
                ),
                found,
            )
            for log_ in opened:
                self._logs[log_.tp] = log_
                self.recovery_truncations += log_.recovery_truncations
        kernel_mark.mark(self.data_dir)
        log.info(
            "opened %d partition logs in %s%s",
            len(self._logs),
            self.data_dir,
            " (last written under this kernel: tails checked)" if same_kernel else "",
        )

    def close(self) -> None:
        """Flushes and closes every log (writing clean-shutdown markers) and unlocks;
        writes already on the I/O threads finish first."""
        self.io.close()
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()

        def close_one(log_: Log) -> None:
            try:
                log_.close()
            except OSError as exc:
                log.error("closing %s failed: %s", log_.tp, exc)

        # Each close waits on a directory fsync (the GIL is released): threads
        # overlap them, which matters with tens of thousands of partitions.
        with ThreadPoolExecutor(CLOSE_THREADS, thread_name_prefix="close") as pool:
            for _ in pool.map(close_one, logs):
                pass
        self._release_dir_lock()

    def _release_dir_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _take_dir_lock(self) -> None:
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLocked(f"{self.data_dir} is in use by another kbroker process") from None
        self._lock_fd = fd

    # -- partitions --------------------------------------------------------

    def get(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def get_or_create(self, tp: TopicPartition) -> Log:
        """The log of ``tp``, created if new; a failed creation leaves no directory behind."""
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            path = self.data_dir / tp.dirname
            new = not path.exists()
            try:
                created = Log.open(self.data_dir, tp, self._config_for(tp.topic))
            except BaseException:
                if new:
                    shutil.rmtree(path, ignore_errors=True)
                raise
            self.recovery_truncations += created.recovery_truncations
            self._logs[tp] = created
            return created

    def create_topic_logs(
        self, topics: Sequence[tuple[uuid.UUID, Sequence[TopicPartition]]]
    ) -> list[list[Log] | Exception]:
        """Creates the logs of new topics, each given as its id and partitions: their
        directories, first segments and ``partition.metadata`` files, in one call into the
        core that holds the GIL for none of the file work (run it in a worker thread).

        One entry per topic comes back: its logs in the order given, or the exception that
        refused it (an OSError naming the path; the directories made for it are gone). A
        partition whose log is open already keeps it.
        """
        with self._lock:
            known = {tp: lg for _, tps in topics for tp in tps if (lg := self._logs.get(tp))}
        requests = []
        for topic_id, tps in topics:
            encoded = encode_topic_id(topic_id)
            requests.append(
                (
                    encoded,
                    [
                        (str(self.data_dir / tp.dirname), self._config_for(tp.topic))
                        for tp in tps
                        if tp not in known
                    ],
                )
            )
        created = _kbroker.create_topic_logs(requests, now_ms())
        results: list[list[Log] | Exception] = []
        with self._lock:
            for (_, tps), made in zip(topics, created, strict=True):
                if isinstance(made, Exception):
                    results.append(made)
                    continue
                fresh = iter(made)
                logs = []
                for tp in tps:
                    lg = known.get(tp)
                    if lg is None:
                        lg = Log.opened(tp, next(fresh))
                        self.recovery_truncations += lg.recovery_truncations
                        # A log of the same partition opened meanwhile stays the one
                        # (a second writer of the same files must never exist).
                        lg = self._logs.setdefault(tp, lg)
                    logs.append(lg)
                results.append(logs)
        return results

    def delete_all(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Deletes the logs of ``tps``, logging (not raising) what could not be removed;
        returns those."""
        failed = []
        for tp in tps:
            try:
                self.delete(tp)
            except OSError as exc:
                log.error("could not delete the log of %s: %s", tp, exc)
                failed.append(tp)
        return failed

    def delete(self, tp: TopicPartition) -> None:
        """Removes a partition's log and its files."""
        with self._lock:
            victim = self._logs.pop(tp, None)
        if victim is None:
            return
        try:
            victim.close()
        except OSError as exc:
            # Its files go anyway; closing only saves state for a next open.
            log.warning("closing %s before deleting it failed: %s", tp, exc)
        # A unique name: a topic made again and deleted again never collides.
        doomed = victim.dir.with_name(f"{victim.dir.name}.{uuid.uuid4().hex}{DELETED_SUFFIX}")
        os.replace(victim.dir, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def update_config(self, topic: str) -> None:
        """Re-reads the storage config of every partition of ``topic``."""
        config = self._config_for(topic)
        for log_ in self.logs():
            if log_.tp.topic == topic:
                log_.set_config(config)

    def update_all_configs(self) -> None:
        """Re-reads the storage config of every partition (a broker default changed)."""
        configs: dict[str, LogConfig] = {}
        for log_ in self.logs():
            topic = log_.tp.topic
            if topic not in configs:
                configs[topic] = self._config_for(topic)
            log_.set_config(configs[topic])

    def logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def partitions(self) -> Mapping[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def __iter__(self) -> Iterator[Log]:
        return iter(self.logs())

    def __len__(self) -> int:
        return len(self._logs)

    # -- background work ---------------------------------------------------

    def flush_and_roll(self) -> None:
        """One pass of time-based flush and roll over every log."""
        for log_ in self.logs():
            try:
                started = time.monotonic_ns()
                if log_.maybe_flush() and self.flush_observer is not None:
                    self.flush_observer(time.monotonic_ns() - started)
                log_.maybe_roll()
            except ValueError:
                if self.get(log_.tp) is log_:
                    raise
                # Deleted (closed) while this pass ran: nothing to do.
            except OSError as exc:
                self.errors.write_failed("flush/roll of", log_.tp, exc)
            else:
                self.errors.succeeded("flush/roll of", log_.tp)

    def apply_retention(self) -> int:
        """One retention pass; returns the number of segments deleted."""
        deleted = 0
        for log_ in self.logs():
            try:
                deleted += log_.apply_retention(self.retention_bound(log_.tp))
            except ValueError:
                if self.get(log_.tp) is log_:
                    raise
                # Deleted (closed) while this pass ran: nothing to do.
            except OSError as exc:
                self.errors.failed("retention of", log_.tp, exc)
            else:
                self.errors.succeeded("retention of", log_.tp)
        return deleted

    async def run_background(
        self,
        retention_check_interval_ms: Callable[[], int],
        tick_ms: int = 500,
        cleaner: BackgroundWork | None = None,
    ) -> None:
        """Runs flush/roll every tick and retention on its interval, until cancelled.

        The work runs in a thread (Rust releases the GIL during fsyncs) so the
        event loop never stalls on a disk. The cleaner, if given, runs beside
        it as its own task: a long compaction never delays a flush.
        """
        cleaning = asyncio.ensure_future(cleaner.run()) if cleaner is not None else None
        try:
            await self._flush_roll_retention(retention_check_interval_ms, tick_ms)
        finally:
            if cleaning is not None:
                cleaning.cancel()

    async def _flush_roll_retention(
        self, retention_check_interval_ms: Callable[[], int], tick_ms: int
    ) -> None:
        last_retention = now_ms()
        while True:
            await asyncio.sleep(tick_ms / 1000)
            try:
                await asyncio.to_thread(self.flush_and_roll)
                if now_ms() - last_retention >= retention_check_interval_ms():
                    last_retention = now_ms()
                    deleted = await asyncio.to_thread(self.apply_retention)
                    if deleted:
                        log.info("retention deleted %d segments", deleted)
            except Exception:
                # A bug must not end flushing and retention for good.
                log.exception("background flush/roll/retention pass failed")

    def __enter__(self) -> LogManager:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
