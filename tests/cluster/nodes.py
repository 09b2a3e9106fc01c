"""A cluster of real broker processes on one ZooKeeper chroot: kbroker's or Apache Kafka's.

Cluster tests run one scenario against both systems: ``kafka`` (Kafka 3.9.1 in
ZooKeeper mode, proving the test itself) and ``kbroker`` (``kbroker serve
--zookeeper``). A `Node` is one broker process of either, with the same
handles: kill -9, SIGTERM, SIGSTOP/SIGCONT, restart on its data and port.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from tests.cluster.kafka_zk import KafkaZkBroker, prepare_kafka_zk_broker
from tests.helpers import BrokerProcess, free_port, knows_controller

SYSTEMS = ("kafka", "kbroker")
# Short enough for failover tests, within ZooKeeper's bounds (tests/zookeeper.py's
# tickTime 500 allows 1-10 s).
SESSION_TIMEOUT_MS = 6000


class Node:
    """One broker process of a cluster."""

    def __init__(self, broker_id: int, zk_connect: str) -> None:
        self.broker_id = broker_id
        self.zk_connect = zk_connect  # with the chroot

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        raise NotImplementedError

    def launch(self) -> None:
        raise NotImplementedError

    def output(self) -> str:
        raise NotImplementedError

    @property
    def data_dir(self) -> Path:
        """Where the broker keeps its partition logs: a ``<topic>-<partition>`` folder each,
        holding segment files named by their 20-digit base offset."""
        raise NotImplementedError

    def wait_started(self, timeout: float = 45.0) -> None:
        """Until the process registered in ZooKeeper (and, for Kafka, logged its start)."""
        zk = KazooClient(hosts=self.zk_connect, timeout=10)
        try:
            zk.start(timeout=10)
            deadline = time.monotonic() + timeout
            while not (self._started() and zk.exists(f"/brokers/ids/{self.broker_id}")):
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise RuntimeError(
                        f"broker {self.broker_id} exited with {code}:\n{self.tail()}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"broker {self.broker_id} did not start in {timeout}s:\n{self.tail()}"
                    )
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()

    def _started(self) -> bool:
        return True

    def wait_knows_controller(self, timeout: float = 30.0) -> None:
        """Until the broker's Metadata names a controller (see ``knows_controller``)."""
        deadline = time.monotonic() + timeout
        while not knows_controller(self.bootstrap):
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {self.broker_id} names no controller:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused process dies too
            proc.kill()
            proc.wait(30)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (a controlled shutdown), and the exit code."""
        proc = self.proc
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        finally:
            self.kill()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 45.0) -> None:
        self.kill()
        self.launch()
        self.wait_started(timeout)


class KafkaNode(Node):
    def __init__(self, broker: KafkaZkBroker) -> None:
        super().__init__(broker.broker_id, broker.zk_connect + broker.chroot)
        self.broker = broker

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.broker.proc

    def launch(self) -> None:
        self.broker.launch()

    @property
    def data_dir(self) -> Path:
        # The first of log.dirs in the server.properties the command starts with.
        properties = Path(self.broker.cmd[-1]).read_text().splitlines()
        dirs = next(line for line in properties if line.startswith("log.dirs="))
        return Path(dirs.partition("=")[2].split(",")[0])

    def _started(self) -> bool:
        with open(self.broker.log, "rb") as f:
            f.seek(self.broker.log_offset)
            return b"started (kafka.server.KafkaServer)" in f.read()

    def output(self) -> str:
        return self.broker.log.read_text(errors="replace")


class KbrokerNode(Node):
    def __init__(self, broker_id: int, zk_connect: str, root: Path, settings: list[str]) -> None:
        super().__init__(broker_id, zk_connect)
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.broker = BrokerProcess(
            root / "data",
            extra=settings,
            args=["--broker-id", str(broker_id), "--zookeeper", zk_connect],
        )

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.broker.proc

    def launch(self) -> None:
        self.broker.start()

    @property
    def data_dir(self) -> Path:
        return self.broker.data_dir

    def output(self) -> str:
        return self.broker.output()


@dataclass
class Cluster:
    system: str
    zk_connect: str  # with the chroot
    nodes: dict[int, Node]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive)

    def zk(self) -> KazooClient:
        """A started client on the cluster's chroot (the caller stops it)."""
        zk = KazooClient(hosts=self.zk_connect, timeout=10)
        zk.start(timeout=10)
        return zk

    def controller_id(self) -> int | None:
        zk = self.zk()
        try:
            data, _ = zk.get("/controller")
            return int(json.loads(data)["brokerid"])
        except Exception:
            return None
        finally:
            zk.stop()
            zk.close()

    def outputs(self) -> str:
        return "\n".join(f"--- broker {i}:\n{n.tail(40)}" for i, n in self.nodes.items())


def kbroker_nodes_with_metrics(
    connect: str, root: Path, extra: list[str] | None = None, size: int = 3
) -> tuple[dict[int, KbrokerNode], dict[int, int]]:
    """``size`` kbroker nodes (ids 1..size, not launched) on ``connect`` (with its chroot),
    each serving Prometheus metrics on a free loopback port: (nodes, metrics ports)."""
    ports = {i: free_port() for i in range(1, size + 1)}
    nodes = {
        i: KbrokerNode(
            i,
            connect,
            root / f"b{i}",
            [
                f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
                "offsets.topic.replication.factor=1",
                f"metrics.listeners=127.0.0.1:{ports[i]}",
                *(extra or []),
            ],
        )
        for i in ports
    }
    return nodes, ports


def _kbroker_settings(extra: list[str] | None) -> list[str]:
    """The cluster's defaults for a kbroker node, less those ``extra`` sets again, then
    ``extra``."""
    defaults = [
        f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "offsets.topic.replication.factor=1",
        "group.initial.rebalance.delay.ms=0",
    ]
    named = {s.partition("=")[0].strip() for s in extra or []}
    return [s for s in defaults if s.partition("=")[0] not in named] + list(extra or [])


@contextmanager
def cluster(
    system: str,
    zk_connect: str,
    chroot: str,
    root: Path,
    size: int = 3,
    kafka_settings: dict[str, str] | None = None,
    kbroker_settings: list[str] | None = None,
) -> Iterator[Cluster]:
    """``size`` brokers (ids 1..size) of ``system`` on ``zk_connect`` + ``chroot``, started
    together; every process is killed on exit."""
    nodes: dict[int, Node] = {}
    with ExitStack() as stack:
        for i in range(1, size + 1):
            node: Node
            if system == "kafka":
                settings = {
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "num.partitions": "1",
                    **(kafka_settings or {}),
                }
                node = KafkaNode(
                    prepare_kafka_zk_broker(zk_connect, chroot, root / f"b{i}", i, settings)
                )
            else:
                node = KbrokerNode(
                    i, zk_connect + chroot, root / f"b{i}", _kbroker_settings(kbroker_settings)
                )
            nodes[i] = node
            stack.callback(node.kill)
        for node in nodes.values():
            node.launch()
        for node in nodes.values():
            node.wait_started()
        for node in nodes.values():
            node.wait_knows_controller()
        yield Cluster(system, zk_connect + chroot, nodes)


@contextmanager
def fresh_cluster(
    system: str, zk_connect: str, name: str, root: Path, settings: dict[str, str]
) -> Iterator[Cluster]:
    """``cluster`` on a new chroot named after ``name``, with the same ``settings`` for
    Kafka's brokers and kbroker's."""
    with cluster(
        system,
        zk_connect,
        f"/{name}-{uuid.uuid4().hex[:8]}",
        root,
        kafka_settings=settings,
        kbroker_settings=[f"{k}={v}" for k, v in settings.items()],
    ) as c:
        yield c
