"""A cluster for the fault harness: a ZooKeeper ensemble and brokers (kbroker's or Apache
Kafka's), each process in a network namespace of its own, each broker's data on a small
file system of its own.

Every node listens on its namespace's address (ZooKeeper on 2181, brokers on 9092);
clients in the root namespace reach them through the bridge. The brokers of both
systems get the same settings (``BROKER_SETTINGS`` plus the caller's), so the harness
compares like with like.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster import KAFKA_ZK_VERSION, ZOOKEEPER_CONF, ZOOKEEPER_JAR
from bench.faults.clock import Clock
from bench.faults.disk import SmallDisk
from bench.faults.net import Network
from bench.systems import kafka_lib, kbroker_python

log = logging.getLogger("bench.faults")

ZK_PORT = 2181
BROKER_PORT = 9092
CHROOT = "/kbf"
# Both systems: ZooKeeper sessions short enough that a lost broker is noticed within a
# fault's length, and the defaults the issue asks the harness to hold to.
BROKER_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    "replica.lag.time.max.ms": "10000",
}


def wait(check: Callable[[], Any], what: str, timeout: float, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def connects(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


@dataclass
class Node:
    """One process of the cluster in its namespace: started, killed, paused, started again."""

    name: str
    cmd: list[str]
    log_path: Path
    address: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0
    env: dict[str, str] = field(default_factory=dict)  # added to the harness's own

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        assert not self.alive, f"{self.name} is running"
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== start {self.starts + 1} at {time.ctime()} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=os.environ | self.env if self.env else None,
            )
        self.paused = False
        self.starts += 1

    def listening(self) -> bool:
        return connects(self.address, self.port)

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.paused = False

    def pause(self) -> None:
        if self.alive:
            os.kill(self.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            self.paused = True

    def resume(self) -> None:
        if self.alive:
            os.kill(self.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        self.paused = False

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (after SIGCONT), kill -9 after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class FaultCluster:
    """``zookeepers`` (names zk1..) and ``brokers`` (names b1..; broker id N for bN)."""

    system: str
    root: Path
    net: Network
    disks: dict[str, SmallDisk]
    zookeepers: dict[str, Node] = field(default_factory=dict)
    brokers: dict[str, Node] = field(default_factory=dict)
    # The brokers' wall clocks, when the run jumps them (``clock_shim`` is preloaded).
    clock_shim: Path | None = None
    clocks: dict[str, Clock] = field(default_factory=dict)

    @property
    def zk_connect(self) -> str:
        return ",".join(f"{n.address}:{ZK_PORT}" for n in self.zookeepers.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.address}:{BROKER_PORT}" for n in self.brokers.values())

    def broker_id(self, name: str) -> int:
        return int(name.removeprefix("b"))

    def broker_name(self, broker_id: int) -> str:
        return f"b{broker_id}"

    # -- building ---------------------------------------------------------------------

    def add_zookeeper(self, name: str) -> Node:
        home = self.root / name
        (home / "data").mkdir(parents=True, exist_ok=True)
        peers = [n for n in self.net.nodes if n.startswith("zk")]
        myid = peers.index(name) + 1
        (home / "data" / "myid").write_text(f"{myid}\n")
        servers = "".join(
            f"server.{i}={self.net.address(p)}:2888:3888\n" for i, p in enumerate(peers, 1)
        )
        (home / "zoo.cfg").write_text(
            "tickTime=500\ninitLimit=10\nsyncLimit=5\n"
            f"dataDir={home / 'data'}\nclientPort={ZK_PORT}\n"
            f"clientPortAddress={self.net.address(name)}\n"
            "admin.enableServer=false\nmaxClientCnxns=0\n4lw.commands.whitelist=srvr,ruok\n"
            + servers
        )
        cmd = [
            *self.net.exec_prefix(name),
            "java",
            "-Xmx192m",
            "-XX:+UseSerialGC",
            "-cp",
            f"{ZOOKEEPER_CONF}:{ZOOKEEPER_JAR}",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(home / "zoo.cfg"),
        ]
        node = Node(name, cmd, self.root / f"{name}.log", self.net.address(name), ZK_PORT)
        self.zookeepers[name] = node
        return node

    def add_broker(self, name: str, settings: dict[str, str]) -> Node:
        broker_id = self.broker_id(name)
        address = self.net.address(name)
        data = self.disks[name].mountpoint / "data"
        zk = self.zk_connect + CHROOT  # every ZooKeeper node is added first
        merged = BROKER_SETTINGS | settings
        if self.system == "kbroker":
            cmd = [
                *self.net.exec_prefix(name),
                kbroker_python(),
                "-m",
                "kbroker.cli",
                "serve",
                "--broker-id",
                str(broker_id),
                "--zookeeper",
                zk,
                "--listen",
                f"{address}:{BROKER_PORT}",
                "--data-dir",
                str(data),
            ]
            for key, value in merged.items():
                cmd += ["--set", f"{key}={value}"]
        else:
            home = self.root / name
            home.mkdir(parents=True, exist_ok=True)
            props = {
                "broker.id": str(broker_id),
                "zookeeper.connect": zk,
                "listeners": f"PLAINTEXT://{address}:{BROKER_PORT}",
                "log.dirs": str(data),
            } | merged
            (home / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            (home / "log4j.properties").write_text(
                "log4j.rootLogger=INFO, out\n"
                "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
                "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
                "log4j.logger.kafka.request.logger=WARN\n"
                "log4j.logger.state.change.logger=WARN\n"
            )
            cmd = [
                *self.net.exec_prefix(name),
                "java",
                "-Xmx512m",
                "-Xms512m",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true",
                f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
                "-cp",
                f"{kafka_lib(KAFKA_ZK_VERSION)}/*",
                "kafka.Kafka",
                str(home / "server.properties"),
            ]
        node = Node(name, cmd, self.root / f"{name}.log", address, BROKER_PORT)
        if self.clock_shim is not None:
            clock = self.clocks[name] = Clock(self.root / f"{name}.clock")
            node.env = clock.env(self.clock_shim)
        self.brokers[name] = node
        return node

    # -- running ----------------------------------------------------------------------

    def start_zookeepers(self, timeout: float = 60) -> None:
        for node in self.zookeepers.values():
            node.start()
        wait(self.zookeeper_quorum, "a ZooKeeper quorum", timeout, 0.5)
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zk_connect, timeout=10)
        client.start(timeout=20)
        try:
            client.ensure_path(CHROOT)
        finally:
            client.stop()
            client.close()

    def zookeeper_quorum(self) -> bool:
        modes = [zk_mode(n.address) for n in self.zookeepers.values() if n.alive]
        return "leader" in modes

    def start_brokers(self, timeout: float = 120) -> None:
        for node in self.brokers.values():
            if not node.alive:
                node.start()
        self.wait_brokers(timeout)

    def wait_brokers(self, timeout: float = 120) -> None:
        """Until every broker is listening and registered, and there is a controller."""

        def up() -> bool:
            for node in self.brokers.values():
                if not node.alive:
                    raise RuntimeError(f"broker {node.name} exited:\n{node.tail()}")
            if not all(n.listening() for n in self.brokers.values()):
                return False
            ids = self.registered()
            return ids == sorted(self.broker_id(n) for n in self.brokers) and (
                self.controller_id() is not None
            )

        wait(up, f"{len(self.brokers)} {self.system} brokers registered", timeout, 0.5)

    def _zk_get(self, op: Callable[[Any], Any]) -> Any:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zk_connect + CHROOT, timeout=5)
        try:
            client.start(timeout=5)
            return op(client)
        except Exception:
            return None
        finally:
            client.stop()
            client.close()

    def registered(self) -> list[int]:
        ids = self._zk_get(lambda c: c.get_children("/brokers/ids"))
        return sorted(int(i) for i in ids or [])

    def controller_id(self) -> int | None:
        import json

        data = self._zk_get(lambda c: c.get("/controller")[0])
        if not data:
            return None
        return int(json.loads(data)["brokerid"])

    def partition_state(self, topic: str, partition: int) -> dict[str, Any] | None:
        import json

        data = self._zk_get(
            lambda c: c.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0]
        )
        return None if not data else dict(json.loads(data))

    def restart_dead(self) -> list[str]:
        """Starts every broker and ZooKeeper node that is not running (a fault may end one:
        a full disk stops a Kafka broker); resumes paused ones. The names restarted."""
        restarted = []
        for node in [*self.zookeepers.values(), *self.brokers.values()]:
            if node.paused:
                node.resume()
            if not node.alive:
                node.start()
                restarted.append(node.name)
        return restarted

    def stop(self) -> None:
        """Brokers first (SIGTERM, then kill -9), then ZooKeeper."""
        for node in self.brokers.values():
            node.resume()
        for node in self.brokers.values():
            if node.alive:
                node.proc.terminate()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        for node in self.brokers.values():
            if node.proc is None:
                continue
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.kill()
        for node in self.zookeepers.values():
            node.stop(10)


def zk_mode(address: str) -> str | None:
    """``leader``/``follower``/``standalone`` while a ZooKeeper server serves; else None."""
    try:
        with socket.create_connection((address, ZK_PORT), timeout=1) as s:
            s.settimeout(1)
            s.sendall(b"srvr")
            out = b""
            while chunk := s.recv(4096):
                out += chunk
    except OSError:
        return None
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None
