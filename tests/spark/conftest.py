"""Fixtures for the Spark tests: one kbroker process and one local SparkSession for the
whole run (a JVM per test would cost ~15 s each), and helpers to run ``kbroker pipeline``."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import KBROKER, BrokerProcess

pytest.importorskip("pyspark", reason="needs kbroker[spark] (deploy/setup.sh test installs it)")
pytest.importorskip("pyarrow", reason="needs kbroker[spark] (deploy/setup.sh test installs it)")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java 17", allow_module_level=True)

PIPELINE_TIMEOUT = 240.0


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data")
    b.start()
    yield b
    b.kill()


@pytest.fixture(scope="session")
def spark(spark_broker: BrokerProcess) -> Iterator[Any]:
    """A local SparkSession; it depends on the broker only so that it stops first."""
    from kbroker.spark import spark_session

    session = spark_session(
        "local[2]",
        "kbroker-tests",
        {"spark.ui.enabled": "false", "spark.driver.memory": "1g"},
        shuffle_partitions=2,
    )
    yield session
    session.stop()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def reap(pids: list[int], timeout: float = 30.0) -> list[int]:
    """Waits for ``pids`` (processes this test started) to exit; SIGKILLs those that
    linger and returns them."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    lingered = [p for p in pids if alive(p)]
    for p in lingered:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return lingered


def pipeline(
    *args: str, timeout: float = PIPELINE_TIMEOUT, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs ``kbroker pipeline ARGS`` to its end; kills it and its JVM if it overruns."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*KBROKER, "pipeline", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        below = descendants(proc.pid)
        proc.kill()
        out, err = proc.communicate()
        reap(below, 5)
        raise AssertionError(
            f"kbroker pipeline {' '.join(args)} ran over {timeout}s:\n{err[-3000:]}"
        ) from None
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check and done.returncode != 0:
        raise AssertionError(
            f"kbroker pipeline {' '.join(args)} exited {done.returncode}:\n{err[-3000:]}"
        )
    return done


__all__ = ["PIPELINE_TIMEOUT", "descendants", "pipeline", "reap", "spark", "spark_broker"]
