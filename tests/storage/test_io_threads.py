"""IoThreads and OrderedWrites on real logs: each log's writes in order on several
threads, failures kept to their own write, resizing, inline writes, and closing."""

from __future__ import annotations

import asyncio
import select
import time
from pathlib import Path

import pytest

from kbroker._kbroker import (
    AppendInfo,
    CorruptRecordError,
    IoPool,
    StaleLeaderEpochError,
    build_batch,
)
from kbroker.log import Log, LogConfig, TopicPartition
from kbroker.log.io_threads import IoThreads, IoThreadsClosed, OrderedWrites, Ready

pytestmark = pytest.mark.timeout(30)


def batch(n: int, tag: str) -> bytes:
    return build_batch([(b"k", f"{tag}-{i}".encode(), []) for i in range(n)], 0, 0, 0)


def all_thread_names() -> list[str]:
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            continue  # ended meanwhile
    return names


def io_thread_names() -> list[str]:
    """The names of the pool's append threads (its flush threads are ``kbroker-io-fN``)."""
    return [n for n in all_thread_names() if n.startswith("kbroker-io-") and n[11:].isdigit()]


class Counted:
    """A log whose writes count on the loop: ``prepare`` reads what the previous write's
    ``finish`` set, as a producer's sequence check does."""

    def __init__(self, tmp: Path, name: str, io: IoThreads) -> None:
        self.log = Log.open(tmp, TopicPartition(name, 0), LogConfig())
        self.io = io
        self.writes = OrderedWrites()
        self.next = 0

    def submit(self, records: int) -> asyncio.Future[int]:
        def prepare() -> int:
            return self.next

        def write(expected: int) -> asyncio.Future[AppendInfo]:
            return self.io.append(self.log, batch(records, str(expected)), 0, False, 0)

        def finish(expected: int, appended: AppendInfo) -> int:
            assert appended.first_offset == expected == self.next
            self.next = appended.last_offset + 1
            return appended.first_offset

        return self.writes.submit(prepare, write, finish)


def test_each_logs_writes_keep_their_order_on_several_threads(tmp_path: Path) -> None:
    async def main() -> None:
        io = IoThreads(4)
        logs = [Counted(tmp_path, f"t{i}", io) for i in range(3)]
        answers = [log.submit(1 + j % 5) for j in range(60) for log in logs]
        firsts = await asyncio.gather(*answers)
        for i, log in enumerate(logs):
            mine = [f for j, f in enumerate(firsts) if j % 3 == i]
            sizes = [1 + j % 5 for j in range(60)]
            assert mine == [sum(sizes[:k]) for k in range(60)]
            assert log.log.log_end_offset == sum(sizes) == log.next
            slice_ = log.log.read(0, 1 << 20)
            assert slice_ is not None and b"0-0" in slice_.read_bytes()
            assert log.writes.idle and not log.writes.writing
        io.close()
        for log in logs:
            log.log.close()

    asyncio.run(main())


def test_a_failing_step_fails_its_write_and_the_next_goes_on(tmp_path: Path) -> None:
    def boom(*_: object) -> None:
        raise OSError(28, "No space left on device")

    async def main() -> None:
        io = IoThreads(2)
        log = Counted(tmp_path, "t", io)
        writes = log.writes
        corrupt = bytearray(batch(2, "x"))
        corrupt[-1] ^= 1  # the CRC no longer matches

        def write_corrupt(_: object) -> asyncio.Future[AppendInfo]:
            return io.append(log.log, bytes(corrupt), 0, False, 0)

        failed_prepare = writes.submit(boom, write_corrupt, boom)
        failed_write = writes.submit(lambda: None, write_corrupt, lambda _, w: w)
        failed_finish = writes.submit(
            lambda: 0, lambda p: io.append(log.log, batch(1, "f"), 0, False, 0), boom
        )
        ready = writes.submit(lambda: Ready("duplicate"), write_corrupt, boom)
        fine = writes.submit(
            lambda: None,
            lambda _: io.append(log.log, batch(1, "ok"), 0, False, 0),
            lambda _, w: w.first_offset,
        )
        with pytest.raises(OSError, match="No space"):
            await failed_prepare
        with pytest.raises(CorruptRecordError):
            await failed_write
        with pytest.raises(OSError, match="No space"):
            await failed_finish  # written, then its finish failed
        assert await ready == "duplicate"  # nothing written
        assert await fine == 1
        io.close()
        log.log.close()

    asyncio.run(main())


def test_without_threads_writes_run_on_the_loop_and_answer_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        io = IoThreads(0)
        log = Counted(tmp_path, "t", io)
        done = log.submit(3)
        assert done.done() and done.result() == 0
        assert (
            log.writes.run_inline(
                lambda: 3, lambda p: log.log.append(batch(1, "i")), lambda _, w: w.first_offset
            )
            == 3
        )
        io.close()
        log.log.close()

    asyncio.run(main())


def test_an_inline_write_is_refused_while_writes_are_queued(tmp_path: Path) -> None:
    async def main() -> None:
        io = IoThreads(1)
        log = Counted(tmp_path, "t", io)
        pending = [log.submit(100) for _ in range(5)]
        with pytest.raises(RuntimeError, match="order"):
            log.writes.run_inline(lambda: None, lambda _: 1, lambda _, w: w)
        await asyncio.gather(*pending)
        io.close()
        log.log.close()

    asyncio.run(main())


def test_resizing_starts_and_ends_threads_and_zero_writes_on_the_loop(tmp_path: Path) -> None:
    before = len(io_thread_names())  # other tests' pools may still be ending

    async def wait_threads(n: int) -> None:
        for _ in range(250):
            if len(io_thread_names()) - before == n:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{io_thread_names()} is not {before} + {n} I/O threads")

    async def main() -> None:
        io = IoThreads(1)
        log = Counted(tmp_path, "t", io)
        await log.submit(1)
        await wait_threads(1)
        io.resize(3)
        assert io.count == 3
        await asyncio.gather(*(log.submit(2) for _ in range(10)))
        await wait_threads(3)
        io.resize(0)
        await wait_threads(0)
        inline = log.submit(1)
        assert inline.done() and inline.result() == 21
        io.resize(2)
        assert not (late := log.submit(1)).done() or late.result() == 22
        assert await late == 22
        io.close()
        await wait_threads(0)
        log.log.close()

    asyncio.run(main())


def test_close_lets_submitted_writes_finish_and_refuses_later_ones(tmp_path: Path) -> None:
    async def main() -> None:
        io = IoThreads(2)
        logs = [Counted(tmp_path, f"t{i}", io) for i in range(4)]
        # One write per log is on the threads; the rest wait behind their log's.
        answers = [log.submit(50) for _ in range(3) for log in logs]
        io.close()  # on the loop: nothing more can be submitted meanwhile
        outcomes = await asyncio.gather(*answers, return_exceptions=True)
        assert outcomes[:4] == [0, 0, 0, 0]  # submitted before the close: written
        for o in outcomes[4:]:
            assert isinstance(o, IoThreadsClosed), o
        with pytest.raises(IoThreadsClosed):
            io.append(logs[0].log, batch(1, "late"), 0, False, 0)
        for log in logs:
            assert log.log.log_end_offset == 50
            log.log.close()

    asyncio.run(main())


def test_a_write_queued_under_an_older_fence_is_refused(tmp_path: Path) -> None:
    log = Log.open(tmp_path, TopicPartition("t", 0), LogConfig())
    log.set_fence(3)
    # A pool with no thread yet: the writes wait in its queue, deterministically.
    pool = IoPool(0, "fence-test")
    pool.append(0, log.core, batch(2, "a"), 0, None, 1, 3)
    pool.resize(1)
    done: list[tuple[int, object]] = []
    deadline = time.monotonic() + 10
    while not done and time.monotonic() < deadline:
        select.select([pool.fileno()], [], [], 0.5)
        done += pool.take_done()
    assert isinstance(done[0][1], AppendInfo) and done[0][1].first_offset == 0
    pool.resize(0)
    # Its threads gone (one still there would take the writes below at once).
    while any(n.startswith("fence-test") for n in all_thread_names()):
        assert time.monotonic() < deadline, all_thread_names()
        time.sleep(0.01)
    for ticket in range(1, 6):
        pool.append(ticket, log.core, batch(1, f"s{ticket}"), 0, None, 1, 3)
    pool.append_as_follower(6, log.core, batch(1, "f"), 1, 3)
    log.set_fence(4)  # the partition changed hands meanwhile
    pool.close()  # runs what is queued, here, now
    outcomes = pool.take_done()
    assert [t for t, _ in outcomes] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(o, StaleLeaderEpochError) for _, o in outcomes), outcomes
    assert log.log_end_offset == 2  # the refused writes wrote nothing
    log.close()


def test_a_write_that_asks_for_a_flush_is_answered_once_synced(tmp_path: Path) -> None:
    """flush.messages: the sync runs on the pool's flush threads, and the append is
    answered only once the recovery point covers it (as when the append syncs itself)."""

    async def main() -> None:
        io = IoThreads(2)
        flushed = Log.open(tmp_path, TopicPartition("f", 0), LogConfig(flush_messages=1))
        plain = Log.open(tmp_path, TopicPartition("p", 0), LogConfig())
        for i in range(20):
            a = io.append(flushed, batch(3, f"f{i}"), 0, False, 0)
            b = io.append(plain, batch(3, f"p{i}"), 0, False, 0)
            info = await a
            assert flushed.recovery_point >= info.last_offset + 1
            await b
        assert {"kbroker-io-f0", "kbroker-io-f1"} <= set(all_thread_names())
        assert flushed.recovery_point == flushed.log_end_offset == 60
        assert plain.recovery_point == 0  # never asked to sync
        io.close()
        flushed.close()
        plain.close()

    asyncio.run(main())
