"""What clients are told about addresses and topics right after a change, on Apache Kafka
3.9.1 (ZooKeeper mode) and kbroker, each on one node and as a 3-broker cluster.

Every broker binds 127.0.0.1 and advertises ``localhost`` (advertised.listeners), and
clients bootstrap through ``localhost``: every answer that carries a host (Metadata,
DescribeCluster, FindCoordinator for groups and transactional ids, v3 and v4) must name
``localhost``. Once DeleteTopics has answered, no broker's Metadata lists the topic (with
and without an invalid name in the same request). Metadata for an unknown topic with
``allow_auto_topic_creation`` false answers UNKNOWN_TOPIC_OR_PARTITION and creates
nothing; with true, it creates the topic (LEADER_NOT_AVAILABLE while it has no leaders,
as Kafka answers) and every broker names the leaders within seconds.

One deployment of each kind serves the module; raw requests go through kafka-python's
client to a chosen broker, the rest through confluent-kafka.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from tests.cluster.nodes import cluster
from tests.helpers import BrokerProcess, free_port, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(300)

ADVERTISED = "localhost"
SETTINGS = {
    "auto.create.topics.enable": "true",
    "num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5


@dataclass
class Deployment:
    system: str
    # Broker id -> the port it listens on (127.0.0.1) and advertises (localhost).
    ports: dict[int, int]

    def bootstrap(self, broker_id: int | None = None) -> str:
        """Through the advertised name: every broker, or one."""
        ids = self.ports if broker_id is None else [broker_id]
        return ",".join(f"{ADVERTISED}:{self.ports[i]}" for i in ids)


@contextmanager
def single_kbroker(root: Path) -> Iterator[Deployment]:
    port = free_port()
    broker = BrokerProcess(root / "data", port=port)
    broker.start(
        f"advertised.listeners=PLAINTEXT://{ADVERTISED}:{port}",
        "offsets.topic.replication.factor=1",
        *(f"{k}={v}" for k, v in SETTINGS.items()),
    )
    try:
        yield Deployment("kbroker", {0: port})
    finally:
        broker.kill()


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def system(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module", params=[1, 3], ids=["one-node", "cluster"])
def deployment(
    request: pytest.FixtureRequest,
    system: str,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    size = int(request.param)
    root = tmp_path_factory.mktemp(f"{system}{size}")
    if system == "kbroker" and size == 1:
        # kbroker's own single-node mode, without ZooKeeper.
        with single_kbroker(root) as d:
            yield d
        return
    settings = {**SETTINGS, "default.replication.factor": str(min(2, size))}
    with cluster(
        system,
        zookeeper.connect,
        f"/meta-{uuid.uuid4().hex[:8]}",
        root,
        size=size,
        kafka_settings=settings,
        kbroker_settings=[f"{k}={v}" for k, v in settings.items()],
        advertised_host=ADVERTISED,
    ) as c:
        yield Deployment(
            system, {i: int(n.bootstrap.rsplit(":", 1)[1]) for i, n in c.nodes.items()}
        )


def ask(d: Deployment, broker_id: int, request: Any) -> Any:
    """``request``'s answer from one broker, through kafka-python's client."""
    admin = KafkaAdminClient(bootstrap_servers=d.bootstrap(broker_id), request_timeout_ms=15000)
    try:
        return admin._manager.run(admin._manager.send, request, broker_id)
    finally:
        admin.close()


def topic_metadata(d: Deployment, broker_id: int, name: str, auto_create: bool) -> Any:
    wanted = [MetadataRequest.MetadataRequestTopic(name=name)]
    answer = ask(
        d, broker_id, MetadataRequest(topics=wanted, allow_auto_topic_creation=auto_create)
    )
    (topic,) = answer.topics
    return topic


def listed_topics(d: Deployment, broker_id: int) -> dict[str, int]:
    """Every topic one broker's Metadata lists, with its number of partitions."""
    answer = ask(d, broker_id, MetadataRequest(topics=None, allow_auto_topic_creation=False))
    return {t.name: len(t.partitions) for t in answer.topics}


# -- advertised addresses -----------------------------------------------------------------


def coordinators(d: Deployment, broker_id: int, key_type: int, key: str) -> list[Any]:
    """FindCoordinator's answers for ``key`` from one broker, v3 (one key) and v4 (a list),
    once the coordinator is ready (a new internal topic answers "not available" first)."""

    def ready() -> list[Any] | None:
        v3 = ask(d, broker_id, FindCoordinatorRequest(key=key, key_type=key_type, max_version=3))
        v4 = ask(
            d,
            broker_id,
            FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key], min_version=4),
        )
        answers = [v3, *v4.coordinators]
        return answers if all(a.error_code == 0 for a in answers) else None

    return wait_for(ready, f"the coordinator of {key}", timeout=60, interval=0.5)


def test_every_answer_names_the_advertised_host(deployment: Deployment) -> None:
    d = deployment
    admin = AdminClient({"bootstrap.servers": d.bootstrap()})
    brokers = admin.list_topics(timeout=15).brokers
    assert {b.id: (b.host, b.port) for b in brokers.values()} == {
        i: (ADVERTISED, p) for i, p in d.ports.items()
    }
    nodes = admin.describe_cluster(request_timeout=15).result(30).nodes
    assert {(n.id, n.host, n.port) for n in nodes} == {
        (i, ADVERTISED, p) for i, p in d.ports.items()
    }

    # A transactional producer and a group consumer, both reaching their coordinators
    # through what FindCoordinator answers.
    topic = f"adv-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": d.bootstrap(), "transactional.id": f"tx-{topic}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"v", b"k")
    producer.commit_transaction(60)
    group = f"g-{topic}"
    consumer = Consumer(
        {
            "bootstrap.servers": d.bootstrap(),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        msg = wait_for(lambda: consumer.poll(0.5), "the record", timeout=60)
        assert msg.error() is None and msg.value() == b"v"
        consumer.commit(asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=15)
        assert committed.offset == 1
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.coordinator.host == ADVERTISED
        assert described.coordinator.port == d.ports[described.coordinator.id]
    finally:
        consumer.close()

    for broker_id in d.ports:
        for key_type, key in ((0, group), (1, f"tx-{topic}")):
            for answer in coordinators(d, broker_id, key_type, key):
                assert (answer.host, answer.port) == (ADVERTISED, d.ports[answer.node_id])


# -- DeleteTopics -------------------------------------------------------------------------


@pytest.mark.parametrize("with_invalid_name", [False, True], ids=["alone", "with-invalid"])
def test_no_broker_lists_a_deleted_topic(deployment: Deployment, with_invalid_name: bool) -> None:
    d = deployment
    admin = AdminClient({"bootstrap.servers": d.bootstrap()})
    topic = f"del-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 6, min(2, len(d.ports)))])[topic].result(30)
    for broker_id in d.ports:
        wait_for(
            lambda b=broker_id: listed_topics(d, b).get(topic) == 6,
            f"broker {broker_id} to list {topic}",
        )
    invalid = "not a valid name!"
    names = [topic, invalid] if with_invalid_name else [topic]
    futures = admin.delete_topics(names, operation_timeout=30)
    started = time.monotonic()
    futures[topic].result(60)
    took = time.monotonic() - started
    if with_invalid_name:
        with pytest.raises(KafkaException) as refused:
            futures[invalid].result(60)
        assert refused.value.args[0].code() == UNKNOWN_TOPIC_OR_PARTITION
    for broker_id in d.ports:
        assert topic not in listed_topics(d, broker_id), f"broker {broker_id} lists {topic}"
        assert topic_metadata(d, broker_id, topic, False).error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert took < 10, f"DeleteTopics took {took:.1f}s"


# -- Metadata with allow_auto_topic_creation ----------------------------------------------


def test_metadata_creates_a_topic_only_when_allowed(deployment: Deployment) -> None:
    d = deployment
    first = min(d.ports)
    refused = f"noauto-{uuid.uuid4().hex[:8]}"
    assert topic_metadata(d, first, refused, False).error_code == UNKNOWN_TOPIC_OR_PARTITION

    created = f"auto-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    answer = topic_metadata(d, first, created, True)
    # Kafka creates the topic in the background and says so; a leader may already exist.
    assert answer.error_code in (0, LEADER_NOT_AVAILABLE), answer
    if answer.error_code == LEADER_NOT_AVAILABLE:
        assert answer.partitions == []

    def led_everywhere() -> bool:
        for broker_id in d.ports:
            t = topic_metadata(d, broker_id, created, False)
            if t.error_code != 0 or len(t.partitions) != 3:
                return False
            if any(p.error_code != 0 or p.leader_id not in d.ports for p in t.partitions):
                return False
        return True

    wait_for(led_everywhere, f"every broker to name {created}'s leaders", timeout=15, interval=0.1)
    assert time.monotonic() - started < 10
    # The refused name was never created.
    for broker_id in d.ports:
        assert refused not in listed_topics(d, broker_id)
