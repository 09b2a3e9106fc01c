"""The clock fault's shim (``bench/faults/clock_shim``), on real processes: a Python and a
Java process under it read the wall clock shifted by what their clock file says, stepped
while they run, and their monotonic clock untouched; a malformed file is no shift."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench.faults.clock import Clock, library

from tests.helpers import wait_for

READER = """
import sys, time, datetime
for line in sys.stdin:
    print(time.time(), time.monotonic(), datetime.datetime.now().timestamp(), flush=True)
"""


class Reader:
    """A Python process under the shim that prints its clocks each time it is asked."""

    def __init__(self, clock: Clock) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", READER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={"PATH": "/usr/bin:/bin", **clock.env(library())},
        )

    def ask(self) -> tuple[float, float, float]:
        """(its wall clock - ours, its monotonic clock - ours, its datetime.now - ours)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        wall, mono = time.time(), time.monotonic()
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        theirs = [float(x) for x in self.proc.stdout.readline().split()]
        return theirs[0] - wall, theirs[1] - mono, theirs[2] - wall

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def shifted_by(reader: Reader, seconds: float) -> bool:
    wall, mono, now = reader.ask()
    return abs(wall - seconds) < 1 and abs(now - seconds) < 1 and abs(mono) < 1


def test_a_python_process_sees_its_wall_clock_stepped_and_its_monotonic_clock_not(
    tmp_path: Path,
) -> None:
    clock = Clock(tmp_path / "b1.clock")
    reader = Reader(clock)
    try:
        assert shifted_by(reader, 0)
        clock.set(120_000)
        wait_for(lambda: shifted_by(reader, 120), "a step of +120 s", timeout=5, interval=0.05)
        clock.set(-90_500)
        wait_for(lambda: shifted_by(reader, -90.5), "a step of -90.5 s", timeout=5, interval=0.05)
        clock.path.write_text("ninety seconds\n")  # not an offset: no shift
        wait_for(lambda: shifted_by(reader, 0), "no shift", timeout=5, interval=0.05)
        clock.set(30_000)
        wait_for(lambda: shifted_by(reader, 30), "a step of +30 s", timeout=5, interval=0.05)
        clock.path.unlink()  # no file: no shift
        wait_for(lambda: shifted_by(reader, 0), "no shift", timeout=5, interval=0.05)
    finally:
        reader.close()


JAVA = """
public class Now {
    public static void main(String[] args) {
        long instant = java.time.Instant.now().toEpochMilli();
        System.out.println(System.currentTimeMillis() + " " + instant);
    }
}
"""


def test_a_jvm_reads_the_shifted_wall_clock(tmp_path: Path) -> None:
    """Kafka's brokers run on the JVM: System.currentTimeMillis and Instant.now move."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java")
    source = tmp_path / "Now.java"
    source.write_text(JAVA)
    clock = Clock(tmp_path / "jvm.clock")
    clock.set(-200_000)
    before = time.time()
    out = subprocess.run(
        [java, str(source)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **clock.env(library())},
        timeout=60,
    )
    after = time.time()
    assert out.returncode == 0, out.stderr
    for millis in out.stdout.split():
        seen = int(millis) / 1000
        assert before - 200 - 1 <= seen <= after - 200 + 1, (seen, before, after)
