"""A real kbroker process, started through the CLI, for tests that use real clients."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

KBROKER = [sys.executable, "-m", "kbroker.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class BrokerProcess:
    """One broker subprocess on loopback; restartable on the same data dir and port."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # Runs in the child before exec (e.g. to lower its resource limits).
    preexec: Callable[[], None] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *settings: str, timeout: float = 30.0) -> BrokerProcess:
        args = [*KBROKER, "serve", "--data-dir", str(self.data_dir), "--listen", self.bootstrap]
        for s in (*self.extra, *settings):
            args += ["--set", s]
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"
        out = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=self.preexec
        )
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start listening in {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[callable]:  # type: ignore[valid-type]
    started: list[BrokerProcess] = []

    def make(*settings: str, data_dir: Path | None = None) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}")
        b.start(*settings)
        started.append(b)
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:  # type: ignore[no-untyped-def]
    return broker_factory()  # type: ignore[no-any-return]


os.environ.setdefault("PYTHONUNBUFFERED", "1")
