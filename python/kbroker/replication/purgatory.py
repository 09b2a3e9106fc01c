"""Delayed operations and the purgatory that holds them until they can complete.

A request that cannot be answered now (a fetch waiting for ``min_bytes``, a
produce with acks=all waiting for its replicas, a rebalance waiting for its
members) becomes a `DelayedOperation`: it completes as soon as its condition
holds (`try_complete`) or when its timeout passes, whichever is first, and
exactly once (`on_complete`; `on_expire` runs after it on a timeout).

A `Purgatory` watches operations by key (a partition, a group): whoever
changes what an operation waits for calls `check_and_complete(key)`, and
only the operations watching that key are looked at. Everything runs on the
event loop, so there are no locks; the timer is an injectable `Scheduler` so
tests can drive time by hand.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """What a delayed operation needs of a clock: asyncio's loop has it."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle: ...


class DelayedOperation(ABC):
    """An operation that completes when `try_complete` finds it can, or on timeout.

    Subclasses implement `try_complete` (check the condition; if it holds,
    ``return self.force_complete()``) and `on_complete` (do the work: build
    and deliver the answer). `on_expire` is a hook for what a timeout adds
    (a log line, a metric). Completion happens once, whatever calls it.
    """

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = max(delay_ms, 0)
        self.completed = False
        self._timer: TimerHandle | None = None
        self._on_done: list[Callable[[DelayedOperation], None]] = []

    @abstractmethod
    def try_complete(self) -> bool:
        """Completes the operation if it can now; True when it did."""

    @abstractmethod
    def on_complete(self) -> None:
        """The operation's work, run exactly once."""

    def on_expire(self) -> None:  # noqa: B027 - an optional hook
        """Runs after `on_complete` when the timeout completed the operation."""

    def force_complete(self) -> bool:
        """Completes now (condition met, timeout, or shutdown); False if already done."""
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self.on_complete()
        finally:
            for done in self._on_done:
                done(self)
            self._on_done.clear()
        return True

    def start_timer(self, scheduler: Scheduler) -> None:
        """Arms the timeout (the purgatory does this when it starts watching)."""
        if self._timer is None and not self.completed:
            self._timer = scheduler.call_later(self.delay_ms / 1000, self._expire)

    def cancel(self) -> None:
        """Drops the operation without completing it (its owner answers otherwise)."""
        if self.completed:
            return
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for done in self._on_done:
            done(self)
        self._on_done.clear()

    def _expire(self) -> None:
        self._timer = None
        if self.force_complete():
            self.on_expire()


class Purgatory(Generic[K]):
    """Delayed operations watched by key, completed by `check_and_complete(key)`."""

    def __init__(self, name: str, scheduler: Scheduler | None = None) -> None:
        self.name = name
        self._scheduler = scheduler
        self._watchers: dict[K, dict[DelayedOperation, None]] = {}
        self._pending: dict[DelayedOperation, tuple[K, ...]] = {}

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            self._scheduler = asyncio.get_running_loop()
        return self._scheduler

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[K]) -> bool:
        """Completes ``op`` now if it can; else watches it under ``keys`` until it does.

        Returns True when it completed at once.
        """
        if op.try_complete():
            return True
        watched = tuple(keys)
        for key in watched:
            self._watchers.setdefault(key, {})[op] = None
        self._pending[op] = watched
        op._on_done.append(self._forget)
        op.start_timer(self.scheduler)
        return False

    def check_and_complete(self, key: K) -> int:
        """Tries every operation watching ``key``; returns how many completed."""
        watchers = self._watchers.get(key)
        if not watchers:
            return 0
        completed = 0
        for op in list(watchers):
            if not op.completed and op.try_complete():
                completed += 1
        return completed

    def complete_all(self) -> int:
        """Completes every pending operation now (shutdown: nobody waits for a timeout)."""
        completed = 0
        for op in list(self._pending):
            if op.force_complete():
                completed += 1
        return completed

    def watched(self, key: K) -> int:
        """Operations watching ``key``."""
        return len(self._watchers.get(key, ()))

    def __len__(self) -> int:
        """Operations pending (each counted once, whatever it watches)."""
        return len(self._pending)

    def _forget(self, op: DelayedOperation) -> None:
        for key in self._pending.pop(op, ()):
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.pop(op, None)
                if not watchers:
                    del self._watchers[key]
