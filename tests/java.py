"""The tests' Java programs (tests/java/*.java): compiled against Apache Kafka's jars by
bench.java (cached in target/java/) and run as one JVM each. Without java or javac, the
tests that need them are skipped."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from bench.java import JavaMissing, java_command, parse_output

SOURCES = Path(__file__).resolve().parent / "java"


def run_java(
    program: str, folders: Sequence[Path], *args: str, timeout: float = 90
) -> dict[str, str]:
    """Runs tests/java/<program>.java to its end: the ``name=value`` lines it printed."""
    try:
        cmd = java_command(SOURCES / f"{program}.java", folders, *args)
    except JavaMissing as exc:
        pytest.skip(str(exc))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{program} {' '.join(args)} exited with {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr[-4000:]}"
        )
    return parse_output(proc.stdout)
