"""Three brokers on a real ZooKeeper, reached by real clients through any of them.

Each scenario runs against Apache Kafka 3.9.1 in ZooKeeper mode first (the
reference: it proves the test) and then against three ``kbroker serve
--zookeeper`` processes, on a fresh chroot each:

- topics of replication factor 1 spread over the brokers; confluent-kafka,
  kafka-python, aiokafka and the Java client (Kafka's console tools on
  kafka-clients 3.9.1) produce through one broker each, and consumer groups
  (librdkafka's, the Java client's) read everything back through another;
- kill -9 of a broker: its partitions go offline (no leader) while the
  others keep taking writes, and come back with their records when it
  restarts;
- kill -9 of the controller: another broker is elected and topic creation
  works again (the time each took is printed: ``-s`` shows it);
- topic and cluster-default broker configs set through one broker reach the
  others (ZooKeeper's config change notifications);
- SIGTERM: a broker stops cleanly (after its controlled shutdown) and serves
  its partitions again when restarted.

Select with ``-m kafka`` (the reference needs Kafka's jars: bench/kafka/fetch.sh).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import IncrementalAlterConfigsRequest
from kbroker.protocol.messages.inter_broker import UpdateMetadataRequest
from kbroker.tools.client import BrokerClient
from tests.cluster.kafka_zk import require_kafka
from tests.cluster.nodes import SESSION_TIMEOUT_MS, SYSTEMS, Cluster, Node, cluster
from tests.helpers import consume_all, produce, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    chroot = f"/cluster-{uuid.uuid4().hex[:8]}"
    with cluster(request.param, zookeeper.connect, chroot, tmp_path) as c:
        yield c


def create_topic(
    bootstrap: str, name: str, partitions: int, rf: int = 1, timeout: float = 30
) -> float:
    """Creates a topic through ``bootstrap``; the seconds the answer took."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    start = time.monotonic()
    futures = admin.create_topics(
        [NewTopic(name, partitions, rf)], operation_timeout=timeout, request_timeout=timeout
    )
    futures[name].result(2 * timeout)
    return time.monotonic() - start


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader (-1: none) as ``bootstrap`` answers Metadata; empty while the
    answering broker does not know the topic yet (another broker took the CreateTopics,
    and UpdateMetadata is still on its way here)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: p.leader for p in t.partitions.values()}


def elected_leaders(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Partition -> leader once the broker answering Metadata shows a leader for each of
    the topic's ``partitions``: what a client sees soon after CreateTopics, not at once."""
    return wait_for(
        lambda: (
            (found := partition_leaders(bootstrap, topic))
            and len(found) == partitions
            and -1 not in found.values()
            and found
        ),
        f"leaders of the {partitions} partitions of {topic}",
    )


def _java(main: str, *args: str, stdin: str = "", timeout: float = 90) -> str:
    java, lib = require_kafka()
    done = subprocess.run(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*", main, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def java_produce(bootstrap: str, topic: str, values: list[str]) -> None:
    _java(
        "kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--producer-property",
        "acks=all",
        stdin="".join(f"{v}\n" for v in values),
    )


def java_consume(bootstrap: str, topic: str, count: int) -> list[str]:
    out = _java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        f"java-{topic}",
        "--from-beginning",
        "--max-messages",
        str(count),
        "--timeout-ms",
        "60000",
    )
    return out.splitlines()


def test_topics_spread_and_clients_use_any_broker(brokers: Cluster) -> None:
    b1, b2, b3 = (brokers.nodes[i].bootstrap for i in (1, 2, 3))
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    create_topic(b2, topic, 6)
    # b2 answered once it knew the topic; b3 learns it from the controller's UpdateMetadata,
    # which may reach it a moment later (on Kafka too).
    elected_leaders(b3, topic, 6)
    md = AdminClient({"bootstrap.servers": b3}).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert md.controller_id in (1, 2, 3)
    parts = md.topics[topic].partitions
    assert sorted(parts) == list(range(6))
    for p in parts.values():
        assert p.replicas == [p.leader] and p.isrs == [p.leader]
    # Leaders go round the brokers: each leads two of the six.
    assert sorted(p.leader for p in parts.values()) == [1, 1, 2, 2, 3, 3]

    # An idempotent producer (ids from ZooKeeper's blocks) through broker 1.
    reports = produce(
        b1,
        topic,
        [(f"k{i}".encode(), f"confluent-{i}".encode()) for i in range(300)],
        acks="all",
        **{"enable.idempotence": True},
    )
    assert all(err is None for err, _ in reports)

    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=b3, acks="all")
    for i in range(100):
        kp.send(topic, key=f"p{i}".encode(), value=f"kafka-python-{i}".encode())
    kp.flush(30)
    kp.close(10)

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=b2, acks="all")
        await producer.start()
        try:
            for i in range(100):
                await producer.send_and_wait(topic, f"aiokafka-{i}".encode(), key=f"a{i}".encode())
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(aio(), 60))

    # The Java client (kafka-clients 3.9.1, as Spark uses it) through Kafka's console
    # producer, by broker 2.
    java_produce(b2, topic, [f"java-{i}" for i in range(100)])

    consumer = Consumer(
        {
            "bootstrap.servers": b3,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < 600 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.add(msg.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed([tp for tp in consumer.assignment()], timeout=10)
    finally:
        consumer.close()
    expected = (
        {f"confluent-{i}".encode() for i in range(300)}
        | {f"kafka-python-{i}".encode() for i in range(100)}
        | {f"aiokafka-{i}".encode() for i in range(100)}
        | {f"java-{i}".encode() for i in range(100)}
    )
    assert seen == expected
    assert sum(tp.offset for tp in committed) == 600
    # And the Java consumer, in a group of its own, through broker 1.
    assert sorted(java_consume(b1, topic, 600)) == sorted(v.decode() for v in expected)

    # More replicas than brokers: refused by whichever broker is asked.
    admin = AdminClient({"bootstrap.servers": b1})
    future = admin.create_topics([NewTopic(f"{topic}-rf4", 1, 4)], operation_timeout=10)
    with pytest.raises(Exception) as refused:
        future[f"{topic}-rf4"].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_killed_broker_partitions_go_offline_and_come_back(brokers: Cluster) -> None:
    topic = f"offline-{uuid.uuid4().hex[:6]}"
    create_topic(brokers.bootstrap, topic, 6)
    leaders = elected_leaders(brokers.bootstrap, topic, 6)
    produce(
        brokers.bootstrap,
        topic,
        [(None, f"before-{p}".encode(), None, p) for p in range(6)],
        acks="all",
    )
    controller = brokers.controller_id()
    victim = next(i for i in brokers.nodes if i != controller)
    others = [i for i in brokers.nodes if i != victim]
    lost = sorted(p for p, leader in leaders.items() if leader == victim)
    kept = sorted(p for p, leader in leaders.items() if leader != victim)
    assert lost and kept

    brokers.nodes[victim].kill()
    started = time.monotonic()
    survivor = brokers.nodes[others[0]].bootstrap
    wait_for(
        lambda: all(partition_leaders(survivor, topic).get(p) == -1 for p in lost),
        f"partitions {lost} of killed broker {victim} to go offline",
        timeout=SESSION_TIMEOUT_MS / 1000 + 15,
    )
    print(
        f"\n[{brokers.system}] broker {victim} killed: offline after "
        f"{time.monotonic() - started:.2f}s (session timeout {SESSION_TIMEOUT_MS} ms)"
    )
    # The others keep taking writes.
    reports = produce(
        brokers.live_bootstrap(),
        topic,
        [(None, f"during-{p}".encode(), None, p) for p in kept],
        acks="all",
    )
    assert all(err is None for err, _ in reports)
    # A write to an offline partition fails (after the producer's retries), it is not lost
    # into another partition.
    offline = Producer({"bootstrap.servers": brokers.live_bootstrap(), "message.timeout.ms": 2000})
    errors: list[object] = []
    offline.produce(topic, b"nowhere", partition=lost[0], on_delivery=lambda e, m: errors.append(e))
    offline.flush(15)
    assert errors and errors[0] is not None

    brokers.nodes[victim].restart()
    wait_for(
        lambda: all(partition_leaders(survivor, topic).get(p) == victim for p in lost),
        f"partitions {lost} to be led by broker {victim} again",
        timeout=30,
    )
    got = consume_all(brokers.bootstrap, topic, 6, expected=6 + len(kept), timeout=30)
    values = sorted(m.value() for m in got)
    assert values == sorted(
        [f"before-{p}".encode() for p in range(6)] + [f"during-{p}".encode() for p in kept]
    )


def test_killed_controller_is_replaced(brokers: Cluster) -> None:
    old: int = wait_for(brokers.controller_id, "a controller")
    brokers.nodes[old].kill()
    started = time.monotonic()
    new = wait_for(
        lambda: (c := brokers.controller_id()) not in (None, old) and c,
        "another controller",
        timeout=SESSION_TIMEOUT_MS / 1000 + 20,
    )
    elected = time.monotonic() - started
    topic = f"after-{uuid.uuid4().hex[:6]}"

    def created() -> bool:
        try:
            # Short attempts: a client may still wait on the dead controller.
            create_topic(brokers.live_bootstrap(), topic, 4, timeout=5)
            return True
        except Exception as exc:  # retried: the new controller may still be starting
            return "already exists" in str(exc)

    wait_for(created, "topic creation on the new controller", timeout=60, interval=0.5)
    reports = produce(
        brokers.live_bootstrap(), topic, [(None, b"x", None, p) for p in range(4)], acks="all"
    )
    usable = time.monotonic() - started
    assert all(err is None for err, _ in reports)
    print(
        f"\n[{brokers.system}] controller {old} killed: broker {new} elected after "
        f"{elected:.2f}s, a new topic took writes after {usable:.2f}s "
        f"(session timeout {SESSION_TIMEOUT_MS} ms)"
    )
    assert new in brokers.nodes and new != old
    brokers.nodes[old].restart()
    md = AdminClient({"bootstrap.servers": brokers.nodes[old].bootstrap}).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]


def _describe(bootstrap: str, resource: ConfigResource) -> dict[str, tuple[str, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (e.value, e.source) for name, e in entries.items()}


def test_config_changes_reach_every_broker(brokers: Cluster) -> None:
    b1, b2, b3 = (brokers.nodes[i].bootstrap for i in (1, 2, 3))
    topic = f"configs-{uuid.uuid4().hex[:6]}"
    create_topic(b1, topic, 3)
    alter = AdminClient({"bootstrap.servers": b1})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    alter.incremental_alter_configs([resource])[resource].result(30)
    # Every broker describes the topic with the new override.
    for bootstrap in (b2, b3):
        wait_for(
            lambda b=bootstrap: (
                _describe(b, ConfigResource(ResourceType.TOPIC, topic))["retention.ms"][0]
                == "3600000"
            ),
            f"retention.ms of {topic} through {bootstrap}",
            timeout=20,
        )
    # A cluster-wide dynamic broker default (resource name "", which confluent-kafka
    # does not send), set through broker 2, reaches broker 3.
    R = IncrementalAlterConfigsRequest
    with BrokerClient(b2, 30, client_id="cluster-test") as client:
        answer = client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            R(
                resources=[
                    R.Resource(
                        resource_type=ResourceType.BROKER.value,
                        resource_name="",
                        configs=[R.Resource.Config("log.retention.ms", 0, "7200000")],
                    )
                ],
                validate_only=False,
            ),
        )
    assert [r.error_code for r in answer.responses] == [0]
    wait_for(
        lambda: (
            _describe(b3, ConfigResource(ResourceType.BROKER, "3")).get("log.retention.ms")
            == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        ),
        "broker 3 to take the cluster default",
        timeout=20,
    )
    # Topics without an override take it.
    other = f"plain-{uuid.uuid4().hex[:6]}"
    create_topic(b1, other, 1)
    wait_for(
        lambda: (
            _describe(b3, ConfigResource(ResourceType.TOPIC, other))["retention.ms"][0] == "7200000"
        ),
        "a new topic to take the cluster default",
        timeout=20,
    )


def test_sigterm_stops_a_broker_cleanly_and_it_comes_back(brokers: Cluster) -> None:
    topic = f"term-{uuid.uuid4().hex[:6]}"
    create_topic(brokers.bootstrap, topic, 6)
    produce(brokers.bootstrap, topic, [(None, f"r{p}".encode(), None, p) for p in range(6)])
    controller = brokers.controller_id()
    victim = next(i for i in brokers.nodes if i != controller)
    started = time.monotonic()
    # A JVM stopped by SIGTERM exits with 143 once its shutdown hooks ran; kbroker with 0.
    assert brokers.nodes[victim].terminate(timeout=60) == (143 if brokers.system == "kafka" else 0)
    took = time.monotonic() - started
    print(f"\n[{brokers.system}] broker {victim} stopped by SIGTERM in {took:.2f}s")
    survivor = next(n.bootstrap for i, n in brokers.nodes.items() if i != victim)
    # Its partitions (one replica each) have no leader now; the others are served.
    leaders = partition_leaders(survivor, topic)
    assert victim not in leaders.values()
    brokers.nodes[victim].restart()
    wait_for(
        lambda: (found := partition_leaders(survivor, topic)) and -1 not in found.values(),
        "every partition led again",
        timeout=30,
    )
    got = consume_all(brokers.bootstrap, topic, 6, expected=6, timeout=30)
    assert sorted(m.value() for m in got) == [f"r{p}".encode() for p in range(6)]


@pytest.fixture
def kbrokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    chroot = f"/cluster-{uuid.uuid4().hex[:8]}"
    with cluster("kbroker", zookeeper.connect, chroot, tmp_path) as c:
        yield c


def test_foreign_orders_and_garbage_znodes_change_nothing(kbrokers: Cluster) -> None:
    """kbroker only: orders from a client with an old controller or broker epoch are
    refused with Kafka's codes, and znodes that are not Kafka's JSON are skipped."""
    b1 = kbrokers.nodes[1].bootstrap
    topic = f"kept-{uuid.uuid4().hex[:6]}"
    create_topic(b1, topic, 3)
    zk = kbrokers.zk()
    try:
        epoch = int(zk.get("/controller_epoch")[0])
        registration = zk.get("/brokers/ids/1")[1].czxid
        # Garbage where Kafka keeps JSON: a topic, a broker, a config change, a deletion.
        zk.create("/brokers/topics/junk", b"\x00not json{")
        zk.create("/brokers/ids/77", b'{"version":5,"host":7}')
        zk.create("/config/changes/config_change_", b"[1,2", sequence=True)
        zk.create("/admin/delete_topics/no-such-topic", b"")
    finally:
        zk.stop()
        zk.close()

    wipe = UpdateMetadataRequest(
        controller_id=99, controller_epoch=epoch - 1, topic_states=[], live_brokers=[]
    )
    with BrokerClient(b1, 30, client_id="not-a-controller") as client:
        old = client.request(ApiKey.UPDATE_METADATA, 8, wipe)
        assert old.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        wipe.controller_epoch, wipe.broker_epoch = epoch, registration - 1
        stale = client.request(ApiKey.UPDATE_METADATA, 8, wipe)
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    # Nothing changed: every broker and partition is still there, and the cluster still
    # creates topics and takes writes.
    md = AdminClient({"bootstrap.servers": b1}).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert all(p.leader > 0 for p in md.topics[topic].partitions.values())
    create_topic(b1, f"{topic}-after", 2)
    reports = produce(kbrokers.bootstrap, f"{topic}-after", [(None, b"x", None, 0)], acks="all")
    assert all(err is None for err, _ in reports)
    # The controller read the garbage (and said so), and nothing died of it.
    wait_for(
        lambda: any("junk" in n.output() for n in kbrokers.nodes.values()),
        "the controller to log the unreadable topic",
        timeout=10,
    )
    for node in kbrokers.nodes.values():
        assert node.alive, node.tail()
        assert "Traceback" not in node.output()


def test_cluster_metrics_and_their_alert_rules(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """kbroker only: each broker's /metrics says whether it is the controller, and the
    controller counts offline partitions; the cluster alert rules read only these."""
    from tests.cluster.nodes import kbroker_nodes_with_metrics
    from tests.metrics.prom import exported_names, get, promql_metric_names
    from tests.metrics.test_deploy import alert_exprs

    connect = zookeeper.connect + f"/metrics-{uuid.uuid4().hex[:8]}"
    nodes, ports = kbroker_nodes_with_metrics(connect, tmp_path)

    def gauges(i: int) -> dict[str, float]:
        status, text = get(f"http://127.0.0.1:{ports[i]}/metrics")
        assert status == 200
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(("kafka_controller_", "kbroker_zookeeper_", "kbroker_controller_")):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    try:
        for node in nodes.values():
            node.launch()
        for node in nodes.values():
            node.wait_started()
        cluster_ = Cluster("kbroker", connect, dict[int, Node](nodes))
        controller = wait_for(cluster_.controller_id, "a controller")
        topic = f"m-{uuid.uuid4().hex[:6]}"
        create_topic(cluster_.bootstrap, topic, 6)
        leaders = elected_leaders(cluster_.bootstrap, topic, 6)
        active = {
            i: gauges(i)["kafka_controller_kafkacontroller_activecontrollercount"] for i in ports
        }
        assert active == {i: float(i == controller) for i in ports}
        assert all(gauges(i)["kbroker_zookeeper_connected"] == 1 for i in ports)
        counts = gauges(controller)
        assert counts["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
        assert counts["kafka_controller_kafkacontroller_globalpartitioncount"] >= 6
        # Each new partition's first leader is an election; none was unclean.
        assert counts["kbroker_controller_leader_elections_total"] >= 6
        assert counts["kbroker_controller_unclean_leader_elections_total"] == 0
        assert counts["kbroker_controller_changes_total"] == 1
        assert all(
            gauges(i)["kbroker_controller_changes_total"] == 0 for i in ports if i != controller
        )

        victim = next(i for i in nodes if i != controller)
        nodes[victim].kill()
        lost = sum(1 for leader in leaders.values() if leader == victim)
        wait_for(
            lambda: (
                gauges(controller)["kafka_controller_kafkacontroller_offlinepartitionscount"]
                >= lost
            ),
            "the controller to count the killed broker's partitions offline",
            timeout=SESSION_TIMEOUT_MS / 1000 + 15,
        )
        # The cluster rules read only metrics a cluster member exports.
        _, text = get(f"http://127.0.0.1:{ports[controller]}/metrics")
        exported = exported_names(text)
        exprs = alert_exprs(cluster=True)
        assert exprs
        for expr in exprs:
            names = promql_metric_names(expr)
            assert names and not names - exported, expr
    finally:
        for node in nodes.values():
            node.kill()


def test_partitions_added_and_topic_deleted_through_any_broker(brokers: Cluster) -> None:
    b1, b2, b3 = (brokers.nodes[i].bootstrap for i in (1, 2, 3))
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    create_topic(b1, topic, 2)
    produce(b1, topic, [(None, b"old", None, p) for p in range(2)], acks="all")
    # CreatePartitions through broker 2: the new partitions get leaders on the brokers.
    admin = AdminClient({"bootstrap.servers": b2})
    admin.create_partitions([NewPartitions(topic, 6)], operation_timeout=30)[topic].result(60)
    leaders = wait_for(
        lambda: (found := partition_leaders(b3, topic)) and len(found) == 6 and found,
        "six partitions with leaders",
        timeout=30,
    )
    assert -1 not in leaders.values() and set(leaders.values()) == {1, 2, 3}
    # DeleteTopics through broker 3: every broker stops listing it, and the name is free
    # again for a new, empty topic.
    deleter = AdminClient({"bootstrap.servers": b3})
    deleter.delete_topics([topic], operation_timeout=30)[topic].result(60)
    for bootstrap in (b1, b2, b3):
        wait_for(
            lambda b=bootstrap: (
                topic not in AdminClient({"bootstrap.servers": b}).list_topics(timeout=10).topics
            ),
            f"{topic} gone from {bootstrap}",
            timeout=30,
        )
    wait_for(
        lambda: _created_again(b1, topic),
        f"{topic} created again",
        timeout=60,
        interval=0.5,
    )
    produce(b1, topic, [(None, b"new", None, 0)], acks="all")
    got = consume_all(b2, topic, 1, expected=2, timeout=5)
    assert [m.value() for m in got] == [b"new"]


def _created_again(bootstrap: str, topic: str) -> bool:
    try:
        create_topic(bootstrap, topic, 1, timeout=5)
        return True
    except Exception:  # the deletion may still be finishing on some broker
        return False
