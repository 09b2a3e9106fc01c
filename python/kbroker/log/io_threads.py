"""The logs' writes off the event loop: I/O threads, and one log's writes in order.

A write to a log (an append, the fdatasync that ``flush.messages`` asks of it) can
block for as long as the kernel pleases: dirty-page throttling, a slow or failing
disk. Run on the event loop it would stall every client of the broker. So the
appends run on `IoThreads`: ``num.io.threads`` threads of the Rust core
(`kbroker._kbroker.IoPool`) that never take the GIL, any of them taking the next
write. The event loop goes on serving meanwhile, the broker uses a second core
for the writes, and a finished write is collected on the loop when the pool's
eventfd says so (several finished together: one wakeup).

`OrderedWrites` keeps one log's writes in the order they were submitted, one at a
time, each in three steps: ``prepare`` on the event loop when its turn comes
(checks against state the previous write updated: the producer's sequence, the
leadership), ``write``, which starts the write (on an I/O thread) and gives its
future, and ``finish`` on the event loop (state updated from what was written).
With ``num.io.threads`` 0 the writes run on the loop, their answers ready at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from kbroker._kbroker import AppendInfo, IoPool
from kbroker.log.log import Log, now_ms

log = logging.getLogger(__name__)

T = TypeVar("T")
P = TypeVar("P")
W = TypeVar("W")


def written_now(write: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``write(*args)`` on the loop, as the future an I/O thread's write would give."""
    done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    try:
        done.set_result(write(*args))
    except Exception as exc:
        done.set_exception(exc)
    return done


_CLOSED = "the broker's I/O threads are closed: it is stopping"


class IoThreadsClosed(RuntimeError):
    """A write submitted after the I/O threads closed (the broker is stopping)."""


class IoThreads:
    """The I/O threads of a broker's logs, answering on the event loop.

    The pool's eventfd is watched from the first write on (by the running loop,
    where the answers come back); `close` lets the writes submitted finish.
    """

    def __init__(self, count: int, name: str = "kbroker-io") -> None:
        if count < 0:
            raise ValueError(f"an I/O thread pool cannot have {count} threads")
        self._pool = IoPool(count, name)
        self._waiting: dict[int, asyncio.Future[AppendInfo]] = {}
        self._tickets = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._wake_pending = False

    @property
    def count(self) -> int:
        return self._pool.threads

    def resize(self, count: int) -> None:
        """``count`` threads from now on (a dynamic num.io.threads): fewer end once the
        writes already submitted are done; at 0 new writes run on the loop."""
        if count < 0:
            raise ValueError(f"an I/O thread pool cannot have {count} threads")
        self._pool.resize(count)

    def append(
        self,
        log_: Log,
        batches: bytes | memoryview,
        leader_epoch: int,
        log_append_time: bool,
        fence: int,
    ) -> asyncio.Future[AppendInfo]:
        """`Log.append` on an I/O thread, refused (StaleLeaderEpochError) when the log's
        fence (`Log.set_fence`) is no longer ``fence`` by the time it runs."""
        now = now_ms()
        self._check_open()
        if self.count == 0:
            return written_now(log_.append, batches, leader_epoch, log_append_time)
        return self._submit(
            partial(
                self._pool.append,
                log=log_.core,
                batches=batches,
                leader_epoch=leader_epoch,
                log_append_time_ms=now if log_append_time else None,
                now_ms=now,
                fence=fence,
                wake=False,
            )
        )

    def append_as_follower(
        self, log_: Log, batches: bytes | memoryview, fence: int
    ) -> asyncio.Future[AppendInfo]:
        """`Log.append_as_follower` on an I/O thread, fenced as `append` is."""
        self._check_open()
        if self.count == 0:
            return written_now(log_.append_as_follower, batches)
        return self._submit(
            partial(
                self._pool.append_as_follower,
                log=log_.core,
                batches=batches,
                now_ms=now_ms(),
                fence=fence,
                wake=False,
            )
        )

    def _check_open(self) -> None:
        if self._closed:
            raise IoThreadsClosed(_CLOSED)

    def _submit(self, queue: Callable[..., None]) -> asyncio.Future[AppendInfo]:
        loop = self._loop
        if loop is None:
            self._loop = loop = asyncio.get_running_loop()
            loop.add_reader(self._pool.fileno(), self._deliver)
        ticket = next(self._tickets)
        try:
            queue(ticket=ticket)
        except RuntimeError:  # the Rust pool closed meanwhile
            raise IoThreadsClosed(_CLOSED) from None
        done: asyncio.Future[AppendInfo] = loop.create_future()
        self._waiting[ticket] = done
        if not self._wake_pending:
            # One wakeup for the writes queued in this pass of the loop (a produce
            # request's partitions, several connections' requests): each is a system
            # call and a context switch, which cost the loop more than the writes.
            self._wake_pending = True
            loop.call_soon(self._wake)
        return done

    def _wake(self) -> None:
        self._wake_pending = False
        self._pool.wake()

    def _deliver(self) -> None:
        for ticket, outcome in self._pool.take_done():
            done = self._waiting.pop(ticket, None)
            if done is None or done.cancelled():
                continue
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

    def close(self) -> None:
        """Lets the writes submitted finish, then ends the threads (blocking; any thread:
        their answers reach the loop through the eventfd)."""
        self._closed = True
        self._pool.close()


@dataclass(slots=True)
class Ready(Generic[T]):
    """A ``prepare`` that already knows the answer (a duplicate, say): nothing to write."""

    value: T


@dataclass(slots=True)
class _Write(Generic[P, W, T]):
    prepare: Callable[[], P | Ready[T]]
    write: Callable[[P], asyncio.Future[W]]
    finish: Callable[[P, W], T]
    done: asyncio.Future[T]
    alone: bool
    prepared: Any = None
    pending: asyncio.Future[W] | None = None


class OrderedWrites:
    """One log's writes in the order submitted (see the module's text).

    A write whose ``prepare`` reads what earlier writes' ``finish`` set (an idempotent
    producer's sequence check) is submitted ``alone``: it is prepared only once every
    write before it has finished. Others are prepared and started at once, several
    on the I/O threads together (the log takes them in the order they were started);
    every ``finish`` runs in the order the writes were submitted.
    """

    def __init__(self) -> None:
        self._queue: deque[_Write[Any, Any, Any]] = deque()  # not started yet
        self._started: deque[_Write[Any, Any, Any]] = deque()  # started, not finished
        self._pumping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def idle(self) -> bool:
        """No write is running or waiting."""
        return not self._queue and not self._started

    @property
    def writing(self) -> bool:
        """A write is started and not finished: the log may already hold some of what
        it writes, and the state its ``finish`` updates does not yet."""
        return bool(self._started)

    def submit(
        self,
        prepare: Callable[[], P | Ready[T]],
        write: Callable[[P], asyncio.Future[W]],
        finish: Callable[[P, W], T],
        alone: bool = True,
    ) -> asyncio.Future[T]:
        """The answer of ``finish(prepare(), <what write's future gives>)`` in its turn;
        an exception of any step fails the answer (and the next write goes on)."""
        loop = self._loop
        if loop is None:
            # (asyncio.get_running_loop asks the kernel for the pid on every call.)
            self._loop = loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Write(prepare, write, finish, done, alone))
        self._pump()
        return done

    def run_inline(
        self,
        prepare: Callable[[], P | Ready[T]],
        write: Callable[[P], W],
        finish: Callable[[P, W], T],
    ) -> T:
        """All three steps now, on this thread, ``write`` writing itself: for callers with
        no event loop (tools, tests), and only when no write is queued."""
        if not self.idle:
            raise RuntimeError("an inline write while writes are queued would break their order")
        prepared = prepare()
        if isinstance(prepared, Ready):
            return prepared.value
        return finish(prepared, write(prepared))

    def _pump(self, _: object = None) -> None:
        """Finishes the started writes that are written (in order) and starts the queued
        ones that may start, until neither moves. Not reentrant: a submit from inside a
        step (a finish that writes again) is taken by the pass under way."""
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._finish_written() or self._start_next():
                pass
        finally:
            self._pumping = False

    def _finish_written(self) -> bool:
        started = self._started
        if not started:
            return False
        w = started[0]
        assert w.pending is not None
        if not w.pending.done():
            return False
        started.popleft()
        try:
            result = w.finish(w.prepared, w.pending.result())
        except Exception as exc:
            if not w.done.cancelled():
                w.done.set_exception(exc)
        else:
            if not w.done.cancelled():
                w.done.set_result(result)
        return True

    def _start_next(self) -> bool:
        if not self._queue:
            return False
        w = self._queue[0]
        if w.alone and self._started:
            return False  # it reads what the writes before it finish
        self._queue.popleft()
        if w.done.cancelled():
            return True
        try:
            prepared = w.prepare()
            if isinstance(prepared, Ready):
                w.done.set_result(prepared.value)
                return True
            pending = w.write(prepared)
        except Exception as exc:
            w.done.set_exception(exc)
            return True
        w.prepared, w.pending = prepared, pending
        self._started.append(w)
        if not pending.done():
            pending.add_done_callback(self._pump)
        return True
