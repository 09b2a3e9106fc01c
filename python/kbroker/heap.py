"""The broker's long-lived objects and Python's cyclic garbage collector.

A broker holds objects for every topic and partition (metadata, logs, partition
state) that live as long as the topic. Python's collector walks every tracked
object at each full collection, and runs one whenever the objects that
survived grew by a quarter since the last: while thousands of topics are
being created, that is a stop of the event loop (every client) of hundreds of
milliseconds at 20,000 topics, over and over, to find no garbage at all.

`LongLivedObjects` takes what exists once such a burst of new objects is
made (`settled`: ``gc.freeze()``), so full collections walk only the objects
made since. Frozen objects still go when no longer referenced; only cyclic
garbage among them waits, until `released` (``gc.unfreeze()``) gives them
back to the collector: when topics are deleted (their objects may now be
such garbage), and at the latest ``hold_s`` after the first freeze, so a
broker that never deletes a topic never keeps garbage for longer than that.

`collect_young_objects_less_often`: a request's futures and callbacks live
until its writes finish on the I/O threads, so they outlived the default 700
allocations between young collections, were promoted, and made full
collections frequent under load.
"""

from __future__ import annotations

import asyncio
import gc

# The longest a frozen object that became cyclic garbage waits for the collector.
HOLD_S = 600.0
# Allocations between young collections once the broker serves (CPython's default: 700).
YOUNG_THRESHOLD = 20_000


def collect_young_objects_less_often() -> None:
    """Young collections every `YOUNG_THRESHOLD` allocations (for the broker daemon)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


class LongLivedObjects:
    """Freezes the objects of a settled burst; gives them back on deletions and in time."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self._hold_s = hold_s
        self._release: asyncio.TimerHandle | None = None

    def settled(self) -> None:
        """Objects made so far (the new topics') are long-lived: full collections skip
        them until `released`. Call on the event loop."""
        gc.freeze()
        if self._release is None:
            self._release = asyncio.get_running_loop().call_later(self._hold_s, self.released)

    def released(self) -> None:
        """Every frozen object is the collector's again (some may have become garbage)."""
        if self._release is not None:
            self._release.cancel()
            self._release = None
        gc.unfreeze()

    def close(self) -> None:
        """Stops the timer and releases everything (at shutdown)."""
        self.released()
