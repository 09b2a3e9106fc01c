"""A real Apache Kafka 3.9.1 broker in ZooKeeper mode, on loopback, for cluster tests.

The jars come from bench/kafka/fetch.sh (`bash bench/kafka/fetch.sh 3.9.1`); without
them, or without java, the tests that need one are skipped, and only then. The broker
runs on its own ZooKeeper chroot, logs to a file (log4j), and is killed on exit.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bench.systems import kafka_lib
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from tests.helpers import free_port
from tests.zookeeper import zk_session

KAFKA_ZK_VERSION = "3.9.1"


def require_kafka() -> tuple[str, Path]:
    """(java, the jar folder), or skip the test."""
    java = shutil.which("java")
    lib = kafka_lib(KAFKA_ZK_VERSION)
    if java is None or not any(lib.glob(f"kafka_2.13-{KAFKA_ZK_VERSION}.jar")):
        pytest.skip(f"needs java and Kafka {KAFKA_ZK_VERSION} (bash bench/kafka/fetch.sh 3.9.1)")
    return java, lib


@dataclass
class KafkaZkBroker:
    broker_id: int
    port: int
    chroot: str
    proc: subprocess.Popen[bytes] | None
    log: Path
    zk_connect: str = ""
    cmd: list[str] = field(default_factory=list)
    # Where this run's output starts in the log (a restart appends).
    log_offset: int = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self, tail: int = 60) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-tail:])

    def launch(self) -> None:
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)

    def wait_started(self, timeout: float = 45.0) -> None:
        """Until this run logged its start and registered in ZooKeeper."""
        zk = KazooClient(hosts=self.zk_connect + self.chroot, timeout=10)
        try:
            zk.start(timeout=10)
            deadline = time.monotonic() + timeout
            while True:
                with open(self.log, "rb") as f:
                    f.seek(self.log_offset)
                    started = b"started (kafka.server.KafkaServer)" in f.read()
                if started and zk.exists(f"/brokers/ids/{self.broker_id}"):
                    return
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise RuntimeError(f"Kafka exited with {code}:\n{self.output()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka did not start in {timeout}s:\n{self.output()}")
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def restart(self, timeout: float = 45.0) -> None:
        """Starts the killed broker again on its data and port."""
        self.kill()
        self.launch()
        self.wait_started(timeout)


def prepare_kafka_zk_broker(
    zk_connect: str,
    chroot: str,
    root: Path,
    broker_id: int = 1,
    settings: Mapping[str, str] | None = None,
    port: int | None = None,
    loggers: Mapping[str, str] | None = None,
) -> KafkaZkBroker:
    """A ZooKeeper-mode broker's files and command, not started yet (``launch`` it);
    ``settings`` are added to (or replace) the server.properties below. ``port``: where
    clients connect (one of the ``listeners`` in ``settings``, when they name them).
    ``loggers``: log4j levels of loggers (kafka.request.logger=DEBUG logs each request)."""
    java, lib = require_kafka()
    root.mkdir(parents=True, exist_ok=True)
    port = free_port() if port is None else port
    (root / "log4j.properties").write_text(
        "log4j.rootLogger=INFO, out\n"
        "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        + "".join(f"log4j.logger.{name}={level}\n" for name, level in (loggers or {}).items())
    )
    properties = {
        "broker.id": str(broker_id),
        "zookeeper.connect": f"{zk_connect}{chroot}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(root / "logs"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        **(settings or {}),
    }
    (root / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log = root / "kafka.log"
    cmd = [
        java,
        "-Xmx512m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j.configuration=file:{root / 'log4j.properties'}",
        "-cp",
        f"{lib}/*",
        "kafka.Kafka",
        str(root / "server.properties"),
    ]
    with zk_session(zk_connect) as zk:
        zk.ensure_path(chroot)
        finalize_nothing(zk, chroot)
    return KafkaZkBroker(broker_id, port, chroot, None, log, zk_connect, cmd)


# What Kafka 3.9.1's controller writes to /feature: feature versioning on, nothing finalized
# (a ZooKeeper-mode Kafka 3.9 broker supports no feature).
KAFKA_39_FEATURES = b'{"features":{},"version":2,"status":1}'


def finalize_nothing(zk: KazooClient, chroot: str) -> None:
    """Makes the chroot's /feature what a Kafka 3.9.1 cluster has. A Kafka 3.9.1 broker refuses
    to start while a feature it does not know is finalized, and a cluster whose first controller
    was a kbroker finalizes group.version: this is the operator's `kafka-features downgrade
    --feature group.version=0` before a Kafka 3.9.1 broker joins (kbroker's brokers follow the
    znode), or the znode a Kafka cluster had before kbroker's brokers joined it."""
    path = f"{chroot}/feature"
    if zk.exists(path) is None:
        try:
            zk.create(path, KAFKA_39_FEATURES)
            return
        except NodeExistsError:
            pass  # a controller made it meanwhile
    data, _stat = zk.get(path)
    if b'"features":{}' not in data.replace(b" ", b""):
        zk.set(path, KAFKA_39_FEATURES)


@contextmanager
def kafka_zk_broker(
    zk_connect: str,
    chroot: str,
    root: Path,
    broker_id: int = 1,
    timeout: float = 45.0,
    settings: Mapping[str, str] | None = None,
) -> Iterator[KafkaZkBroker]:
    """Starts one ZooKeeper-mode broker and yields it once it is registered and listening;
    ``settings`` are added to (or replace) its server.properties."""
    broker = prepare_kafka_zk_broker(zk_connect, chroot, root, broker_id, settings)
    broker.launch()
    try:
        broker.wait_started(timeout)
        yield broker
    finally:
        broker.kill()
