"""Topic and config administration, end to end, through real admin clients.

Each test starts a real broker process (auto topic creation off, so nothing
appears that a test did not create) and drives it with confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient or kcat, asserting what a user
of those tools sees. A few checks that no client exposes (topic ids,
documentation, versions' response fields) speak the protocol directly.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages import admin as msgs
from kbroker.tools.client import BrokerClient
from tests.helpers import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT = 15.0  # seconds any single admin result may take
NO_AUTO_CREATE = "auto.create.topics.enable=false"


@pytest.fixture
def kb(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(NO_AUTO_CREATE)


def admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 10000})


def ok(fut: Future[Any]) -> Any:
    return fut.result(timeout=WAIT)


def error_of(fut: Future[Any]) -> KafkaError:
    """The KafkaError a failed admin future carries (fails the test if it succeeded)."""
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=WAIT)
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def create(a: AdminClient, *topics: NewTopic, **kwargs: Any) -> None:
    for fut in a.create_topics(list(topics), request_timeout=WAIT, **kwargs).values():
        ok(fut)


def topic_configs(a: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    (fut,) = a.describe_configs([ConfigResource("topic", topic)], request_timeout=WAIT).values()
    return ok(fut)  # type: ignore[no-any-return]


def broker_configs(a: AdminClient, name: str = "0") -> dict[str, ConfigEntry]:
    (fut,) = a.describe_configs([ConfigResource("broker", name)], request_timeout=WAIT).values()
    return ok(fut)  # type: ignore[no-any-return]


def partition_count(a: AdminClient, topic: str) -> int:
    md = a.list_topics(topic=topic, timeout=WAIT)
    t = md.topics[topic]
    assert t.error is None, t.error
    return len(t.partitions)


def incremental(a: AdminClient, resource: ConfigResource, **kwargs: Any) -> Future[Any]:
    (fut,) = a.incremental_alter_configs([resource], request_timeout=WAIT, **kwargs).values()
    return fut


def set_op(
    name: str, value: str | None, op: AlterConfigOpType = AlterConfigOpType.SET
) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


# -- CreateTopics / Metadata -----------------------------------------------------------


def test_create_topic_with_configs_is_described(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(
        a, NewTopic("orders", 3, 1, config={"retention.ms": "3600000", "cleanup.policy": "compact"})
    )

    assert partition_count(a, "orders") == 3
    md = a.list_topics(topic="orders", timeout=WAIT)
    assert all(p.leader == 0 and p.replicas == [0] for p in md.topics["orders"].partitions.values())

    configs = topic_configs(a, "orders")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    # Settings not overridden show the broker's defaults.
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default
    assert configs["max.message.bytes"].value == "1048588"


def test_create_validate_only_creates_nothing(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("dry", 4, 1, config={"retention.ms": "1000"}), validate_only=True)
    err = error_of(
        a.describe_configs([ConfigResource("topic", "dry")])[ConfigResource("topic", "dry")]
    )
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Validation still catches errors.
    (fut,) = a.create_topics(
        [NewTopic("dry", 1, 1, config={"retention.ms": "soon"})], validate_only=True
    ).values()
    assert error_of(fut).code() == KafkaError.INVALID_CONFIG
    # And the name stays free.
    create(a, NewTopic("dry", 2, 1))
    assert partition_count(a, "dry") == 2


def test_create_errors_are_per_topic(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("exists", 1, 1))
    futs = a.create_topics(
        [
            NewTopic("exists", 1, 1),
            NewTopic("badname", 1, 1, config={"no.such.setting": "1"}),
            NewTopic("badvalue", 1, 1, config={"retention.ms": "forever"}),
            NewTopic("toomany", 1, 3),
            NewTopic("fine", 2, 1),
        ],
        request_timeout=WAIT,
    )
    assert error_of(futs["exists"]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    bad = error_of(futs["badname"])
    assert bad.code() == KafkaError.INVALID_CONFIG
    assert "no.such.setting" in bad.str()
    bad = error_of(futs["badvalue"])
    assert bad.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in bad.str()
    assert error_of(futs["toomany"]).code() == KafkaError.INVALID_REPLICATION_FACTOR
    ok(futs["fine"])
    assert partition_count(a, "fine") == 2
    for name in ("badname", "badvalue", "toomany"):
        md = a.list_topics(topic=name, timeout=WAIT)
        assert md.topics[name].error is not None, f"{name} should not exist"


def test_create_with_manual_replica_assignment(kb: BrokerProcess) -> None:
    # confluent-kafka 2.16 cannot send assignments (its binding passes a partition
    # count along, which librdkafka refuses), so this uses kafka-python.
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic
    from kafka.errors import InvalidReplicationAssignmentError

    kp = KafkaAdminClient(bootstrap_servers=kb.bootstrap, request_timeout_ms=10000)
    try:
        kp.create_topics(
            [KPNewTopic("manual", -1, -1, replica_assignments={0: [0], 1: [0], 2: [0]})]
        )
        with pytest.raises(InvalidReplicationAssignmentError, match="broker 7"):
            kp.create_topics(
                [KPNewTopic("elsewhere", -1, -1, replica_assignments={0: [0], 1: [7]})]
            )
    finally:
        kp.close()
    a = admin(kb)
    assert partition_count(a, "manual") == 3
    assert a.list_topics(topic="elsewhere", timeout=WAIT).topics["elsewhere"].error is not None


def test_list_all_topics(kb: BrokerProcess) -> None:
    """An all-topics Metadata request (librdkafka pads its null topic array, KIP-482
    tolerant brokers ignore the spare bytes) lists every topic."""
    a = admin(kb)
    create(a, NewTopic("one", 1, 1), NewTopic("two", 2, 1))
    md = a.list_topics(timeout=WAIT)
    assert {"one", "two"} <= set(md.topics)
    assert len(md.topics["two"].partitions) == 2


def test_kcat_lists_topics(kb: BrokerProcess) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    create(admin(kb), NewTopic("seen-by-kcat", 3, 1))
    out = subprocess.run(
        ["kcat", "-b", kb.bootstrap, "-L", "-J", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    md = json.loads(out.stdout)
    assert md["brokers"] == [{"id": 0, "name": kb.bootstrap}]
    (topic,) = [t for t in md["topics"] if t["topic"] == "seen-by-kcat"]
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 0 and "error" not in p for p in topic["partitions"])


# -- DeleteTopics ----------------------------------------------------------------------


def test_delete_topics(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("doomed", 2, 1), NewTopic("kept", 1, 1))
    futs = a.delete_topics(["doomed", "never-was"], operation_timeout=WAIT, request_timeout=WAIT)
    ok(futs["doomed"])
    assert error_of(futs["never-was"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert a.list_topics(topic="doomed", timeout=WAIT).topics["doomed"].error is not None
    assert partition_count(a, "kept") == 1
    # The name can be used again, with a fresh, empty topic.
    create(a, NewTopic("doomed", 1, 1))
    assert partition_count(a, "doomed") == 1


# -- CreatePartitions --------------------------------------------------------------------


def test_create_partitions_result_per_topic(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("grow", 2, 1), NewTopic("shrink", 4, 1))
    futs = a.create_partitions(
        [NewPartitions("grow", 5), NewPartitions("shrink", 2), NewPartitions("ghost", 3)],
        request_timeout=WAIT,
    )
    assert set(futs) == {"grow", "shrink", "ghost"}
    ok(futs["grow"])
    assert error_of(futs["shrink"]).code() == KafkaError.INVALID_PARTITIONS
    assert error_of(futs["ghost"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert partition_count(a, "grow") == 5
    assert partition_count(a, "shrink") == 4

    # validate_only checks but changes nothing.
    ok(a.create_partitions([NewPartitions("grow", 8)], validate_only=True)["grow"])
    assert partition_count(a, "grow") == 5
    (fut,) = a.create_partitions([NewPartitions("grow", 5)]).values()
    assert error_of(fut).code() == KafkaError.INVALID_PARTITIONS


def test_new_partitions_take_writes(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("wider", 1, 1))
    ok(a.create_partitions([NewPartitions("wider", 3)])["wider"])
    p = Producer({"bootstrap.servers": kb.bootstrap, "topic.metadata.refresh.interval.ms": 500})
    for part in range(3):
        p.produce("wider", value=b"v", partition=part)
    assert p.flush(WAIT) == 0
    offsets = a.list_offsets(
        {TopicPartition("wider", i): _latest() for i in range(3)}, request_timeout=WAIT
    )
    assert [ok(f).offset for _, f in sorted(offsets.items(), key=lambda kv: kv[0].partition)] == [
        1,
        1,
        1,
    ]


def _latest() -> Any:
    from confluent_kafka.admin import OffsetSpec

    return OffsetSpec.latest()


# -- DeleteRecords ---------------------------------------------------------------------


def test_delete_records(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("trim", 2, 1))
    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce("trim", value=b"%d" % i, partition=0)
        p.flush(WAIT)  # one batch per record, so any offset is a batch boundary
    for i in range(4):
        p.produce("trim", value=b"%d" % i, partition=1)
    assert p.flush(WAIT) == 0

    futs = a.delete_records(
        [TopicPartition("trim", 0, 6), TopicPartition("trim", 1, -1)], request_timeout=WAIT
    )
    by_part = {tp.partition: f for tp, f in futs.items()}
    assert ok(by_part[0]).low_watermark == 6
    assert ok(by_part[1]).low_watermark == 4  # -1: up to the high watermark

    earliest = {TopicPartition("trim", i): _earliest() for i in range(2)}
    starts = {tp.partition: ok(f).offset for tp, f in a.list_offsets(earliest).items()}
    assert starts == {0: 6, 1: 4}

    # Asking again for an older offset does not move the start back.
    (fut,) = a.delete_records([TopicPartition("trim", 0, 2)]).values()
    assert ok(fut).low_watermark == 6
    # Beyond the high watermark is out of range.
    (fut,) = a.delete_records([TopicPartition("trim", 0, 11)]).values()
    assert error_of(fut).code() == KafkaError.OFFSET_OUT_OF_RANGE


def _earliest() -> Any:
    from confluent_kafka.admin import OffsetSpec

    return OffsetSpec.earliest()


# -- DescribeConfigs ---------------------------------------------------------------------


def test_describe_broker_configs(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(NO_AUTO_CREATE, "log.retention.hours=5")
    a = admin(b)
    configs = broker_configs(a, "0")
    # Every broker setting is there (admin tools rely on it).
    for name in (
        "broker.id",
        "num.partitions",
        "message.max.bytes",
        "log.retention.ms",
        "log.dirs",
    ):
        assert name in configs
    assert configs["broker.id"].value == "0"
    assert configs["broker.id"].is_read_only
    assert not configs["message.max.bytes"].is_read_only
    assert configs["message.max.bytes"].is_default
    assert configs["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # A static setting shows itself and, for a derived one, where it came from.
    assert configs["log.retention.hours"].value == "5"
    assert configs["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["log.retention.ms"].value == str(5 * 3600_000)
    assert configs["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    # ...and a topic without an override inherits it.
    create(a, NewTopic("inherits", 1, 1))
    topic = topic_configs(a, "inherits")
    assert topic["retention.ms"].value == str(5 * 3600_000)
    assert topic["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_describe_unknown_topic(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("real", 1, 1))
    res = [ConfigResource("topic", "real"), ConfigResource("topic", "imaginary")]
    futs = a.describe_configs(res, request_timeout=WAIT)
    assert "retention.ms" in ok(futs[res[0]])
    assert error_of(futs[res[1]]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------------


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_all_overrides(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("legacy", 1, 1, config={"retention.ms": "1000", "segment.bytes": "1048576"}))
    res = ConfigResource("topic", "legacy", set_config={"retention.ms": "2000"})
    ok(a.alter_configs([res], request_timeout=WAIT)[res])
    configs = topic_configs(a, "legacy")
    assert configs["retention.ms"].value == "2000"
    assert configs["segment.bytes"].is_default  # not named: its override is gone
    assert configs["segment.bytes"].value == "1073741824"

    bad = ConfigResource("topic", "legacy", set_config={"retention.ms": "-7"})
    err = error_of(a.alter_configs([bad])[bad])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert topic_configs(a, "legacy")["retention.ms"].value == "2000"

    dry = ConfigResource("topic", "legacy", set_config={"retention.ms": "3000"})
    ok(a.alter_configs([dry], validate_only=True)[dry])
    assert topic_configs(a, "legacy")["retention.ms"].value == "2000"


def test_incremental_alter_topic_configs(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("inc", 1, 1, config={"segment.bytes": "1048576"}))

    ok(
        incremental(
            a, ConfigResource("topic", "inc", incremental_configs=[set_op("retention.ms", "60000")])
        )
    )
    configs = topic_configs(a, "inc")
    assert configs["retention.ms"].value == "60000"
    assert configs["segment.bytes"].value == "1048576"  # untouched, unlike AlterConfigs

    # APPEND/SUBTRACT edit lists, starting from the inherited value.
    append = set_op("cleanup.policy", "compact", AlterConfigOpType.APPEND)
    ok(incremental(a, ConfigResource("topic", "inc", incremental_configs=[append])))
    assert topic_configs(a, "inc")["cleanup.policy"].value == "delete,compact"
    subtract = set_op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
    ok(incremental(a, ConfigResource("topic", "inc", incremental_configs=[subtract])))
    assert topic_configs(a, "inc")["cleanup.policy"].value == "compact"

    delete = set_op("segment.bytes", None, AlterConfigOpType.DELETE)
    ok(incremental(a, ConfigResource("topic", "inc", incremental_configs=[delete])))
    configs = topic_configs(a, "inc")
    assert configs["segment.bytes"].is_default
    assert configs["retention.ms"].value == "60000"

    # validate_only changes nothing.
    dry = ConfigResource("topic", "inc", incremental_configs=[set_op("retention.ms", "5")])
    ok(incremental(a, dry, validate_only=True))
    assert topic_configs(a, "inc")["retention.ms"].value == "60000"


def test_incremental_alter_errors(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("strict", 1, 1))
    cases = [
        ("strict", [set_op("retention.ms", "soon")], KafkaError.INVALID_CONFIG),
        ("strict", [set_op("no.such.setting", "1")], KafkaError.INVALID_CONFIG),
        (
            "strict",
            [set_op("retention.ms", "5", AlterConfigOpType.APPEND)],
            KafkaError.INVALID_REQUEST,
        ),
        ("missing", [set_op("retention.ms", "5")], KafkaError.UNKNOWN_TOPIC_OR_PART),
    ]
    for topic, ops, code in cases:
        err = error_of(incremental(a, ConfigResource("topic", topic, incremental_configs=ops)))
        assert err.code() == code, (topic, ops[0].name, err)
    # A failed resource applies none of its changes.
    mixed = [set_op("segment.bytes", "2097152"), set_op("retention.ms", "soon")]
    error_of(incremental(a, ConfigResource("topic", "strict", incremental_configs=mixed)))
    assert topic_configs(a, "strict")["segment.bytes"].is_default


def test_dynamic_broker_configs(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(NO_AUTO_CREATE, "log.retention.ms=7200000")
    a = admin(b)
    create(a, NewTopic("follows", 1, 1))

    ok(
        incremental(
            a,
            ConfigResource(
                "broker", "0", incremental_configs=[set_op("log.retention.ms", "60000")]
            ),
        )
    )
    configs = broker_configs(a)
    assert configs["log.retention.ms"].value == "60000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    topic = topic_configs(a, "follows")["retention.ms"]
    assert topic.value == "60000"
    assert topic.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    # Described under the cluster-default name (""): only what was set dynamically.
    R = msgs.DescribeConfigsRequest
    with wire(b.bootstrap) as w:
        (defaults,) = w.request(
            ApiKey.DESCRIBE_CONFIGS, 4, R(resources=[R.Resource(4, "", None)])
        ).results
    assert defaults.error_code == ErrorCode.NONE
    assert [(c.name, c.value, c.config_source) for c in defaults.configs] == [
        ("log.retention.ms", "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    ]

    # validate_only checks, and changes nothing.
    dry = ConfigResource(
        "broker", "0", incremental_configs=[set_op("message.max.bytes", "2000000")]
    )
    ok(incremental(a, dry, validate_only=True))
    assert broker_configs(a)["message.max.bytes"].is_default

    # Read-only settings cannot be changed while running (INVALID_REQUEST, as Kafka).
    err = error_of(
        incremental(
            a, ConfigResource("broker", "0", incremental_configs=[set_op("broker.id", "5")])
        )
    )
    assert err.code() == KafkaError.INVALID_REQUEST
    err = error_of(
        incremental(
            a, ConfigResource("broker", "0", incremental_configs=[set_op("num.partitions", "0")])
        )
    )
    assert err.code() == KafkaError.INVALID_CONFIG

    # Dynamic settings survive a restart...
    b.stop()
    b.start(NO_AUTO_CREATE, "log.retention.ms=7200000")
    a = admin(b)
    assert broker_configs(a)["log.retention.ms"].value == "60000"
    assert topic_configs(a, "follows")["retention.ms"].value == "60000"

    # ...and removing one brings the static value back.
    delete = set_op("log.retention.ms", None, AlterConfigOpType.DELETE)
    ok(incremental(a, ConfigResource("broker", "0", incremental_configs=[delete])))
    configs = broker_configs(a)
    assert configs["log.retention.ms"].value == "7200000"
    assert configs["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_dynamic_topic_default_applies_to_new_topics(kb: BrokerProcess) -> None:
    a = admin(kb)
    ok(
        incremental(
            a, ConfigResource("broker", "0", incremental_configs=[set_op("num.partitions", "4")])
        )
    )
    fut = a.create_topics([NewTopic("defaulted")], request_timeout=WAIT)["defaulted"]
    ok(fut)
    assert partition_count(a, "defaulted") == 4


# -- persistence -------------------------------------------------------------------------


def test_topic_configs_survive_restart(kb: BrokerProcess) -> None:
    a = admin(kb)
    create(a, NewTopic("durable", 2, 1, config={"retention.ms": "123456"}))
    ok(
        incremental(
            a,
            ConfigResource(
                "topic", "durable", incremental_configs=[set_op("max.message.bytes", "2048")]
            ),
        )
    )
    ok(a.create_partitions([NewPartitions("durable", 3)])["durable"])

    kb.stop()
    kb.start(NO_AUTO_CREATE)
    a = admin(kb)
    configs = topic_configs(a, "durable")
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "2048"
    assert partition_count(a, "durable") == 3


# -- kafka-python ------------------------------------------------------------------------


def test_kafka_python_admin(kb: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic
    from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

    a = KafkaAdminClient(bootstrap_servers=kb.bootstrap, request_timeout_ms=10000)
    try:
        created = a.create_topics([KPNewTopic("kp", 2, 1, topic_configs={"retention.ms": "5000"})])
        (result,) = created["topics"]
        assert result["error_code"] == 0
        assert result["num_partitions"] == 2
        assert result["configs"]["retention.ms"]["value"] == "5000"
        with pytest.raises(TopicAlreadyExistsError):
            a.create_topics([KPNewTopic("kp", 1, 1)])

        described = a.describe_configs([KPResource(ConfigResourceType.TOPIC, "kp")])
        assert described["topic"]["kp"] == {
            "retention.ms": {
                "value": "5000",
                "read_only": False,
                "config_source": "DYNAMIC_TOPIC_CONFIG",
                "is_sensitive": False,
                "synonyms": [],
                "config_type": "LONG",
                "documentation": None,
            }
        }
        everything = a.describe_configs(
            [KPResource(ConfigResourceType.BROKER, "0")], config_filter="all"
        )["broker"]["0"]
        assert everything["num.partitions"]["value"] == "1"
        assert everything["broker.id"]["read_only"] is True

        (topic,) = a.describe_topics(["kp"])
        assert [p["partition_index"] for p in topic["partitions"]] == [0, 1]

        deleted = a.delete_topics(["kp"])
        assert deleted["topics"][0]["error_code"] == 0
        with pytest.raises(UnknownTopicOrPartitionError):
            a.delete_topics(["kp"])
    finally:
        a.close()


# -- protocol-level details no client exposes -----------------------------------------------


def wire(bootstrap: str) -> BrokerClient:
    return BrokerClient(bootstrap, WAIT, client_id="admin-test")


def _create_request(
    name: str, partitions: int, configs: dict[str, str], validate: bool = False
) -> Any:
    T = msgs.CreateTopicsRequest.Topic
    return msgs.CreateTopicsRequest(
        topics=[
            T(
                name=name,
                num_partitions=partitions,
                replication_factor=-1,
                assignments=[],
                configs=[T.Config(k, v) for k, v in configs.items()],
            )
        ],
        timeout_ms=10000,
        validate_only=validate,
    )


def test_wire_create_topics_v7_and_delete_by_id(kb: BrokerProcess) -> None:
    with wire(kb.bootstrap) as w:
        resp = w.request(
            ApiKey.CREATE_TOPICS, 7, _create_request("wired", 3, {"retention.ms": "999"})
        )
        (t,) = resp.topics
        assert t.error_code == ErrorCode.NONE
        assert t.num_partitions == 3 and t.replication_factor == 1
        assert t.topic_id != uuid.UUID(int=0)
        configs = {c.name: (c.value, c.config_source) for c in t.configs}
        assert configs["retention.ms"] == ("999", 1)
        assert configs["segment.bytes"] == ("1073741824", 5)

        # Same name again in one request: both refused as duplicates.
        dup = _create_request("twice", 1, {})
        dup.topics = dup.topics * 2
        (t2,) = w.request(ApiKey.CREATE_TOPICS, 7, dup).topics
        assert (t2.name, t2.error_code) == ("twice", ErrorCode.INVALID_REQUEST)

        D = msgs.DeleteTopicsRequest
        unknown = uuid.uuid4()
        resp = w.request(
            ApiKey.DELETE_TOPICS,
            6,
            D(topics=[D.Topic(None, t.topic_id), D.Topic(None, unknown)], timeout_ms=10000),
        )
        results = {r.topic_id: (r.name, r.error_code) for r in resp.responses}
        assert results[t.topic_id] == ("wired", ErrorCode.NONE)
        assert results[unknown] == (None, ErrorCode.UNKNOWN_TOPIC_ID)
        resp = w.request(
            ApiKey.DELETE_TOPICS,
            6,
            D(topics=[D.Topic("wired", uuid.UUID(int=0))], timeout_ms=10000),
        )
        assert resp.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_wire_describe_configs_v4_synonyms_and_docs(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    b = broker_factory(NO_AUTO_CREATE, "log.segment.bytes=2097152")
    with wire(b.bootstrap) as w:
        w.request(ApiKey.CREATE_TOPICS, 5, _create_request("syn", 1, {"segment.bytes": "1048576"}))
        R = msgs.DescribeConfigsRequest
        req = R(
            resources=[
                R.Resource(2, "syn", ["segment.bytes", "retention.ms"]),
                R.Resource(4, "0", ["log.segment.bytes"]),
                R.Resource(4, "zero", None),
                R.Resource(4, "3", None),
                R.Resource(8, "0", None),
                R.Resource(99, "x", None),
            ],
            include_synonyms=True,
            include_documentation=True,
        )
        topic, brk, badname, other, loggers, badtype = w.request(
            ApiKey.DESCRIBE_CONFIGS, 4, req
        ).results
        seg = {c.name: c for c in topic.configs}
        assert set(seg) == {"segment.bytes", "retention.ms"}
        assert [(s.name, s.value, s.source) for s in seg["segment.bytes"].synonyms] == [
            ("segment.bytes", "1048576", 1),
            ("log.segment.bytes", "2097152", 4),
            ("log.segment.bytes", "1073741824", 5),
        ]
        assert seg["segment.bytes"].config_type == 3  # INT
        assert seg["segment.bytes"].documentation
        (bseg,) = brk.configs
        assert (bseg.value, bseg.config_source, bseg.read_only) == ("2097152", 4, False)
        assert badname.error_code == ErrorCode.INVALID_REQUEST
        assert other.error_code == ErrorCode.INVALID_REQUEST  # another broker's id
        assert loggers.error_code == ErrorCode.NONE
        assert "root" in {c.name for c in loggers.configs}
        assert badtype.error_code == ErrorCode.INVALID_REQUEST


def test_wire_delete_records_unknown_partition(kb: BrokerProcess) -> None:
    create(admin(kb), NewTopic("dr", 1, 1))
    R = msgs.DeleteRecordsRequest
    with wire(kb.bootstrap) as w:
        resp = w.request(
            ApiKey.DELETE_RECORDS,
            2,
            R(
                topics=[
                    R.Topic("dr", [R.Topic.Partition(0, 0), R.Topic.Partition(5, 0)]),
                    R.Topic("nope", [R.Topic.Partition(0, 0)]),
                ],
                timeout_ms=10000,
            ),
        )
    got = {
        (t.name, p.partition_index): (p.error_code, p.low_watermark)
        for t in resp.topics
        for p in t.partitions
    }
    assert got == {
        ("dr", 0): (ErrorCode.NONE, 0),
        ("dr", 5): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
    }


def test_wire_every_version_answers(kb: BrokerProcess) -> None:
    """Each declared version of each admin API gets a well-formed, correct answer."""
    ZERO = uuid.UUID(int=0)
    with wire(kb.bootstrap) as w:
        for v in range(2, 8):
            name = f"v{v}"
            (t,) = w.request(
                ApiKey.CREATE_TOPICS, v, _create_request(name, 2, {"retention.ms": "1000"})
            ).topics
            assert (t.name, t.error_code) == (name, ErrorCode.NONE), v
            if v >= 5:
                assert t.num_partitions == 2 and len(t.configs) > 10
            (t,) = w.request(ApiKey.CREATE_TOPICS, v, _create_request(name, 2, {})).topics
            assert t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and t.error_message, v

        C = msgs.CreatePartitionsRequest
        for v in range(4):
            topic = f"v{v + 2}"
            (r,) = w.request(
                ApiKey.CREATE_PARTITIONS, v, C(topics=[C.Topic(topic, 3, None)], timeout_ms=10000)
            ).results
            assert (r.name, r.error_code) == (topic, ErrorCode.NONE), v

        R = msgs.DescribeConfigsRequest
        for v in range(1, 5):
            (res,) = w.request(
                ApiKey.DESCRIBE_CONFIGS,
                v,
                R(resources=[R.Resource(2, "v2", ["retention.ms"])], include_synonyms=True),
            ).results
            (c,) = res.configs
            assert (c.value, c.config_source) == ("1000", 1), v
            # As Kafka: log.retention.ms has no default of its own (log.retention.hours
            # supplies it), so only the topic's override is a synonym.
            assert [s.source for s in c.synonyms] == [1], v

        A = msgs.AlterConfigsRequest
        for v in range(3):
            value = str(2000 + v)
            (r,) = w.request(
                ApiKey.ALTER_CONFIGS,
                v,
                A(resources=[A.Resource(2, "v3", [A.Resource.Config("retention.ms", value)])]),
            ).responses
            assert r.error_code == ErrorCode.NONE, v
            (res,) = w.request(
                ApiKey.DESCRIBE_CONFIGS, 4, R(resources=[R.Resource(2, "v3", ["retention.ms"])])
            ).results
            assert res.configs[0].value == value, v
        # For a broker, AlterConfigs replaces the whole set of dynamic settings.
        for configs, expected in (
            ([("message.max.bytes", "2000000")], ("2000000", 2)),
            ([], ("1048588", 5)),
        ):
            (r,) = w.request(
                ApiKey.ALTER_CONFIGS,
                2,
                A(resources=[A.Resource(4, "0", [A.Resource.Config(k, v) for k, v in configs])]),
            ).responses
            assert r.error_code == ErrorCode.NONE
            (res,) = w.request(
                ApiKey.DESCRIBE_CONFIGS, 4, R(resources=[R.Resource(4, "0", ["message.max.bytes"])])
            ).results
            assert (res.configs[0].value, res.configs[0].config_source) == expected
        # Logger levels are not topic/broker settings: AlterConfigs refuses them.
        (r,) = w.request(ApiKey.ALTER_CONFIGS, 2, A(resources=[A.Resource(8, "0", [])])).responses
        assert r.error_code == ErrorCode.INVALID_REQUEST

        I = msgs.IncrementalAlterConfigsRequest  # noqa: E741
        for v in range(2):
            (r,) = w.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                v,
                I(
                    resources=[
                        I.Resource(2, "v4", [I.Resource.Config("cleanup.policy", 2, "compact")])
                    ]
                ),
            ).responses
            assert r.error_code == ErrorCode.NONE, v
        (res,) = w.request(
            ApiKey.DESCRIBE_CONFIGS, 4, R(resources=[R.Resource(2, "v4", ["cleanup.policy"])])
        ).results
        assert res.configs[0].value == "delete,compact"
        # A logger's level can be changed and is then described.
        (r,) = w.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            I(resources=[I.Resource(8, "0", [I.Resource.Config("kbroker", 0, "DEBUG")])]),
        ).responses
        assert r.error_code == ErrorCode.NONE
        (res,) = w.request(
            ApiKey.DESCRIBE_CONFIGS, 4, R(resources=[R.Resource(8, "0", ["kbroker"])])
        ).results
        assert [(c.name, c.value) for c in res.configs] == [("kbroker", "DEBUG")]

        DR = msgs.DeleteRecordsRequest
        for v in range(3):
            (t,) = w.request(
                ApiKey.DELETE_RECORDS,
                v,
                DR(topics=[DR.Topic("v2", [DR.Topic.Partition(0, 1)])], timeout_ms=10000),
            ).topics
            assert (t.partitions[0].error_code, t.partitions[0].low_watermark) == (
                ErrorCode.OFFSET_OUT_OF_RANGE,
                -1,
            ), v  # the partition is empty: offset 1 is past its high watermark

        D = msgs.DeleteTopicsRequest
        for v in range(1, 7):
            name = f"v{v + 1}"
            body = (
                D(topics=[D.Topic(name, ZERO)], timeout_ms=10000)
                if v >= 6
                else D(topic_names=[name], timeout_ms=10000)
            )
            (r,) = w.request(ApiKey.DELETE_TOPICS, v, body).responses
            assert (r.name, r.error_code) == (name, ErrorCode.NONE), v
