"""A fault run's timeline as a PNG: sends and reads per second, the faults shaded across."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.faults.checker import fault_intervals

SEND_COLORS = {"ok": "tab:green", "fail": "tab:red", "unknown": "tab:orange"}
# The transactional workload's transactions, by outcome, on the same axes.
SEND_COLORS |= {"committed": "tab:green", "aborted": "tab:gray"}
FAULT_COLORS = ("tab:red", "tab:purple", "tab:blue", "tab:brown", "tab:pink", "tab:olive")


def _per_second(times: list[float], seconds: int) -> list[int]:
    """Counts per whole second, the last repeated so a post step draws it to its end."""
    counts = [0] * seconds
    for t in times:
        counts[min(max(int(t), 0), seconds - 1)] += 1
    return [*counts, counts[-1]]


def timeline(events: Iterable[dict[str, Any]], path: Path, title: str) -> None:
    """Writes the PNG to ``path``: top, sends (or transactions) per second by outcome;
    below, records read per second; each fault a shaded span over both, labeled ``kind
    target``."""
    sends: dict[str, list[float]] = {o: [] for o in SEND_COLORS}
    reads: list[float] = []
    nemesis: list[dict[str, Any]] = []
    t_first, t_last = math.inf, -math.inf
    for e in events:
        t = e.get("t")
        if not isinstance(t, int | float):
            continue
        kind = e.get("kind")
        if kind in ("send", "txn"):
            sends.setdefault(str(e.get("outcome")), []).append(t)
        elif kind == "read":
            reads.append(t)
        elif kind == "nemesis":
            nemesis.append(e)
        else:
            continue
        t_first, t_last = min(t_first, t), max(t_last, t)

    fig = Figure(figsize=(12, 6), dpi=90)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    fig.suptitle(title)
    top.set_ylabel("sends or transactions / s")
    bottom.set_ylabel("records read / s")
    bottom.set_xlabel("seconds since start")
    if t_first == math.inf:
        top.text(0.5, 0.5, "no events", ha="center", va="center", transform=top.transAxes)
        fig.savefig(path)
        return

    seconds = max(int(t_last) + 1, 1)
    xs = list(range(seconds + 1))
    for outcome, times in sends.items():
        if times:
            color = SEND_COLORS.get(outcome, "tab:gray")
            top.step(xs, _per_second(times, seconds), where="post", color=color, label=outcome)
    if reads:
        bottom.step(xs, _per_second(reads, seconds), where="post", color="tab:blue", label="read")

    kinds: dict[str, str] = {}
    for kind, target, start, end in fault_intervals(nemesis, t_first):
        color = kinds.setdefault(kind, FAULT_COLORS[len(kinds) % len(FAULT_COLORS)])
        end = min(end, seconds)
        for ax in (top, bottom):
            ax.axvspan(start, end, color=color, alpha=0.15, linewidth=0)
        top.text(
            start,
            0.98,
            f" {kind} {target}".rstrip(),
            transform=top.get_xaxis_transform(),
            rotation=90,
            fontsize=7,
            va="top",
            ha="left",
            color=color,
        )
    for ax in (top, bottom):
        ax.set_xlim(0, seconds)
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
