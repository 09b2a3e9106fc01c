"""Versioned features (KIP-584): group.version with Kafka's own tool (FeatureCommand, i.e.
kafka-features.sh, from the Kafka 4.1.1 jars) and a librdkafka consumer using the KIP-848
protocol, each test run against one Apache Kafka 4.1.1 KRaft node and one kbroker node."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.systems import kafka_available, kafka_lib, kafka_node
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.metadata.features import FEATURE_PATH, Features, LocalFeatureStore
from kbroker.metadata.store import LocalMetadataStore
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import UpdateFeaturesRequest
from kbroker.protocol.messages.core import ApiVersionsRequest
from kbroker.tools.client import BrokerClient
from tests.helpers import BrokerProcess

SYSTEMS = ["kbroker", pytest.param("kafka", marks=pytest.mark.kafka)]


@pytest.fixture(scope="module")
def kbroker_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    node = BrokerProcess(tmp_path_factory.mktemp("kbroker") / "data")
    node.start("group.initial.rebalance.delay.ms=0")
    try:
        yield node.bootstrap
    finally:
        node.kill()


@pytest.fixture(scope="module")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not kafka_available():
        pytest.skip("Apache Kafka's jars are not fetched (bench/kafka/fetch.sh) or no java")
    root: Path = tmp_path_factory.mktemp("kafka")
    with kafka_node(root, {"num.partitions": "1"}, None, root / "kafka.log") as node:
        yield node.bootstrap


@pytest.fixture(params=SYSTEMS)
def bootstrap(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_bootstrap")  # type: ignore[no-any-return]


def features_tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """kafka-features.sh ARGS (Kafka 4.1.1's FeatureCommand)."""
    cmd = ["java", "-cp", f"{kafka_lib()}/*", "org.apache.kafka.tools.FeatureCommand"]
    return subprocess.run(
        [*cmd, "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def group_version_line(bootstrap: str) -> str:
    """describe's group.version line, the epoch normalised (it counts every metadata change
    on KRaft, feature changes only on kbroker)."""
    out = features_tool(bootstrap, "describe")
    assert out.returncode == 0, out.stderr[-2000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("Feature: group.version\t")]
    return re.sub(r"Epoch: \d+", "Epoch: N", line)


def api_versions(bootstrap: str) -> tuple[dict[str, int], set[int]]:
    """ApiVersions v4: finalized feature levels, and which of APIs 68/69 are advertised."""
    with BrokerClient(bootstrap) as client:
        r = client.request(
            ApiKey.API_VERSIONS,
            4,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
    assert supported["group.version"] == (0, 1)
    return finalized, {k.api_key for k in r.api_keys if k.api_key in (68, 69)}


def consumer_outcome(bootstrap: str, topic: str) -> str:
    """What a librdkafka consumer with group.protocol=consumer sees within a few seconds:
    "assigned", or the first error it reports."""
    errors: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "group.protocol": "consumer",
            "error_cb": lambda e: errors.append(e.name()),
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                msg = consumer.poll(0.2)
            except KafkaException as exc:
                errors.append(exc.args[0].name())
            else:
                error = None if msg is None else msg.error()
                if error is not None:
                    errors.append(error.name())
            if errors:
                return errors[0]
            if consumer.assignment():
                return "assigned"
        return "nothing"
    finally:
        consumer.close()


def wait_level(bootstrap: str, level: int) -> tuple[dict[str, int], set[int]]:
    """ApiVersions once group.version is finalized at ``level`` (KRaft's broker follows its
    controller a moment later)."""
    deadline = time.monotonic() + 10
    while True:
        finalized, apis = api_versions(bootstrap)
        if finalized.get("group.version", 0) == level:
            return finalized, apis
        assert time.monotonic() < deadline, finalized
        time.sleep(0.1)


def test_describe_group_version(bootstrap: str) -> None:
    """Both describe group.version alike; metadata.version, kraft.version and the rest exist
    only on KRaft (kbroker claims only what it implements), so only this line is compared."""
    line = group_version_line(bootstrap)
    assert line == (
        "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
        "FinalizedVersionLevel: 1\tEpoch: N"
    )


def test_refusals(bootstrap: str) -> None:
    out = features_tool(bootstrap, "upgrade", "--feature", "group.version=2")
    assert out.returncode == 1
    assert "Could not upgrade group.version to 2." in out.stdout
    assert "only supports versions 0-1" in out.stdout
    out = features_tool(bootstrap, "downgrade", "--feature", "group.version=0", "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert "group.version can be downgraded to 0." in out.stdout
    assert wait_level(bootstrap, 1)[0]["group.version"] == 1  # the dry run changed nothing


def test_downgrade_switches_consumer_protocol_off(bootstrap: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    out = features_tool(bootstrap, "downgrade", "--feature", "group.version=0")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert out.stdout.strip() == "group.version was downgraded to 0."
    try:
        _finalized, apis = wait_level(bootstrap, 0)
        # Kafka 4.1.1 keeps advertising them, and refuses them (UNSUPPORTED_VERSION).
        assert apis == {68, 69}
        # librdkafka gives up with a fatal error ("API version not supported:
        # ConsumerGroupHeartbeat").
        assert consumer_outcome(bootstrap, topic) in ("_FATAL", "UNSUPPORTED_VERSION")
    finally:
        out = features_tool(bootstrap, "upgrade", "--feature", "group.version=1")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert out.stdout.strip() == "group.version was upgraded to 1."
    _finalized, apis = wait_level(bootstrap, 1)
    assert apis == {68, 69}
    assert consumer_outcome(bootstrap, topic) == "assigned"


def test_upgrade_to_a_lower_level_and_unsafe_downgrade(bootstrap: str) -> None:
    # The tool itself refuses this one; the request straight on the wire reaches the broker.
    out = features_tool(bootstrap, "upgrade", "--feature", "group.version=0")
    assert out.returncode == 1
    assert "should be set to SAFE_DOWNGRADE or UNSAFE_DOWNGRADE" in out.stderr
    update = UpdateFeaturesRequest.FeatureUpdate(
        feature="group.version", max_version_level=0, upgrade_type=1
    )
    with BrokerClient(bootstrap) as client:
        r = client.request(
            ApiKey.UPDATE_FEATURES,
            1,
            UpdateFeaturesRequest(timeout_ms=10000, feature_updates=[update], validate_only=True),
        )
    assert (r.error_code, r.error_message, r.results) == (
        ErrorCode.INVALID_UPDATE_VERSION,
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 0 for feature group.version. Can't downgrade the version of "
        "this feature without setting the upgrade type to either safe or unsafe downgrade.",
        [],
    )
    out = features_tool(bootstrap, "downgrade", "--feature", "group.version=0", "--unsafe")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    try:
        wait_level(bootstrap, 0)
    finally:
        out = features_tool(bootstrap, "upgrade", "--feature", "group.version=1")
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    wait_level(bootstrap, 1)


def test_a_single_node_keeps_its_finalized_level(tmp_path: Path) -> None:
    """kbroker alone: the level and epoch survive a restart (Kafka keeps them in its metadata
    log; a kbroker node in its metadata store)."""
    node = BrokerProcess(tmp_path / "data")
    node.start()
    try:
        out = features_tool(node.bootstrap, "downgrade", "--feature", "group.version=0")
        assert out.returncode == 0, out.stdout + out.stderr[-2000:]
        node.stop()
        node.start()
        finalized, _apis = api_versions(node.bootstrap)
        assert finalized == {}
        with BrokerClient(node.bootstrap) as client:
            r = client.request(
                ApiKey.API_VERSIONS,
                3,
                ApiVersionsRequest(client_software_name="t", client_software_version="1"),
            )
        assert r.finalized_features_epoch == 1
    finally:
        node.kill()


def test_feature_entry_is_kafkas_feature_znode(tmp_path: Path) -> None:
    """A single node's /feature entry is the JSON Kafka's controller writes to its /feature
    znode (ZkData.scala FeatureZNode, version 2), a feature at level 0 left out, and reloads."""
    store = LocalMetadataStore(tmp_path, 0)
    store.load()
    features = Features()
    LocalFeatureStore(store, features).load()
    assert store.entry(FEATURE_PATH) == {
        "features": {"group.version": {"max_version_level": 1}},
        "version": 2,
        "status": 1,
    }
    LocalFeatureStore(store, features).write({"group.version": 0})
    assert store.entry(FEATURE_PATH) == {"features": {}, "version": 2, "status": 1}
    assert (features.levels, features.epoch) == ({}, 1)
    asyncio.run(store.durable())
    store.close()
    again = LocalMetadataStore(tmp_path, 0)
    again.load()
    reloaded = Features()
    LocalFeatureStore(again, reloaded).load()
    assert (reloaded.level("group.version"), reloaded.epoch) == (0, 1)
    again.close()
