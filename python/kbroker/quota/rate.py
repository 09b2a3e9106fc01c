"""`Rate`: a value per second over the last few time windows, as Kafka's quota metrics
measure it (a Rate over a WindowedSum), and the throttle time of a rate over its bound.

`samples` windows of `window_ms` each are kept; recording adds to the
current window (a new one starts when it is `window_ms` old, reusing the
oldest slot of ``samples + 1``); windows with no record for
``samples * window_ms`` are reset when measured. The rate is the sum of the
windows over the time since the oldest one started, that time counted as at
least ``samples - 1`` whole windows: a client that just started is measured
as if it had been quiet before, so it may send up to ``bound * (samples - 1)
* window`` at once before it is throttled (Kafka's behaviour).

The throttle time of a rate over its bound (KIP-219, Kafka's
QuotaUtils.throttleTime) is how long the client must stay silent for the
measured rate to come back to the bound: ``(rate - bound) / bound * window``,
the window being the one the rate was computed over, in milliseconds, rounded.
"""

from __future__ import annotations

import math


class _Sample:
    __slots__ = ("last_event_ms", "start_ms", "value")

    def __init__(self, now_ms: float) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def reset(self, now_ms: float) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class Rate:
    """A per-second rate of recorded values over `samples` windows of `window_ms`."""

    __slots__ = ("_current", "_samples", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: float) -> None:
        if samples < 1 or window_ms <= 0:
            raise ValueError("a rate needs at least one window of positive length")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is computed over (at least ``samples - 1`` windows, at least 1 ms)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def total(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def measure(self, now_ms: float) -> float:
        """Values per second."""
        total, window = self.total_and_window(now_ms)
        return total / (window / 1000.0)

    def total_and_window(self, now_ms: float) -> tuple[float, float]:
        """`total` and `window_size_ms` at once (one pass over the windows)."""
        expire = self.samples * self.window_ms
        total = 0.0
        oldest = now_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)
            total += sample.value
            if sample.start_ms < oldest:
                oldest = sample.start_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return total, max(elapsed, 1.0)


def throttle_time_ms(rate: Rate, bound: float, now_ms: float) -> int:
    """0 when the rate is within `bound`, else how long to wait (ms) until it is again."""
    total, window = rate.total_and_window(now_ms)
    value = total / (window / 1000.0)
    if value <= bound:
        return 0
    if bound <= 0:
        # A bound of 0 lets nothing through: each request waits out the whole measured span
        # (Kafka's formula divides by zero here).
        return int(rate.samples * rate.window_ms)
    return _round_half_up((value - bound) / bound * window)


def _round_half_up(x: float) -> int:
    # Java's Math.round: floor(x + 0.5).
    return math.floor(x + 0.5)
