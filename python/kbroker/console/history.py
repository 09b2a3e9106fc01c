"""What the console remembers while it runs: each consumer group's lag over the last hour.

`LagHistory` keeps, per group, (time, total lag) samples no older than `WINDOW` seconds,
at most one per `MIN_GAP` seconds and for at most `MAX_GROUPS` groups (the least recently
sampled is forgotten first). Samples come from the console's background sampler and from
every group page shown.
"""

from __future__ import annotations

from collections import OrderedDict, deque

WINDOW = 3600.0
MIN_GAP = 1.0
MAX_GROUPS = 1000


class LagHistory:
    def __init__(
        self, window: float = WINDOW, min_gap: float = MIN_GAP, max_groups: int = MAX_GROUPS
    ) -> None:
        self.window, self.min_gap, self.max_groups = window, min_gap, max_groups
        self._samples: OrderedDict[str, deque[tuple[float, int]]] = OrderedDict()

    def record(self, group: str, when: float, lag: int) -> None:
        samples = self._samples.get(group)
        if samples is None:
            samples = self._samples[group] = deque()
            while len(self._samples) > self.max_groups:
                self._samples.popitem(last=False)
        self._samples.move_to_end(group)
        if samples and when - samples[-1][0] < self.min_gap:
            samples[-1] = (samples[-1][0], lag)  # the newest value, at the sample's time
        else:
            samples.append((when, lag))
        while samples and samples[0][0] < when - self.window:
            samples.popleft()

    def points(self, group: str, now: float) -> list[tuple[float, int]]:
        """The group's samples of the last window, oldest first."""
        return [(t, lag) for t, lag in self._samples.get(group, ()) if t >= now - self.window]
