"""The purgatory and its delayed operations, on a clock driven by hand."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from kbroker.replication.purgatory import DelayedOperation, Purgatory


class ManualScheduler:
    """A Scheduler whose time moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self._seq = itertools.count()
        self._timers: list[tuple[float, int, Timer]] = []

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        timer = Timer(callback)
        heapq.heappush(self._timers, (self.now + delay, next(self._seq), timer))
        return timer

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, timer = heapq.heappop(self._timers)
            self.now = when
            if not timer.cancelled:
                timer.callback()
        self.now = end

    @property
    def armed(self) -> int:
        return sum(1 for _, _, t in self._timers if not t.cancelled)


class Timer:
    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class WaitFor(DelayedOperation):
    """Completes when ``state['value']`` reaches ``target``."""

    def __init__(self, state: dict[str, int], target: int, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.state = state
        self.target = target
        self.completions = 0
        self.expired = False

    def try_complete(self) -> bool:
        if self.state["value"] >= self.target:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expire(self) -> None:
        self.expired = True


def test_completes_at_once_when_it_can() -> None:
    clock = ManualScheduler()
    purgatory: Purgatory[str] = Purgatory("test", clock)
    op = WaitFor({"value": 5}, 5, 1000)
    assert purgatory.try_complete_else_watch(op, ["a"])
    assert op.completions == 1 and len(purgatory) == 0 and clock.armed == 0


def test_completes_when_its_key_is_checked() -> None:
    clock = ManualScheduler()
    purgatory: Purgatory[str] = Purgatory("test", clock)
    state = {"value": 0}
    op = WaitFor(state, 3, 1000)
    assert not purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.watched("a") == 1 and purgatory.watched("b") == 1
    state["value"] = 3
    assert purgatory.check_and_complete("other") == 0
    assert op.completions == 0
    assert purgatory.check_and_complete("b") == 1
    assert op.completions == 1 and not op.expired
    # Forgotten under every key, its timer cancelled; checking again changes nothing.
    assert purgatory.watched("a") == 0 and len(purgatory) == 0 and clock.armed == 0
    assert purgatory.check_and_complete("a") == 0
    clock.advance(5)
    assert op.completions == 1 and not op.expired


def test_expires_once_at_its_timeout() -> None:
    clock = ManualScheduler()
    purgatory: Purgatory[str] = Purgatory("test", clock)
    op = WaitFor({"value": 0}, 1, 250)
    purgatory.try_complete_else_watch(op, ["a"])
    clock.advance(0.249)
    assert op.completions == 0
    clock.advance(0.001)
    assert op.completions == 1 and op.expired
    assert len(purgatory) == 0 and purgatory.watched("a") == 0
    assert not op.force_complete()
    assert op.completions == 1


def test_only_the_watchers_of_a_key_are_tried() -> None:
    clock = ManualScheduler()
    purgatory: Purgatory[int] = Purgatory("test", clock)
    state = {"value": 0}
    ops = {k: WaitFor(state, 1, 1000) for k in range(3)}
    for key, op in ops.items():
        purgatory.try_complete_else_watch(op, [key])
    state["value"] = 1
    assert purgatory.check_and_complete(1) == 1
    assert [ops[k].completions for k in range(3)] == [0, 1, 0]
    assert len(purgatory) == 2


def test_complete_all_answers_everything_now() -> None:
    clock = ManualScheduler()
    purgatory: Purgatory[str] = Purgatory("test", clock)
    ops = [WaitFor({"value": 0}, 1, 30_000) for _ in range(4)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [str(i % 2)])
    assert purgatory.complete_all() == 4
    assert all(op.completions == 1 and not op.expired for op in ops)
    assert len(purgatory) == 0 and clock.armed == 0


def test_cancel_drops_without_completing() -> None:
    clock = ManualScheduler()
    purgatory: Purgatory[str] = Purgatory("test", clock)
    op = WaitFor({"value": 0}, 1, 100)
    purgatory.try_complete_else_watch(op, ["a"])
    op.cancel()
    clock.advance(1)
    assert op.completions == 0 and len(purgatory) == 0
