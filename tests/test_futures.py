"""kbroker.futures: `watched` reports where a slow coroutine waits, returns its result,
passes its exception on, and takes it down when cancelled."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.futures import awaiting_at, watched


async def _inner(fut: asyncio.Future[int]) -> int:
    return await fut


async def _outer(fut: asyncio.Future[int]) -> int:
    return await _inner(fut) + 1


def test_a_slow_coroutine_is_reported_with_where_it_waits_then_its_result_returned() -> None:
    async def main() -> tuple[int, list[tuple[float, str]]]:
        fut = asyncio.get_running_loop().create_future()
        reports: list[tuple[float, str]] = []
        task = asyncio.ensure_future(
            watched(_outer(fut), 0.05, lambda s, w: reports.append((s, w)))
        )
        await asyncio.sleep(0.13)
        fut.set_result(41)
        return await task, reports

    result, reports = asyncio.run(main())
    assert result == 42
    assert len(reports) == 2
    assert reports[0][0] >= 0.05 and reports[1][0] >= 0.1
    for _, where in reports:
        assert where.startswith("test_futures.py:")
        assert [part.split()[-1] for part in where.split(" > ")] == ["_outer", "_inner", "Future"]


def test_a_quick_coroutine_is_not_reported_and_its_exception_passes_on() -> None:
    async def fails() -> None:
        raise ValueError("no")

    reports: list[tuple[float, str]] = []
    with pytest.raises(ValueError, match="no"):
        asyncio.run(watched(fails(), 10, lambda s, w: reports.append((s, w))))
    assert reports == []


def test_cancelling_the_watch_cancels_the_coroutine() -> None:
    async def main() -> bool:
        fut = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(watched(_outer(fut), 10, lambda s, w: None))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return fut.cancelled()

    assert asyncio.run(main())


def test_where_a_task_waits_follows_the_tasks_it_awaits() -> None:
    async def main() -> str:
        fut = asyncio.get_running_loop().create_future()
        inner = asyncio.ensure_future(_inner(fut))

        async def waits_on_task() -> int:
            return await inner

        outer = asyncio.ensure_future(waits_on_task())
        await asyncio.sleep(0.01)
        where = awaiting_at(outer)
        fut.set_result(1)
        await outer
        return where

    where = asyncio.run(main())
    assert [part.split()[-1] for part in where.split(" > ")] == [
        "waits_on_task",
        "_inner",
        "Future",
    ]
