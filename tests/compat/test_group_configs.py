"""Groups' own configs (Kafka 4.x's GROUP config resource, KIP-848) through real clients.

Kafka 4.1.1's kafka-configs tool (kafka.admin.ConfigCommand from its jars), confluent-kafka's
AdminClient (librdkafka 2.16: describe_configs and incremental_alter_configs with
ResourceType.GROUP) and kafka-python's (the older AlterConfigs), against Apache Kafka 4.1.1
(KRaft, one node: the reference) and a kbroker single node, both started with the consumer
group timings moved from their defaults (group.consumer.session.timeout.ms=50000,
group.consumer.max.heartbeat.interval.ms=20000) so that a group's defaults and bounds are
seen to come from the broker's settings. Every answer, values and error messages alike, is
asserted the same on both.

Then kbroker alone, where Kafka 4.1.1 has no counterpart to compare with (Kafka keeps group
configs in KRaft's metadata; kbroker in ZooKeeper, or a single node's metadata store): a
single node keeps a group's configs over a restart, and in a cluster of two brokers a change
made through one is seen by the other, and by a broker that starts after it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages import admin as msgs
from tests.cluster.kafka_kraft import require_kafka4
from tests.cluster.nodes import cluster
from tests.compat.systems import KAFKA4_SYSTEMS, KAFKA4_VERSION, run_kafka_tool, single_node
from tests.helpers import BrokerProcess, Wire
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SETTINGS = {
    "group.consumer.session.timeout.ms": "50000",
    "group.consumer.max.heartbeat.interval.ms": "20000",
}
CONFIGS = "kafka.admin.ConfigCommand"
DEFAULT_CONFIG = 5
DYNAMIC_GROUP_CONFIG = 8

# What a group without overrides has, on a broker with SETTINGS (Kafka 4.1.1's answer).
DEFAULTS = {
    "consumer.heartbeat.interval.ms": "5000",
    "consumer.session.timeout.ms": "50000",
    "share.auto.offset.reset": "latest",
    "share.heartbeat.interval.ms": "5000",
    "share.isolation.level": "read_uncommitted",
    "share.record.lock.duration.ms": "30000",
    "share.session.timeout.ms": "45000",
    "streams.heartbeat.interval.ms": "5000",
    "streams.num.standby.replicas": "0",
    "streams.session.timeout.ms": "45000",
}


@pytest.fixture(scope="module", params=KAFKA4_SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    require_kafka4()  # the tool's jars, and the reference
    root = tmp_path_factory.mktemp(f"group-configs-{request.param}")
    with single_node(request.param, None, root, SETTINGS) as bootstrap:
        yield bootstrap


def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


# -- kafka-configs ---------------------------------------------------------------------


def configs_tool(bootstrap: str, *args: str, ok: bool = True) -> tuple[int, str, str]:
    done = run_kafka_tool(CONFIGS, "--bootstrap-server", bootstrap, *args, version=KAFKA4_VERSION)
    if ok:
        assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.returncode, done.stdout, done.stderr


def described(out: str) -> dict[str, str]:
    """``name=value sensitive=... synonyms={...}`` lines of kafka-configs --describe."""
    lines = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    return dict(line.split(" ", 1)[0].split("=", 1) for line in lines) | {
        f"{line.split('=', 1)[0]}#rest": line.split(" ", 1)[1] for line in lines
    }


def test_kafka_configs_tool(bootstrap: str) -> None:
    group = group_name()
    entity = ("--entity-type", "groups", "--entity-name", group)

    _, out, _ = configs_tool(bootstrap, *entity, "--describe", "--all")
    assert out.splitlines()[0] == f"All configs for group {group} are:"
    shown = described(out)
    assert {k: v for k, v in shown.items() if "#" not in k} == DEFAULTS
    assert shown["consumer.session.timeout.ms#rest"] == (
        "sensitive=false synonyms={DEFAULT_CONFIG:consumer.session.timeout.ms=50000}"
    )
    _, out, _ = configs_tool(bootstrap, *entity, "--describe")
    assert out.strip() == f"The group '{group}' doesn't exist and doesn't have dynamic config."

    _, out, _ = configs_tool(
        bootstrap, *entity, "--alter", "--add-config", "consumer.session.timeout.ms=52000"
    )
    assert out.strip() == f"Completed updating config for group {group}."
    _, out, _ = configs_tool(bootstrap, *entity, "--describe")
    assert out.splitlines() == [
        f"Dynamic configs for group {group} are:",
        "  consumer.session.timeout.ms=52000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=52000}",
    ]

    refused = {
        "consumer.session.timeout.ms=70000": "consumer.session.timeout.ms must be less than "
        "or equal to group.consumer.max.session.timeout.ms",
        "consumer.heartbeat.interval.ms=1000": "consumer.heartbeat.interval.ms must be greater "
        "than or equal to group.consumer.min.heartbeat.interval.ms",
        "foo.bar=1": "Unknown group config name: foo.bar",
    }
    for config, message in refused.items():
        code, _, err = configs_tool(bootstrap, *entity, "--alter", "--add-config", config, ok=False)
        assert code == 1
        assert f"InvalidConfigurationException: {message}" in err, err[-2000:]

    configs_tool(bootstrap, *entity, "--alter", "--delete-config", "consumer.session.timeout.ms")
    _, out, _ = configs_tool(bootstrap, *entity, "--describe")
    assert out.splitlines() == [f"Dynamic configs for group {group} are:"]
    _, out, _ = configs_tool(bootstrap, *entity, "--describe", "--all")
    assert described(out)["consumer.session.timeout.ms"] == "50000"


# -- confluent-kafka's AdminClient -----------------------------------------------------


def describe(admin: AdminClient, group: str) -> dict[str, tuple[str, int, list[Any]]]:
    (future,) = admin.describe_configs(
        [ConfigResource(ResourceType.GROUP, group)], request_timeout=20
    ).values()
    return {
        name: (
            entry.value,
            int(entry.source),
            [(s.name, s.value, int(s.source)) for s in entry.synonyms.values()],
        )
        for name, entry in future.result().items()
    }


def alter(admin: AdminClient, group: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> str:
    """IncrementalAlterConfigs: "" when it succeeded, else the error code's name and message."""
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops],
    )
    (future,) = admin.incremental_alter_configs([resource], request_timeout=20).values()
    try:
        future.result()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return ""


SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def defaults_table() -> dict[str, tuple[str, int, list[Any]]]:
    return {n: (v, DEFAULT_CONFIG, [(n, v, DEFAULT_CONFIG)]) for n, v in DEFAULTS.items()}


def test_admin_client_sets_checks_and_deletes(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = group_name()
    assert describe(admin, group) == defaults_table()

    assert (
        alter(
            admin,
            group,
            ("consumer.heartbeat.interval.ms", "20000", SET),
            ("consumer.session.timeout.ms", " 55000 ", SET),
            ("share.auto.offset.reset", "by_duration:PT1H30M", SET),
        )
        == ""
    )
    overridden = {
        "consumer.heartbeat.interval.ms": "20000",
        "consumer.session.timeout.ms": "55000",
        "share.auto.offset.reset": "by_duration:PT1H30M",
    }
    expected = defaults_table() | {
        n: (v, DYNAMIC_GROUP_CONFIG, [(n, v, DYNAMIC_GROUP_CONFIG)]) for n, v in overridden.items()
    }
    assert describe(admin, group) == expected

    invalid = "INVALID_CONFIG: Invalid value"
    refusals = {
        ("consumer.heartbeat.interval.ms", "25000", SET): "INVALID_CONFIG: "
        "consumer.heartbeat.interval.ms must be less than or equal to "
        "group.consumer.max.heartbeat.interval.ms",
        ("consumer.session.timeout.ms", "40000", SET): "INVALID_CONFIG: "
        "consumer.session.timeout.ms must be greater than or equal to "
        "group.consumer.min.session.timeout.ms",
        ("consumer.session.timeout.ms", "abc", SET): f"{invalid} abc for configuration "
        "consumer.session.timeout.ms: Not a number of type INT",
        ("consumer.session.timeout.ms", "10000000000", SET): f"{invalid} 10000000000 for "
        "configuration consumer.session.timeout.ms: Not a number of type INT",
        ("consumer.session.timeout.ms", "-1", SET): f"{invalid} -1 for configuration "
        "consumer.session.timeout.ms: Value must be at least 1",
        ("share.isolation.level", "READ_COMMITTED", SET): f"{invalid} READ_COMMITTED for "
        "configuration share.isolation.level: String must be one of: read_committed, "
        "read_uncommitted",
        ("share.auto.offset.reset", "bogus", SET): f"{invalid} bogus for configuration "
        "share.auto.offset.reset: Invalid value `bogus` for configuration "
        "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the "
        "format 'by_duration:<PnDTnHnMn.nS>'.",
        ("streams.num.standby.replicas", "3", SET): "INVALID_CONFIG: "
        "streams.num.standby.replicas must be less than or equal to "
        "group.streams.max.standby.replicas",
        ("share.record.lock.duration.ms", "10000", SET): "INVALID_CONFIG: "
        "share.record.lock.duration.ms must be greater than or equal to "
        "group.share.min.record.lock.duration.ms",
        ("retention.ms", "1000", SET): "INVALID_CONFIG: Unknown group config name: retention.ms",
        ("consumer.session.timeout.ms", "50000", APPEND): "INVALID_CONFIG: Can't APPEND to key "
        "consumer.session.timeout.ms because its type is not LIST.",
    }
    for op, message in refusals.items():
        assert alter(admin, group, op) == message, op
    # Nothing refused was applied; deleting a name no group config has is no error.
    assert alter(admin, group, ("no.such.config", None, DELETE)) == ""
    assert describe(admin, group) == expected

    # Deleting brings the broker's defaults back.
    assert alter(admin, group, *((n, None, DELETE) for n in overridden)) == ""
    assert describe(admin, group) == defaults_table()


def test_alter_configs_sets_what_it_names(bootstrap: str) -> None:
    """The older AlterConfigs (kafka-python) sets the group configs it names and, as Kafka
    4.1.1 does, keeps the group's other overrides (unlike a topic's, which it replaces)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = group_name()
    assert alter(admin, group, ("consumer.heartbeat.interval.ms", "6000", SET)) == ""
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        resource = KpConfigResource(
            KpConfigResourceType.GROUP, group, configs={"consumer.session.timeout.ms": "52000"}
        )
        assert kp.alter_configs([resource]) == {"group": {group: "OK"}}
        refused = KpConfigResource(
            KpConfigResourceType.GROUP, group, configs={"consumer.session.timeout.ms": "99000"}
        )
        assert kp.alter_configs([refused]) == {
            "group": {
                group: "[Error 40] InvalidConfigurationError: consumer.session.timeout.ms must "
                "be less than or equal to group.consumer.max.session.timeout.ms"
            }
        }
    finally:
        kp.close()
    values = {n: (v, s) for n, (v, s, _) in describe(admin, group).items()}
    assert values["consumer.session.timeout.ms"] == ("52000", DYNAMIC_GROUP_CONFIG)
    assert values["consumer.heartbeat.interval.ms"] == ("6000", DYNAMIC_GROUP_CONFIG)


# -- kbroker alone: where the configs are kept ------------------------------------------


def describe_through(bootstrap: str, group: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs sent to the one broker at ``bootstrap`` (a client library would
    pick any broker of the cluster): {name: (value, source)} of the group's overrides."""
    R = msgs.DescribeConfigsRequest
    with Wire(bootstrap) as wire:
        (result,) = wire.request(
            ApiKey.DESCRIBE_CONFIGS, 4, R(resources=[R.Resource(32, group, None)])
        ).results
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {
        c.name: (c.value, c.config_source)
        for c in result.configs
        if c.config_source == DYNAMIC_GROUP_CONFIG
    }


def wait_until(check: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_single_node_keeps_group_configs_over_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        group = "a/group with . odd name"
        assert alter(admin, group, ("consumer.session.timeout.ms", "51000", SET)) == ""
        other = group_name()
        assert alter(admin, other, ("consumer.heartbeat.interval.ms", "6000", SET)) == ""
        assert alter(admin, other, ("consumer.heartbeat.interval.ms", None, DELETE)) == ""
        broker.kill()  # no clean shutdown: the answer came once the change was on disk
        broker.start()
        assert describe_through(broker.bootstrap, group) == {
            "consumer.session.timeout.ms": ("51000", DYNAMIC_GROUP_CONFIG)
        }
        assert describe_through(broker.bootstrap, other) == {}
        assert "Traceback" not in broker.output()
    finally:
        broker.kill()


def test_a_cluster_shares_group_configs(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    chroot = f"/group-configs-{uuid.uuid4().hex[:8]}"
    with cluster("kbroker", zookeeper.connect, chroot, tmp_path, size=2) as kb:
        first, second = kb.nodes[1], kb.nodes[2]
        group = group_name()
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        assert alter(admin, group, ("consumer.session.timeout.ms", "53000", SET)) == ""
        expected = {"consumer.session.timeout.ms": ("53000", DYNAMIC_GROUP_CONFIG)}
        for node in (first, second):
            wait_until(
                lambda node=node: describe_through(node.bootstrap, group) == expected,
                f"broker {node.broker_id} to see the group's config",
            )
        # Kept in ZooKeeper as Kafka keeps an entity's configs, and announced.
        zk = kb.zk()
        try:
            data, _ = zk.get(f"/config/groups/{group}")
            assert json.loads(data) == {
                "version": 1,
                "config": {"consumer.session.timeout.ms": "53000"},
            }
            changes = [
                json.loads(zk.get(f"/config/changes/{c}")[0])
                for c in zk.get_children("/config/changes")
            ]
            assert {"version": 2, "entity_path": f"groups/{group}"} in changes
        finally:
            zk.stop()
            zk.close()

        # A broker that starts later reads it; a deletion through it reaches the other.
        assert second.terminate() == 0
        second.launch()
        second.wait_started()
        assert describe_through(second.bootstrap, group) == expected
        admin = AdminClient({"bootstrap.servers": second.bootstrap})
        assert alter(admin, group, ("consumer.session.timeout.ms", None, DELETE)) == ""
        for node in (first, second):
            wait_until(
                lambda node=node: describe_through(node.bootstrap, group) == {},
                f"broker {node.broker_id} to see the deletion",
            )
