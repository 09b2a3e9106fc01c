"""Real ZooKeeper servers (Debian's ``zookeeper`` package) on loopback ports.

``deploy/setup.sh test`` (run by tests/run.sh) installs it; without it the
tests that need it are skipped, and only then. Each server runs as a plain
java process (no systemd) with its admin server off, in a folder of its own
(zoo.cfg, data, log), and can be killed and started again on the same port
and data. The ``zookeeper`` fixture is one standalone server per test
session; `standalone_zookeeper` and `zookeeper_ensemble` make dedicated ones
for tests that stop them. `zk_session` is a test's own client of one.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.helpers import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF = Path("/etc/zookeeper/conf_example")
STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
# An ensemble member needs the quorum peer (ZooKeeperServerMain runs standalone only).
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Sessions may last 2-20 ticks: 1-10 s.
TICK_MS = 500


def _four_letter(port: int, word: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(word)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        return out


def require_zookeeper() -> str:
    """The java command, or skip the test."""
    java = shutil.which("java")
    if not ZOOKEEPER_JAR.exists() or java is None:
        pytest.skip("ZooKeeper is not installed; deploy/setup.sh test (tests/run.sh) installs it")
    return java


@dataclass
class ZooKeeperServer:
    """One server process, restartable on its port and data (``root``: zoo.cfg, data/, log)."""

    port: int
    root: Path
    main: str = STANDALONE_MAIN
    proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.root / "zoo.cfg"

    @property
    def log(self) -> Path:
        return self.root / "zookeeper.log"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        """Starts the process (see `wait_serving`)."""
        assert not self.alive, "already running"
        java = require_zookeeper()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    java,
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-cp",
                    f"{ZOOKEEPER_CONF}:{ZOOKEEPER_JAR}",
                    self.main,
                    str(self.config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def mode(self) -> str | None:
        """``standalone``, ``leader`` or ``follower`` while serving clients; None otherwise."""
        try:
            answer = _four_letter(self.port, b"srvr").decode(errors="replace")
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ").strip()
        return None

    def packets_received(self) -> int:
        """Requests the server has taken so far, from every client (``srvr``'s count, pings
        included)."""
        answer = _four_letter(self.port, b"srvr").decode(errors="replace")
        return int(answer.split("Received:")[1].split()[0])

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.mode() is None:
            if not self.alive:
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(f"ZooKeeper exited with {code}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper did not serve in {timeout}s:\n{self.tail()}")
            time.sleep(0.1)

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        self.launch()
        try:
            self.wait_serving(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM; kill -9 after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _config(root: Path, port: int, extra: str = "") -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "zoo.cfg").write_text(
        f"tickTime={TICK_MS}\n"
        f"dataDir={root / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,envi\n" + extra
    )


def standalone_zookeeper(root: Path, max_session_ms: int | None = None) -> ZooKeeperServer:
    """A standalone server on a free port, its files in ``root``; not started. Sessions
    last at most 20 ticks, or ``max_session_ms``."""
    port = free_port()
    _config(root, port, "" if max_session_ms is None else f"maxSessionTimeout={max_session_ms}\n")
    return ZooKeeperServer(port, root)


def zookeeper_ensemble(root: Path, size: int = 3) -> list[ZooKeeperServer]:
    """``size`` quorum peers on loopback (``root``/zk<N>, myid N); not started.
    Their connect string is ``",".join(s.connect for s in servers)``."""
    ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
    servers_lines = "".join(
        f"server.{n}=127.0.0.1:{peer}:{election}\n"
        for n, (_, peer, election) in enumerate(ports, 1)
    )
    servers = []
    for n, (client, _, _) in enumerate(ports, 1):
        node = root / f"zk{n}"
        _config(node, client, f"initLimit=10\nsyncLimit=5\n{servers_lines}")
        (node / "data").mkdir()
        (node / "data" / "myid").write_text(f"{n}\n")
        servers.append(ZooKeeperServer(client, node, QUORUM_MAIN))
    return servers


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    require_zookeeper()
    server = standalone_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield server.start()
    finally:
        server.stop()


@contextmanager
def zk_session(connect: str, timeout: float = 10) -> Iterator[KazooClient]:
    """A started kazoo client on ``connect`` (a chroot in it created when missing), stopped
    and closed at the end."""
    zk = KazooClient(hosts=connect, timeout=timeout)
    zk.start(timeout=timeout)
    try:
        zk.ensure_path("/")
        yield zk
    finally:
        zk.stop()
        zk.close()
