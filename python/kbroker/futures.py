"""`then`: a future's result passed through a function, without a task per request; and
`cancel_and_wait`, which stops a task for sure."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

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
