"""A cluster of Apache Kafka 4.1.1 nodes in KRaft mode: the reference for cluster tests of
what Kafka 3.9.1 (ZooKeeper mode) does not have, KIP-848 consumer groups first.

Every node is broker and controller at once (process.roles=broker,controller) with a static
quorum of all of them (controller.quorum.voters), each on two loopback ports (PLAINTEXT for
clients and brokers, CONTROLLER for the quorum), formatted with one cluster id. A node has
the handles the tests use on tests/cluster/nodes.py's nodes: its id, bootstrap, process,
alive and kill -9.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bench.systems import KAFKA_JVM_OPTS, KAFKA_VERSION, kafka_lib, kafka_properties

from tests.helpers import free_port, knows_controller


@dataclass
class KraftNode:
    """One Kafka 4.1.1 node (broker and controller) of a KRaft cluster."""

    broker_id: int
    port: int
    controller_port: int
    data: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self, classpath: str) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    "java",
                    *KAFKA_JVM_OPTS,
                    "-Xmx512m",
                    "-Xms256m",
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(self.data / "server.properties"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class KraftCluster:
    nodes: dict[int, KraftNode]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive)

    def outputs(self) -> str:
        return "\n".join(f"--- node {i}:\n{n.tail()}" for i, n in self.nodes.items())


def require_kafka4() -> Path:
    """Kafka 4.1.1's jar folder, or skip the test."""
    lib = kafka_lib(KAFKA_VERSION)
    if shutil.which("java") is None or not any(lib.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
        pytest.skip(f"needs java and Kafka {KAFKA_VERSION} (bash bench/kafka/fetch.sh)")
    return lib


@contextmanager
def kraft_cluster(
    root: Path, settings: Mapping[str, str] | None = None, size: int = 3
) -> Iterator[KraftCluster]:
    """``size`` Kafka 4.1.1 KRaft nodes (ids 1..size) with ``settings``, started and each
    naming a controller; every process is killed on exit."""
    lib = require_kafka4()
    classpath = f"{lib}/*"
    nodes = {
        i: KraftNode(i, free_port(), free_port(), root / f"kraft-{i}") for i in range(1, size + 1)
    }
    voters = ",".join(f"{i}@127.0.0.1:{n.controller_port}" for i, n in nodes.items())
    tool = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath]
    cluster_id = (
        subprocess.run(
            [*tool, "kafka.tools.StorageTool", "random-uuid"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    for i, node in nodes.items():
        node.data.mkdir(parents=True)
        props = kafka_properties(
            node.data, {"PLAINTEXT": node.port}, node.controller_port, dict(settings or {})
        )
        del props["controller.quorum.bootstrap.servers"]
        props.update({"node.id": str(i), "controller.quorum.voters": voters})
        conf = node.data / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        subprocess.run(
            [*tool, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf)],
            check=True,
            capture_output=True,
            timeout=60,
        )
    with ExitStack() as stack:
        for node in nodes.values():
            stack.callback(node.kill)
            node.launch(classpath)
        cluster = KraftCluster(nodes)
        deadline = time.monotonic() + 90
        for node in nodes.values():
            while not knows_controller(node.bootstrap):
                if not node.alive or time.monotonic() > deadline:
                    raise RuntimeError(f"node {node.broker_id} did not start:\n{node.tail()}")
                time.sleep(0.2)
        yield cluster
