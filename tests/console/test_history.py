"""The console's memory of each group's lag: the window, the gap between samples, the
bound on groups."""

from __future__ import annotations

from kbroker.console.history import LagHistory


def test_samples_older_than_the_window_are_dropped() -> None:
    history = LagHistory(window=60, min_gap=1)
    for t in range(0, 200, 10):
        history.record("g", float(t), t)
    assert history.points("g", 190.0) == [(float(t), t) for t in range(130, 200, 10)]
    assert history.points("g", 1000.0) == []
    assert history.points("unknown", 190.0) == []


def test_samples_closer_than_the_gap_keep_the_newest_value() -> None:
    history = LagHistory(window=60, min_gap=5)
    history.record("g", 0.0, 1)
    history.record("g", 2.0, 7)
    history.record("g", 6.0, 9)
    assert history.points("g", 6.0) == [(0.0, 7), (6.0, 9)]


def test_the_least_recently_sampled_group_is_forgotten_first() -> None:
    history = LagHistory(max_groups=2)
    history.record("a", 0.0, 1)
    history.record("b", 0.0, 1)
    history.record("a", 10.0, 2)  # a is now the most recent
    history.record("c", 10.0, 3)
    assert history.points("b", 10.0) == []
    assert history.points("a", 10.0) == [(0.0, 1), (10.0, 2)]
    assert history.points("c", 10.0) == [(10.0, 3)]
