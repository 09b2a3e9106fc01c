"""What every bench module shares: percentiles of latency samples, and result rows."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (nan when empty)."""
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def latency_percentiles(
    prefix: str, samples: Iterable[float], qs: Iterable[float] = (0.5, 0.99, 0.999)
) -> dict[str, float]:
    """``{prefix}_p50_ms``, ``{prefix}_p99_ms``, ``{prefix}_p999_ms`` (one per ``qs``) of
    millisecond ``samples``; empty when there are none."""
    s = sorted(samples)
    if not s:
        return {}
    return {f"{prefix}_p{q * 100:g}_ms".replace(".", ""): round(percentile(s, q), 3) for q in qs}


def emit(results: Path, row: dict[str, Any]) -> None:
    """One JSON line on standard output and appended to ``results``."""
    print(json.dumps(row), flush=True)
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
