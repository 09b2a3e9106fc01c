"""kbroker brokers and an Apache Kafka 3.9.1 broker in one cluster, each kind as controller.

The wire between brokers and the ZooKeeper layout are Kafka's, so a Kafka 3.9.1
broker can join a kbroker cluster: two ``kbroker serve`` processes and one Kafka
broker on one chroot. First a kbroker is the controller and drives the Kafka
broker; then both kbrokers are killed, Kafka's controller takes over, and the
kbrokers, restarted, obey it. Each time a topic is created through one kind of
broker, spread over all three, written through another and read back by a
consumer group (whose coordinator is wherever its ``__consumer_offsets``
partition landed). Every partition has a replica on each of the three brokers and
takes acks=all writes with ``min.insync.replicas`` 3: each kind follows leaders
of the other (Kafka's follower fetching from a kbroker leader, and the reverse). Under the kbroker
controller, the Kafka broker gets its producer ids from it (AllocateProducerIds).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import UpdateFeaturesRequest
from kbroker.protocol.messages.core import ApiVersionsRequest, InitProducerIdRequest
from kbroker.tools.client import BrokerClient
from tests.cluster.kafka_zk import prepare_kafka_zk_broker
from tests.cluster.nodes import SESSION_TIMEOUT_MS, Cluster, KafkaNode, KbrokerNode, Node
from tests.cluster.test_cluster_mode import partition_leaders
from tests.cluster.test_inter_broker_wire import ALLOCATION_ANSWERS, allocation_answers
from tests.helpers import knows_controller, produce, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def round_trip(write_via: str, read_via: str, create_via: str, label: str) -> None:
    wait_for(lambda: knows_controller(create_via), f"{create_via} to know the controller")
    topic = f"mixed-{label}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": create_via})
    new = NewTopic(topic, 6, 3, config={"min.insync.replicas": "3"})
    admin.create_topics([new], operation_timeout=30)[topic].result(60)
    leaders = wait_for(
        lambda: (
            (found := partition_leaders(read_via, topic)) and -1 not in found.values() and found
        ),
        f"leaders of {topic}",
        timeout=30,
    )
    assert set(leaders.values()) == {1, 2, 3}, leaders
    # Acknowledged only once all three replicas, of both kinds, have each record.
    reports = produce(
        write_via, topic, [(None, f"{label}-{i}".encode()) for i in range(300)], acks="all"
    )
    assert all(err is None for err, _ in reports), {str(err) for err, _ in reports}
    consumer = Consumer(
        {
            "bootstrap.servers": read_via,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < 300 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
    finally:
        consumer.close()
    assert seen == {f"{label}-{i}".encode() for i in range(300)}


def kafka_gets_producer_ids_from(cluster: Cluster, kafka_id: int) -> None:
    """The Kafka broker asks the kbroker controller for its producer ids (AllocateProducerIds,
    as Kafka 3.x brokers do): an idempotent producer's InitProducerId to it is answered with
    an id of a block reserved for it in /latest_producer_id_block, and the controller answers
    AllocateProducerIds as Kafka's controller does."""
    kafka = cluster.nodes[kafka_id].bootstrap

    def init_producer_id() -> Any:
        with BrokerClient(kafka, timeout=10) as c:
            resp = c.request(
                ApiKey.INIT_PRODUCER_ID,
                4,
                InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1),
            )
        # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its block came.
        return resp if resp.error_code == ErrorCode.NONE else None

    resp = wait_for(init_producer_id, "a producer id from the Kafka broker", timeout=30)
    zk = cluster.zk()
    try:
        block = json.loads(zk.get("/latest_producer_id_block")[0])
        epoch = zk.get(f"/brokers/ids/{kafka_id}")[1].czxid
    finally:
        zk.stop()
        zk.close()
    assert block["broker"] == kafka_id, block
    assert int(block["block_start"]) <= resp.producer_id <= int(block["block_end"]), block
    controller = cluster.nodes[cluster.controller_id() or -1].bootstrap
    assert allocation_answers(controller, kafka_id, epoch) == ALLOCATION_ANSWERS


def kafka_keeps_features_off(cluster: Cluster, kbrokers: tuple[str, ...]) -> None:
    """A Kafka 3.9.1 broker supports no feature (it would not start with group.version
    finalized: the cluster's /feature is Kafka's, see kafka_zk.finalize_nothing): the kbrokers
    follow it, and the kbroker controller refuses to finalize group.version while the Kafka
    broker is live."""
    for bootstrap in kbrokers:
        wait_for(
            lambda bootstrap=bootstrap: not finalized_levels(bootstrap),
            f"{bootstrap} to follow /feature",
        )
    controller = cluster.nodes[cluster.controller_id() or -1].bootstrap
    update = UpdateFeaturesRequest.FeatureUpdate(
        feature="group.version", max_version_level=1, upgrade_type=1
    )
    with BrokerClient(controller) as client:
        r = client.request(
            ApiKey.UPDATE_FEATURES,
            1,
            UpdateFeaturesRequest(timeout_ms=10000, feature_updates=[update], validate_only=False),
        )
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_UPDATE_VERSION,
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 1 for feature group.version. Broker 3 does not support this "
        "feature.",
    )


def finalized_levels(bootstrap: str) -> dict[str, int]:
    with BrokerClient(bootstrap) as client:
        r = client.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    return {f.name: f.max_version_level for f in r.finalized_features}


def test_kafka_broker_in_a_kbroker_cluster_and_the_other_way(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/mixed-{uuid.uuid4().hex[:8]}"
    connect = zookeeper.connect + chroot
    settings = [
        f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "offsets.topic.replication.factor=1",
        "group.initial.rebalance.delay.ms=0",
    ]
    nodes: dict[int, Node] = {
        1: KbrokerNode(1, connect, tmp_path / "b1", settings),
        2: KbrokerNode(2, connect, tmp_path / "b2", settings),
    }
    try:
        for node in nodes.values():
            node.launch()
        for node in nodes.values():
            node.wait_started()
        kafka = KafkaNode(
            prepare_kafka_zk_broker(
                zookeeper.connect,
                chroot,
                tmp_path / "k3",
                3,
                {
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "auto.create.topics.enable": "true",
                },
            )
        )
        nodes[3] = kafka
        kafka.launch()
        kafka.wait_started()
        cluster = Cluster("mixed", connect, nodes)
        assert cluster.controller_id() in (1, 2)
        b1, b2, k3 = (nodes[i].bootstrap for i in (1, 2, 3))
        # A kbroker controls: the topic is created through Kafka, written through a
        # kbroker, read through Kafka.
        round_trip(b1, k3, k3, "kbroker-controls")
        kafka_gets_producer_ids_from(cluster, 3)
        kafka_keeps_features_off(cluster, (b1, b2))

        # Kafka takes over when both kbrokers die, and they obey it when back.
        nodes[1].kill()
        nodes[2].kill()
        wait_for(
            lambda: cluster.controller_id() == 3,
            "Kafka's controller",
            timeout=SESSION_TIMEOUT_MS / 1000 + 20,
        )
        nodes[1].restart()
        nodes[2].restart()
        round_trip(k3, b2, b1, "kafka-controls")
        for i in (1, 2):
            assert "Traceback" not in nodes[i].output()
    finally:
        for node in nodes.values():
            node.kill()
