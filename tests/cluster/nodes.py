"""A cluster of real broker processes on one ZooKeeper chroot: kbroker's or Apache Kafka's.

Cluster tests run one scenario against both systems: ``kafka`` (Kafka 3.9.1 in
ZooKeeper mode, proving the test itself) and ``kbroker`` (``kbroker serve
--zookeeper``). A `Node` is one broker process of either, with the same
handles: kill -9, SIGTERM, SIGSTOP/SIGCONT, restart on its data and port.

By default each broker has one PLAINTEXT listener; `Listeners` gives a cluster
named listeners with their security protocols and the settings that secure
them (the same names for both systems), and the client settings to reach it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kazoo.client import KazooClient

from tests.cluster.kafka_zk import KafkaZkBroker, prepare_kafka_zk_broker
from tests.helpers import BrokerProcess, free_port, knows_controller

SYSTEMS = ("kafka", "kbroker")
# Short enough for failover tests, within ZooKeeper's bounds (tests/zookeeper.py's
# tickTime 500 allows 1-10 s).
SESSION_TIMEOUT_MS = 6000


@dataclass(frozen=True)
class Listeners:
    """How a cluster's brokers listen: each listener's name and security protocol (every
    one on a loopback port of its own), the listener clients come through, the settings
    that secure them (TLS, SASL, the inter-broker listener: Kafka's names, taken alike by
    both systems), and what a client (librdkafka) needs besides bootstrap.servers."""

    protocols: Mapping[str, str]
    client_listener: str
    settings: Mapping[str, str] = field(default_factory=dict)
    client: Mapping[str, Any] = field(default_factory=dict)

    def free_ports(self) -> dict[str, int]:
        return {name: free_port() for name in self.protocols}

    def broker_settings(self, ports: Mapping[str, int]) -> dict[str, str]:
        """One broker's settings: its listeners on ``ports`` and the security settings."""
        return {
            "listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in self.protocols),
            "listener.security.protocol.map": ",".join(
                f"{n}:{p}" for n, p in self.protocols.items()
            ),
            **self.settings,
        }


class BrokerProc(Protocol):
    """What a node knows of its process, Kafka's (KafkaZkBroker) or kbroker's (BrokerProcess)."""

    @property
    def bootstrap(self) -> str: ...

    proc: subprocess.Popen[bytes] | None


class Node:
    """One broker process of a cluster: Kafka's or kbroker's, used alike by the tests."""

    broker: BrokerProc

    def __init__(
        self, broker_id: int, zk_connect: str, client_conf: Mapping[str, Any] | None = None
    ) -> None:
        self.broker_id = broker_id
        self.zk_connect = zk_connect  # with the chroot
        # What a client needs besides bootstrap.servers to reach `bootstrap` (security).
        self.client_conf = dict(client_conf or {})

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.broker.proc

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
        while not knows_controller(self.bootstrap, self.client_conf):
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
    broker: KafkaZkBroker

    def __init__(self, broker: KafkaZkBroker, client_conf: Mapping[str, Any] | None = None) -> None:
        super().__init__(broker.broker_id, broker.zk_connect + broker.chroot, client_conf)
        self.broker = broker

    @classmethod
    def prepare(
        cls,
        zk_connect: str,
        chroot: str,
        root: Path,
        broker_id: int,
        settings: Mapping[str, str],
        listeners: Listeners | None = None,
    ) -> KafkaNode:
        """A Kafka broker (not launched) with ``settings``, and ``listeners`` when given."""
        if listeners is None:
            return cls(prepare_kafka_zk_broker(zk_connect, chroot, root, broker_id, settings))
        ports = listeners.free_ports()
        broker = prepare_kafka_zk_broker(
            zk_connect,
            chroot,
            root,
            broker_id,
            {**settings, **listeners.broker_settings(ports)},
            port=ports[listeners.client_listener],
        )
        return cls(broker, listeners.client)

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
    broker: BrokerProcess

    def __init__(
        self,
        broker_id: int,
        zk_connect: str,
        root: Path,
        settings: list[str],
        listeners: Listeners | None = None,
    ) -> None:
        """``listeners``: named listeners on ports of their own (default: one PLAINTEXT)."""
        super().__init__(broker_id, zk_connect, None if listeners is None else listeners.client)
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.broker = BrokerProcess(
            root / "data",
            extra=settings,
            args=["--broker-id", str(broker_id), "--zookeeper", zk_connect],
        )
        if listeners is not None:
            ports = listeners.free_ports()
            secured = listeners.broker_settings(ports)
            self.broker.port = ports[listeners.client_listener]
            self.broker.listeners = secured.pop("listeners")
            self.broker.extra = [*settings, *(f"{k}={v}" for k, v in secured.items())]

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
    # What a client needs besides bootstrap.servers (the client listener's security).
    client_conf: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def client(self, bootstrap: str | None = None, **extra: Any) -> dict[str, Any]:
        """librdkafka settings to reach the cluster (through ``bootstrap``: every broker
        unless told), ``extra`` added."""
        return {
            "bootstrap.servers": self.bootstrap if bootstrap is None else bootstrap,
            **self.client_conf,
            **extra,
        }

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


def kbroker_node_settings(extra: list[str] | None) -> list[str]:
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
    listeners: Listeners | None = None,
    advertised_host: str | None = None,
) -> Iterator[Cluster]:
    """``size`` brokers (ids 1..size) of ``system`` on ``zk_connect`` + ``chroot``, started
    together, with ``listeners`` (default: one PLAINTEXT listener each); every process is
    killed on exit. ``advertised_host``: with the default listener, each broker binds
    127.0.0.1 and advertises this host name (advertised.listeners) at the same port."""
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
                if advertised_host is not None and listeners is None:
                    port = free_port()
                    settings["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
                    settings["advertised.listeners"] = f"PLAINTEXT://{advertised_host}:{port}"
                    broker = prepare_kafka_zk_broker(
                        zk_connect, chroot, root / f"b{i}", i, settings, port=port
                    )
                    node = KafkaNode(broker)
                else:
                    node = KafkaNode.prepare(
                        zk_connect, chroot, root / f"b{i}", i, settings, listeners
                    )
            else:
                node = KbrokerNode(
                    i,
                    zk_connect + chroot,
                    root / f"b{i}",
                    kbroker_node_settings(kbroker_settings),
                    listeners,
                )
                if advertised_host is not None and listeners is None:
                    port = node.broker.port
                    node.broker.extra.append(
                        f"advertised.listeners=PLAINTEXT://{advertised_host}:{port}"
                    )
            nodes[i] = node
            stack.callback(node.kill)
        for node in nodes.values():
            node.launch()
        for node in nodes.values():
            node.wait_started()
        for node in nodes.values():
            node.wait_knows_controller()
        yield Cluster(
            system, zk_connect + chroot, nodes, {} if listeners is None else listeners.client
        )


@contextmanager
def fresh_cluster(
    system: str,
    zk_connect: str,
    name: str,
    root: Path,
    settings: dict[str, str],
    listeners: Listeners | None = None,
) -> Iterator[Cluster]:
    """``cluster`` on a new chroot named after ``name``, with the same ``settings`` (and
    ``listeners``) for Kafka's brokers and kbroker's."""
    with cluster(
        system,
        zk_connect,
        f"/{name}-{uuid.uuid4().hex[:8]}",
        root,
        kafka_settings=settings,
        kbroker_settings=[f"{k}={v}" for k, v in settings.items()],
        listeners=listeners,
    ) as c:
        yield c
