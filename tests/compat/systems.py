"""What the compatibility tests run against: a single node of Apache Kafka 3.9.1 (ZooKeeper
mode, broker id 0), of Apache Kafka 4.1.1 (KRaft, the reference for KIP-848 consumer groups)
or of kbroker (broker id 0, no ZooKeeper), and Kafka's own tools of either version."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from bench.systems import KAFKA_VERSION, kafka_lib, kafka_node

from tests.cluster.kafka_kraft import require_kafka4
from tests.cluster.kafka_zk import KAFKA_ZK_VERSION, kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess
from tests.zookeeper import ZooKeeperServer

SYSTEMS = ["kafka", "kbroker"]
# KIP-848 (the consumer group protocol) has no Kafka 3.9.1 reference: Kafka 4.1.1 is it.
KAFKA4_VERSION = KAFKA_VERSION
KAFKA4_SYSTEMS = ["kafka4", "kbroker"]
BROKER_ID = 0


@contextlib.contextmanager
def single_node(
    system: str,
    zookeeper: ZooKeeperServer | None,
    root: Path,
    settings: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """A fresh single node of ``system`` ("kafka", "kafka4" or "kbroker") with ``settings``:
    its bootstrap address. Only "kafka" (ZooKeeper mode) needs ``zookeeper``."""
    settings = dict(settings or {})
    if system == "kafka4":
        require_kafka4()
        kraft = {"group.initial.rebalance.delay.ms": "0", **settings}
        with kafka_node(root, kraft, None, log_path=root / "kafka4.log") as node:
            yield node.bootstrap
        return
    if system == "kafka":
        if zookeeper is None:
            raise ValueError("Kafka 3.9.1 runs in ZooKeeper mode: it needs a ZooKeeper")
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
    main: str, *args: str, stdin: str = "", version: str = KAFKA_ZK_VERSION
) -> subprocess.CompletedProcess[str]:
    """Kafka's tool class ``main`` (kafka-topics is org.apache.kafka.tools.TopicCommand, ...)
    from the jars of ``version`` (3.9.1 unless told), run to its end."""
    # Kafka 3.9's tools log through log4j 1 (silenced by an empty configuration), Kafka
    # 4's through slf4j-simple (warnings and worse, on stderr).
    logging = "-Dlog4j.configuration=file:/dev/null"
    if version == KAFKA_ZK_VERSION:
        java, lib = require_kafka()
    else:
        lib = require_kafka4() if version == KAFKA4_VERSION else kafka_lib(version)
        java = shutil.which("java") or "java"
        logging = "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
    return subprocess.run(
        [
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            logging,
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
