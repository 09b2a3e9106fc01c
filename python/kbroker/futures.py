"""`then`: a future's result passed through a function, without a task per request;
`cancel_and_wait`, which stops a task for sure; and `watched`, which says where a
coroutine that takes too long is waiting."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
U = TypeVar("U")


def then(fut: asyncio.Future[T], fn: Callable[[T], U]) -> asyncio.Future[U]:
    """A future of ``fn(fut.result())``; an exception or cancellation passes through."""
    out: asyncio.Future[U] = fut.get_loop().create_future()

    def done(f: asyncio.Future[T]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            out.set_result(fn(f.result()))
        except Exception as err:
            out.set_exception(err)

    fut.add_done_callback(done)
    return out


async def cancel_and_wait(task: asyncio.Future[T], poll_s: float = 0.05) -> None:
    """Cancels ``task`` and returns once it has ended (its outcome retrieved).

    Before Python 3.12, ``asyncio.wait_for`` swallows a cancellation that lands just as
    its inner future completes, and the task carries on (to wait on its queue forever,
    say); so the cancellation is repeated until the task is done.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=poll_s)
    if not task.cancelled():
        task.exception()


def awaiting_at(task: asyncio.Future[Any]) -> str:
    """Where a suspended task waits: the coroutines of its chain of awaits, outermost
    first (``file:line function``), then those of a task it awaits, and so on, ending
    with the future the innermost waits on."""
    parts: list[str] = []
    current: Any = task
    while current is not None and len(parts) < 64:
        if not isinstance(current, asyncio.Task):
            parts.append(type(current).__name__)
            break
        awaited: Any = current.get_coro()
        while (
            frame := getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        ) is not None:
            code = frame.f_code
            parts.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        # What the task is suspended on (asyncio keeps it; None when not suspended).
        current = getattr(current, "_fut_waiter", None)
    return " > ".join(parts) or "(not started)"


async def watched(coro: Awaitable[T], every_s: float, slow: Callable[[float, str], None]) -> T:
    """Runs ``coro`` to its end and returns its result, calling ``slow(seconds so far,
    where it waits)`` each ``every_s`` seconds it is still running. Cancelling this
    cancels ``coro`` and waits for it to end."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            slow(loop.time() - started, awaiting_at(task))
    except asyncio.CancelledError:
        await cancel_and_wait(task)
        raise
