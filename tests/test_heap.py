"""LongLivedObjects: the objects of a settled burst are frozen (full collections skip
them), given back to the collector when topics are deleted and at the latest after
the hold time, so cyclic garbage among them is collected, not kept."""

from __future__ import annotations

import asyncio
import gc
import weakref

from kbroker.heap import LongLivedObjects


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_settled_objects_are_skipped_until_released() -> None:
    async def run() -> None:
        heap = LongLivedObjects()
        try:
            node = _Node()
            gone = weakref.ref(node)
            heap.settled()
            assert gc.get_freeze_count() > 0
            del node
            gc.collect()
            assert gone() is not None, "a frozen cycle was walked by a full collection"
            heap.released()
            assert gc.get_freeze_count() == 0
            gc.collect()
            assert gone() is None, "released objects are the collector's again"
        finally:
            heap.close()

    asyncio.run(run())


def test_frozen_objects_go_back_to_the_collector_after_the_hold_time() -> None:
    async def run() -> None:
        heap = LongLivedObjects(hold_s=0.05)
        try:
            node = _Node()
            gone = weakref.ref(node)
            heap.settled()
            heap.settled()  # a second burst does not push the release back
            del node
            await asyncio.sleep(0.2)
            assert gc.get_freeze_count() == 0
            gc.collect()
            assert gone() is None
        finally:
            heap.close()

    asyncio.run(run())


def test_frozen_objects_still_go_when_no_longer_referenced() -> None:
    async def run() -> None:
        heap = LongLivedObjects()
        try:
            plain = _Plain()
            gone = weakref.ref(plain)
            heap.settled()
            del plain
            assert gone() is None  # reference counting frees a frozen object at once
        finally:
            heap.close()

    asyncio.run(run())


class _Plain:
    """An object in no reference cycle."""


def test_young_collections_run_less_often_once_the_broker_serves() -> None:
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from kbroker.heap import collect_young_objects_less_often, YOUNG_THRESHOLD\n"
        "before = gc.get_threshold()\n"
        "collect_young_objects_less_often()\n"
        "print(before[0], gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["700", "20000", "True"]
