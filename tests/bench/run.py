"""Running a bench module as its users do: ``python -m bench.<name>`` from the repository."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def bench(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m <module> args`` run to its end (at most ``timeout`` seconds), its output
    captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench_rows(module: str, *args: str, timeout: float) -> list[dict[str, Any]]:
    """The JSON lines a bench run that must succeed prints; its exit code otherwise fails the
    test, with the end of its standard error."""
    proc = bench(module, *args, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]
