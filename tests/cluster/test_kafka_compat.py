"""The codecs against Apache Kafka 3.9.1 in ZooKeeper mode, both ways.

One real Kafka broker runs on its own chroot of the session's ZooKeeper:

- Kafka writes, we read: after a topic is created through the admin API,
  configs altered and an idempotent producer has run, every znode in the
  chroot that carries data decodes with our decoders, and what they say
  agrees with what Kafka answers clients.
- We write, Kafka reads: a topic assignment, a topic config with its change
  notification and a broker registration, all from our encoders, are taken
  up by Kafka's controller and config manager (a client sees the topic with
  a leader, the config, the extra broker).

Skipped only when java or Kafka 3.9.1's jars (bench/kafka/fetch.sh 3.9.1)
are missing. Select with ``-m kafka``.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kbroker.cluster import zk_data as d
from kbroker.cluster.zk import CreateOp, ZkClient, ZkSettings
from tests.cluster.conftest import run
from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import free_port, knows_controller, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

BROKER_ID = 7


@dataclass
class KafkaBroker:
    port: int
    chroot: str
    zk_connect: str
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def settings(self) -> ZkSettings:
        return ZkSettings.parse(self.zk_connect + self.chroot, session_timeout_ms=4000)


@pytest.fixture(scope="module")
def kafka39(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    chroot = f"/kafka-{uuid.uuid4().hex[:8]}"
    with kafka_zk_broker(
        zookeeper.connect,
        chroot,
        tmp_path_factory.mktemp("kafka39"),
        broker_id=BROKER_ID,
        settings={"zookeeper.session.timeout.ms": "10000"},
    ) as kafka:
        wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
        yield KafkaBroker(kafka.port, chroot, zookeeper.connect, kafka.log)


def _uuid(kafka_uuid: Any) -> uuid.UUID:
    """A confluent-kafka Uuid as a UUID (its str() is standard base64, not Kafka's URL-safe)."""
    high = kafka_uuid.get_most_significant_bits() & (2**64 - 1)
    low = kafka_uuid.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(high << 64) | low)


def _read_tree(settings: ZkSettings) -> dict[str, tuple[bytes, int]]:
    """Every znode under the chroot: path -> (data, version)."""

    async def walk() -> dict[str, tuple[bytes, int]]:
        tree: dict[str, tuple[bytes, int]] = {}
        async with ZkClient(settings) as zk:
            pending = ["/"]
            while pending and len(tree) < 10_000:
                path = pending.pop()
                data, stat = await zk.get(path)
                tree[path] = (data, stat.version)
                pending += [f"{path.rstrip('/')}/{c}" for c in await zk.get_children(path)]
        return tree

    return run(walk())


def _decode_any(path: str, data: bytes, version: int) -> object:
    """Our decoder for the znode at `path`; AssertionError for a znode we cannot read."""
    broker = re.fullmatch(r"/brokers/ids/(\d+)", path)
    if broker:
        return d.decode_broker_registration(int(broker[1]), data)
    if re.fullmatch(r"/brokers/topics/[^/]+/partitions/\d+/state", path):
        return d.decode_partition_state(data, version)
    patterns: list[tuple[str, Callable[[bytes], object]]] = [
        (r"/cluster/id", d.decode_cluster_id),
        (r"/brokers/topics/[^/]+", d.decode_topic_assignment),
        (r"/controller", d.decode_controller),
        (r"/controller_epoch", d.decode_controller_epoch),
        (r"/config/(topics|brokers|clients|users|ips)/[^/]+", d.decode_entity_config),
        (r"/config/changes/config_change_\d{10}", d.decode_config_change),
        (r"/isr_change_notification/isr_change_\d{10}", d.decode_isr_change),
        (r"/log_dir_event_notification/log_dir_event_\d{10}", d.decode_log_dir_event),
        (r"/latest_producer_id_block", d.decode_producer_id_block),
        (r"/feature", d.decode_features),
        (r"/admin/reassign_partitions", d.decode_partition_reassignment),
        (r"/admin/preferred_replica_election", d.decode_preferred_replica_election),
    ]
    for pattern, decode in patterns:
        if re.fullmatch(pattern, path):
            return decode(data)
    raise AssertionError(f"no decoder for {path} holding {data!r}")


def test_every_znode_kafka_writes_decodes(kafka39: KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kafka39.bootstrap})
    topic = "compat-from-kafka"
    admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "12345"})])[topic].result(30)
    alter = ConfigResource(
        ResourceType.BROKER,
        str(BROKER_ID),
        incremental_configs=[
            ConfigEntry("log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([alter])[alter].result(30)
    # The cluster-wide default (/config/brokers/<default>): no Python client can name it.
    subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{require_kafka()[1]}/*",
         "kafka.admin.ConfigCommand", "--bootstrap-server", kafka39.bootstrap,
         "--entity-type", "brokers", "--entity-default",
         "--alter", "--add-config", "log.cleaner.threads=3"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka39.bootstrap, "enable.idempotence": True})
    producer.produce(topic, b"v")
    assert producer.flush(30) == 0
    description = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    cluster_id = admin.list_topics(timeout=10).cluster_id

    tree = _read_tree(kafka39.settings)
    decoded = {
        path: _decode_any(path, data, version) for path, (data, version) in tree.items() if data
    }

    for path in d.PERSISTENT_PATHS:
        assert path in tree, path
    assert decoded["/cluster/id"] == cluster_id
    registration = decoded[f"/brokers/ids/{BROKER_ID}"]
    assert isinstance(registration, d.BrokerRegistration)
    assert registration.endpoints == (
        d.EndPoint("PLAINTEXT", "127.0.0.1", kafka39.port, "PLAINTEXT"),
    )
    assignment = decoded[f"/brokers/topics/{topic}"]
    assert isinstance(assignment, d.TopicAssignment)
    assert assignment.replicas() == {0: [BROKER_ID], 1: [BROKER_ID], 2: [BROKER_ID]}
    assert assignment.topic_id is not None
    assert assignment.topic_id == _uuid(description.topic_id)
    controller_epoch = decoded["/controller_epoch"]
    controller = decoded["/controller"]
    assert isinstance(controller, d.ControllerRegistration)
    assert (controller.broker_id, controller.kraft_controller_epoch) == (BROKER_ID, -1)
    for p in range(3):
        state = decoded[d.partition_state_path(topic, p)]
        assert isinstance(state, d.LeaderAndIsr)
        assert (state.leader, state.isr, state.controller_epoch) == (
            BROKER_ID,
            (BROKER_ID,),
            controller_epoch,
        )
    assert decoded[d.topic_config_path(topic)] == d.EntityConfig.of({"retention.ms": "12345"})
    assert decoded[d.broker_config_path(BROKER_ID)] == d.EntityConfig.of(
        {"log.cleaner.threads": "2"}
    )
    assert decoded[d.broker_config_path(None)] == d.EntityConfig.of({"log.cleaner.threads": "3"})
    changes = {c.entity_path for c in decoded.values() if isinstance(c, d.ConfigChange)}
    assert {f"brokers/{BROKER_ID}", "brokers/<default>"} <= changes
    assert decoded["/latest_producer_id_block"] == d.ProducerIdBlock(BROKER_ID, 0, 999)
    assert isinstance(decoded["/feature"], d.FinalizedFeatures)


def test_kafka_takes_up_what_we_write(kafka39: KafkaBroker) -> None:
    topic = "compat-from-kbroker"
    topic_id = uuid.uuid4()
    fake_broker = d.BrokerRegistration(
        8, (d.EndPoint("PLAINTEXT", "127.0.0.1", free_port(), "PLAINTEXT"),), rack="r8"
    )

    async def write() -> None:
        async with ZkClient(kafka39.settings) as zk:
            # A topic config first, so the topic is created with it.
            await zk.create(
                d.topic_config_path(topic),
                d.encode_entity_config(d.EntityConfig.of({"retention.ms": "54321"})),
            )
            await zk.create(
                d.topic_path(topic),
                d.encode_topic_assignment(
                    d.TopicAssignment.of({0: [BROKER_ID], 1: [BROKER_ID]}, topic_id)
                ),
            )
            await zk.create(
                d.broker_path(8),
                d.encode_broker_registration(fake_broker, int(time.time() * 1000)),
                ephemeral=True,
            )
            # Then change the config the way kafka-configs does: data, then a notification.
            await zk.set(
                d.topic_config_path(topic),
                d.encode_entity_config(d.EntityConfig.of({"retention.ms": "65432"})),
            )
            await zk.multi(
                [
                    CreateOp(
                        f"{d.CONFIG_CHANGES_PATH}/{d.CONFIG_CHANGE_PREFIX}",
                        d.encode_config_change(d.ConfigChange(f"topics/{topic}")),
                        sequential=True,
                    )
                ]
            )
            admin = AdminClient({"bootstrap.servers": kafka39.bootstrap})

            def topic_led() -> bool:
                metadata = admin.list_topics(timeout=5)
                found = metadata.topics.get(topic)
                return (
                    found is not None
                    and found.error is None
                    and sorted(found.partitions) == [0, 1]
                    and all(p.leader == BROKER_ID for p in found.partitions.values())
                    and 8 in metadata.brokers
                )

            wait_for(topic_led, "Kafka to create our topic and see broker 8", timeout=30)
            metadata = admin.list_topics(timeout=5)
            assert (metadata.brokers[8].host, metadata.brokers[8].port) == (
                "127.0.0.1",
                fake_broker.endpoints[0].port,
            )
            description = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
            assert _uuid(description.topic_id) == topic_id

            def retention() -> str | None:
                resource = ConfigResource(ResourceType.TOPIC, topic)
                configs = admin.describe_configs([resource])[resource].result(10)
                value = configs["retention.ms"].value
                return value if value == "65432" else None

            wait_for(retention, "Kafka to apply our config change", timeout=30)
            # Kafka's controller wrote the partition states; they decode.
            for p in (0, 1):
                data, stat = await zk.get(d.partition_state_path(topic, p))
                state = d.decode_partition_state(data, stat.version)
                assert (state.leader, state.isr) == (BROKER_ID, (BROKER_ID,))

    run(write(), timeout=90)
