"""A real ZooKeeper server (Debian's ``zookeeper`` package) on a loopback port.

``deploy/setup.sh test`` (run by tests/run.sh) installs it; without it the
tests that need it are skipped, and only then. The server runs standalone
(ZooKeeperServerMain, no systemd) with its admin server off, one per test
session.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF = Path("/etc/zookeeper/conf_example")


@dataclass
class ZooKeeperServer:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"


def _four_letter(port: int, word: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(word)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        return out


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    java = shutil.which("java")
    if not ZOOKEEPER_JAR.exists() or java is None:
        pytest.skip("ZooKeeper is not installed; deploy/setup.sh test (tests/run.sh) installs it")
    data = tmp_path_factory.mktemp("zookeeper")
    port = free_port()
    config = data / "zoo.cfg"
    config.write_text(
        "tickTime=500\n"
        f"dataDir={data / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,envi\n"
    )
    log = data / "zookeeper.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                java,
                "-Xmx256m",
                "-cp",
                f"{ZOOKEEPER_CONF}:{ZOOKEEPER_JAR}",
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(config),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = ZooKeeperServer(port, proc, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {proc.returncode}:\n{log.read_text(errors='replace')}"
                )
            try:
                if _four_letter(port, b"ruok") == b"imok":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"ZooKeeper did not start in 30s:\n{log.read_text(errors='replace')}"
                )
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
