"""What the compatibility tests run against: a single node of Apache Kafka 3.9.1 (ZooKeeper
mode, broker id 0) or of kbroker (broker id 0, no ZooKeeper), and Kafka's own tools."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess
from tests.zookeeper import ZooKeeperServer

SYSTEMS = ["kafka", "kbroker"]
BROKER_ID = 0


@contextlib.contextmanager
def single_node(
    system: str,
    zookeeper: ZooKeeperServer,
    root: Path,
    settings: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """A fresh single node of ``system`` ("kafka" or "kbroker") with ``settings``: its
    bootstrap address."""
    settings = dict(settings or {})
    if system == "kafka":
        chroot = f"/compat-{uuid.uuid4().hex[:8]}"
        with kafka_zk_broker(
            zookeeper.connect, chroot, root, broker_id=BROKER_ID, settings=settings
        ) as kafka:
            yield kafka.bootstrap
        return
    broker = BrokerProcess(root / "data", extra=[f"{k}={v}" for k, v in settings.items()])
    broker.start()
    try:
        yield broker.bootstrap
        assert "Traceback" not in broker.output()
    finally:
        broker.kill()


def run_kafka_tool(main: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Kafka 3.9.1's tool class ``main`` (kafka-topics is org.apache.kafka.tools.TopicCommand,
    ...) run to its end."""
    java, lib = require_kafka()
    return subprocess.run(
        [
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Dlog4j.configuration=file:/dev/null",
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
