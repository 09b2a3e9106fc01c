"""DescribeConfigs of a default broker and topic, against Kafka 3.9.1's catalogue.

python/kbroker/kafka_settings.py holds what a default Apache Kafka 3.9.1 broker reports
for every broker and topic setting (generated from one by
bench/kafka/config_catalogue.py). Each system (the ``single`` fixture: Kafka 3.9.1 in
ZooKeeper mode, then a kbroker single node, both with the same few settings) is described
through confluent-kafka's AdminClient and compared with it name for name: value, source,
read-only, sensitive and synonyms of every setting left at its default. The Kafka run
(``--kafka-reference``) proves the catalogue and the comparison; the kbroker run holds
kbroker to it, except the differences listed in KBROKER_DIFFERENCES with their reason.
Kafka's own ``kafka-configs.sh --describe --all`` (kafka.admin.ConfigCommand) must list
the same names on both.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kbroker import kafka_settings
from kbroker.config import BROKER as KBROKER_SETTINGS
from kbroker.config import KAFKA_ONLY_SETTINGS
from kbroker.config import TOPIC as KBROKER_TOPIC_SETTINGS
from tests.cluster.kafka_zk import prepare_kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(180)

WAIT = 30.0
DEFAULT_CONFIG = 5
TOPIC = "catalogue"
# Given to both systems (Kafka's fixture also sets its own listeners, log.dirs and
# zookeeper.connect; kbroker's, --listen and --data-dir).
SETTINGS = {
    "broker.id": "0",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
}

# kbroker's own settings, which Kafka does not have.
KBROKER_ONLY = {
    "allow.everyone.if.no.acl.found",
    "cluster.id",
    "group.consumer.migration.policy",  # Kafka 4's; Kafka 3.9.1 does not describe it
    "group.member.metadata.max.bytes",
    "log.max.open.files",
    "max.broker.partitions",
    "metrics.listeners",
    "metrics.partition.level.enable",
    "producer.id.expiration.check.interval.ms",
    "super.users",
}

# Where a default kbroker deliberately answers otherwise than Kafka, and why.
KBROKER_DIFFERENCES: dict[str, str] = {
    "queued.max.request.bytes": "kbroker bounds request memory by default (256 MiB; see its doc)",
    "group.coordinator.rebalance.protocols": "kbroker serves the consumer group protocol "
    "(KIP-848) by default, as Kafka 4.0 does",
}
# Settings kbroker implements but reads only at start, which Kafka can change per broker
# while it runs (new listeners, TLS and SASL settings): reported read-only, and
# AlterConfigs refuses them with INVALID_CONFIG (a restart applies them).
KBROKER_READ_ONLY = {
    "advertised.listeners",
    "listeners",
    "listener.security.protocol.map",
    "num.replica.fetchers",
    "principal.builder.class",
    "sasl.enabled.mechanisms",
    "sasl.mechanism.inter.broker.protocol",
    "ssl.cipher.suites",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm",
    "ssl.protocol",
    "ssl.truststore.certificates",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
}
# Settings kbroker reads where it uses them, so it applies a change while it runs, which
# Kafka reads only at start: reported changeable (read_only false), as AlterConfigs takes
# them.
KBROKER_DYNAMIC = {
    "default.replication.factor",
    "group.max.session.timeout.ms",
    "group.max.size",
    "group.min.session.timeout.ms",
    "log.cleaner.enable",
    "log.flush.scheduler.interval.ms",
    "log.retention.check.interval.ms",
    "log.retention.hours",
    "log.retention.minutes",
    "log.roll.hours",
    "num.partitions",
    "offset.metadata.max.bytes",
    "offsets.commit.timeout.ms",
    "offsets.load.buffer.size",
    "offsets.retention.check.interval.ms",
    "offsets.retention.minutes",
}


@dataclass
class Single:
    system: str
    bootstrap: str

    def describe(self, rtype: ResourceType, name: str) -> dict[str, Any]:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        resource = ConfigResource(rtype, name)
        return dict(admin.describe_configs([resource])[resource].result(WAIT))


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def single(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Single]:
    system = str(request.param)
    root = tmp_path_factory.mktemp(f"catalogue-{system}")
    if system == "kafka":
        require_kafka()
        zookeeper = request.getfixturevalue("zookeeper")
        kafka = prepare_kafka_zk_broker(
            zookeeper.connect,
            f"/catalogue-{uuid.uuid4().hex[:8]}",
            root,
            broker_id=0,
            settings=SETTINGS,
        )
        kafka.launch()
        try:
            kafka.wait_started()
            yield _with_topic(Single(system, kafka.bootstrap))
        finally:
            kafka.kill()
    else:
        broker = BrokerProcess(root / "data", port=free_port())
        broker.start(*(f"{k}={v}" for k, v in SETTINGS.items()))
        try:
            yield _with_topic(Single(system, broker.bootstrap))
        finally:
            broker.kill()


def _with_topic(single: Single) -> Single:
    admin = AdminClient({"bootstrap.servers": single.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(WAIT)
    return single


_BROKER_DEFAULTS = {row[0]: row[2] for row in kafka_settings.BROKER}
_KAFKA_ONLY = {s.name for s in KAFKA_ONLY_SETTINGS}


def _expected(row: kafka_settings.Row, system: str, topic: bool) -> tuple[Any, ...]:
    name, _type, default, sensitive, read_only, synonyms = row
    defaults = _BROKER_DEFAULTS if not topic else {**_BROKER_DEFAULTS, name: default}
    if system == "kbroker" and not topic:
        # Kafka's settings kbroker does not implement mean nothing while it runs.
        read_only = (
            read_only or name in _KAFKA_ONLY or name in KBROKER_READ_ONLY
        ) and name not in KBROKER_DYNAMIC
    return (
        default,
        DEFAULT_CONFIG,
        read_only,
        sensitive,
        [(s, defaults[s], DEFAULT_CONFIG) for s in synonyms],
    )


def _described(entry: Any) -> tuple[Any, ...]:
    return (
        entry.value,
        entry.source,
        entry.is_read_only,
        entry.is_sensitive,
        [(s.name, s.value, s.source) for s in entry.synonyms.values()],
    )


def _compare(single: Single, rtype: ResourceType, name: str) -> None:
    topic = rtype == ResourceType.TOPIC
    rows = kafka_settings.TOPIC if topic else kafka_settings.BROKER
    described = single.describe(rtype, name)
    extra = set() if topic or single.system == "kafka" else KBROKER_ONLY
    assert set(described) == {row[0] for row in rows} | extra
    mismatches = {}
    for row in rows:
        entry = described[row[0]]
        if entry.source != DEFAULT_CONFIG:
            continue  # set by the fixture (listeners, log.dirs, SETTINGS)
        if single.system == "kbroker" and row[0] in KBROKER_DIFFERENCES:
            continue
        got, want = _described(entry), _expected(row, single.system, topic)
        if got != want:
            mismatches[row[0]] = (got, want)
    assert not mismatches, "\n".join(f"{n}: got {g}, Kafka {w}" for n, (g, w) in mismatches.items())


def test_a_default_broker_is_described_as_kafka_describes_it(single: Single) -> None:
    _compare(single, ResourceType.BROKER, "0")


def test_a_default_topic_is_described_as_kafka_describes_it(single: Single) -> None:
    _compare(single, ResourceType.TOPIC, TOPIC)


def _alter_topic(single: Single, topic: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": single.bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(WAIT)


def test_a_topic_value_kbroker_cannot_honour_is_refused(single: Single) -> None:
    """Tiered storage on a broker without it: INVALID_CONFIG with a message, as Kafka."""
    with pytest.raises(KafkaException) as refused:
        _alter_topic(single, TOPIC, "remote.storage.enable", "true")
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "remote" in error.str().lower()
    assert single.describe(ResourceType.TOPIC, TOPIC)["remote.storage.enable"].value == "false"


def test_a_broker_setting_read_at_start_is_refused_while_running(single: Single) -> None:
    """KRaft's process.roles on a running ZooKeeper-mode broker: INVALID_REQUEST with a
    message naming it, as Kafka answers every setting it cannot change dynamically."""
    admin = AdminClient({"bootstrap.servers": single.bootstrap})
    entry = ConfigEntry("process.roles", "broker", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[entry])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([resource])[resource].result(WAIT)
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in error.str()
    assert "process.roles" in error.str()


def test_a_topic_tuning_knob_is_accepted_and_described(single: Single) -> None:
    """kafka-reassign-partitions --throttle sets these; kbroker accepts them (no effect)."""
    admin = AdminClient({"bootstrap.servers": single.bootstrap})
    admin.create_topics([NewTopic("knobs", 1, 1)])["knobs"].result(WAIT)
    _alter_topic(single, "knobs", "leader.replication.throttled.replicas", "0:0")
    entry = single.describe(ResourceType.TOPIC, "knobs")["leader.replication.throttled.replicas"]
    assert (entry.value, entry.source) == ("0:0", 1)


def _config_command(single: Single, *args: str) -> set[str]:
    """The names kafka-configs.sh --describe --all prints."""
    java, lib = require_kafka()
    out = subprocess.run(
        [
            *(java, "-cp", f"{lib}/*", "kafka.admin.ConfigCommand"),
            *("--bootstrap-server", single.bootstrap, "--describe", "--all", *args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return set(re.findall(r"^\s+([a-zA-Z0-9._-]+)=", out, re.MULTILINE))


def test_kafka_configs_describe_all_lists_every_setting(single: Single) -> None:
    broker = _config_command(single, "--entity-type", "brokers", "--entity-name", "0")
    topic = _config_command(single, "--entity-type", "topics", "--entity-name", TOPIC)
    extra = set() if single.system == "kafka" else KBROKER_ONLY
    assert broker == {row[0] for row in kafka_settings.BROKER} | extra
    assert topic == {row[0] for row in kafka_settings.TOPIC}


def test_the_catalogue_covers_every_kafka_setting() -> None:
    """Every name Kafka 3.9.1 reports is a setting kbroker knows, with Kafka's type."""
    missing = [row[0] for row in kafka_settings.BROKER if row[0] not in KBROKER_SETTINGS]
    assert not missing
    assert len(kafka_settings.BROKER) >= 314 and len(kafka_settings.TOPIC) == 36
    assert set(KBROKER_SETTINGS) - {row[0] for row in kafka_settings.BROKER} == KBROKER_ONLY
    assert set(KBROKER_TOPIC_SETTINGS) == {row[0] for row in kafka_settings.TOPIC}
