"""Clock jumps for one broker at a time: the wall clock of a process, shifted.

Every broker of a run with the ``clock`` fault starts with ``libkbf_clock.so``
(``bench/faults/clock_shim``, built here with cargo on first use) preloaded and a file
of its own that holds its clock's offset in milliseconds. Writing the file steps that
broker's wall clock (``clock_gettime`` of the realtime clocks, ``gettimeofday``,
``time``) within 100 ms; its monotonic clock, and every other process's clocks, are
left alone, as when NTP steps one machine's clock. Both systems read the wall clock
through libc (CPython's ``time.time``, Rust's ``SystemTime``, the JVM's
``System.currentTimeMillis`` and ``Instant.now``), so the same jump reaches kbroker
and Kafka alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CRATE = "kbf-clock"
LIBRARY = REPO / "target" / "release" / "libkbf_clock.so"


def _cargo() -> str:
    found = shutil.which("cargo")
    if found:
        return found
    home = Path.home() / ".cargo" / "bin" / "cargo"
    if home.exists():
        return str(home)
    raise RuntimeError("cargo is not installed: deploy/setup.sh installs it")


def library() -> Path:
    """The shim, built (or brought up to date) by cargo."""
    done = subprocess.run(
        [_cargo(), "build", "--quiet", "--release", "-p", CRATE],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not LIBRARY.exists():
        raise RuntimeError(f"building {CRATE} failed:\n{done.stderr[-2000:]}")
    return LIBRARY


class Clock:
    """One process's wall-clock offset, kept in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset_ms = 0
        self.set(0)

    def env(self, shim: Path) -> dict[str, str]:
        """What the process's environment needs to run on this clock."""
        return {"LD_PRELOAD": str(shim), "KBF_CLOCK_FILE": str(self.path)}

    def set(self, offset_ms: int) -> None:
        """Steps the clock to real time + ``offset_ms`` (atomically: a reader sees the old
        offset or the new one)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset_ms}\n")
        os.replace(tmp, self.path)
        self.offset_ms = offset_ms
