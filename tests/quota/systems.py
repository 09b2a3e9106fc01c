"""One broker of each system for the users-and-quotas tests: a kbroker single node and an
Apache Kafka 3.9.1 broker in ZooKeeper mode, started with the same quota settings, and
Kafka's own kafka-configs tool (kafka.admin.ConfigCommand) to drive either."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess, knows_controller, wait_for
from tests.zookeeper import ZooKeeperServer

# Short quota windows: a new client may burst (samples - 1) windows' worth, so few samples
# keep that burst, and the warm-up of the throughput tests, short.
QUOTA_SETTINGS = {"quota.window.num": "3", "quota.window.size.seconds": "1"}


@contextmanager
def kbroker_node(root: Path) -> Iterator[str]:
    broker = BrokerProcess(root / "data")
    broker.start(*(f"{k}={v}" for k, v in QUOTA_SETTINGS.items()))
    try:
        yield broker.bootstrap
    finally:
        broker.kill()


@contextmanager
def kafka_node(zookeeper: ZooKeeperServer, root: Path) -> Iterator[str]:
    with kafka_zk_broker(
        zookeeper.connect,
        f"/quotas-{uuid.uuid4().hex[:8]}",
        root,
        settings=QUOTA_SETTINGS,
    ) as kafka:
        wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
        yield kafka.bootstrap


def kafka_configs(bootstrap: str, *args: str, check: bool = True) -> str:
    """Runs Kafka 3.9.1's kafka-configs (ConfigCommand) against ``bootstrap``; its stdout."""
    java, lib = require_kafka()
    proc = subprocess.run(
        [
            java,
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Dlog4j.configuration=file:/dev/null",
            "-cp",
            f"{lib}/*",
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kafka-configs {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout + (proc.stderr if not check else "")


SYSTEMS = [pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"]
