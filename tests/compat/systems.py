"""What the compatibility tests run against: a single node of Apache Kafka 3.9.1 (ZooKeeper
mode, broker id 0) or of kbroker (broker id 0, no ZooKeeper), and Kafka's own tools (3.9.1's,
or with `kafka4_lib` 4.1.1's, for what Kafka 4 added)."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from bench.systems import KAFKA_VERSION, kafka_available, kafka_lib

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


def run_kafka_tool(
    main: str, *args: str, stdin: str = "", lib: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Kafka 3.9.1's tool class ``main`` (kafka-topics is org.apache.kafka.tools.TopicCommand,
    ...) run to its end; with ``lib``, the tool of the Kafka whose jars are there (see
    `kafka4_lib`)."""
    java, lib_391 = require_kafka()
    # Kafka 3.9's tools log through log4j 1 (silenced by an empty configuration), Kafka
    # 4's through slf4j-simple (warnings and worse, on stderr).
    logging = "-Dlog4j.configuration=file:/dev/null"
    if lib is not None:
        logging = "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
    return subprocess.run(
        [
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            logging,
            "-cp",
            f"{lib or lib_391}/*",
            main,
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def kafka4_lib() -> Path:
    """Where Apache Kafka 4.1.1's jars are (bench/kafka/fetch.sh): the reference for what
    Kafka 4 added (KIP-848's group configs); skips the test when they are not fetched."""
    if not kafka_available(KAFKA_VERSION):
        pytest.skip(f"Apache Kafka {KAFKA_VERSION}'s jars are not fetched (bench/kafka/fetch.sh)")
    return kafka_lib(KAFKA_VERSION)
