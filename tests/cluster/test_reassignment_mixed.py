"""Partition reassignment across the two implementations: kbroker's controller moving
replicas of Apache Kafka 3.9.1 brokers, and Kafka's controller moving replicas of kbroker
brokers. Each side follows the other's orders only through Kafka's ZooKeeper layout and
inter-broker requests (LeaderAndIsr with adding and removing replicas, StopReplica with
deletion, UpdateMetadata), so these check the wire as much as the logic:

- our controller (a kbroker broker in this process, id 100, holding no replica) and
  Kafka brokers 1, 2, 3: a partition on [1, 2] moves to [2, 3] while an acks=all
  producer writes (not idempotent: Kafka 3.9 brokers would ask the controller for
  producer ids, AllocateProducerIds, which kbroker does not answer yet); Kafka broker 3
  copies it, broker 1 deletes its copy;
- a Kafka broker (id 1, the controller) and kbroker brokers 2, 3, 4: a partition on
  [2, 3] moves to [4, 3] while an idempotent acks=all producer writes; Kafka's
  controller elects kbroker broker 4
  (the first target replica, in the ISR once caught up) and has kbroker broker 2 stop
  and delete its replica.

Every acknowledged record is read back at its offset (once, from the idempotent
producer). Select with ``-m kafka``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from tests.cluster.controllers import OUR_ID, ControllerBroker
from tests.cluster.kafka_zk import kafka_zk_broker, prepare_kafka_zk_broker, require_kafka
from tests.cluster.nodes import SESSION_TIMEOUT_MS, KafkaNode, KbrokerNode, Node
from tests.cluster.test_reassignment import (
    AckedProducer,
    create_topic,
    has_replica,
    leaders,
    partitions,
    read_partition,
)
from tests.helpers import knows_controller, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

KAFKA_SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "log.segment.delete.delay.ms": "1000",
}


def reassign_and_finish(bootstrap: str, topic: str, target: list[int]) -> None:
    """Moves ``topic``-0 to ``target`` (kafka-python, to the controller), then waits until
    the controller lists nothing in progress and clients see the target replicas in sync."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        tp = KTP(topic, 0)
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}

        def done() -> bool:
            part = partitions(bootstrap, topic).get(0)
            return (
                part is not None
                and (part.replicas, sorted(part.isrs)) == (target, sorted(target))
                and admin.list_partition_reassignments() == {}
            )

        wait_for(done, f"{topic}-0 to move to {target}", timeout=90, interval=0.5)
    finally:
        admin.close()


def move_while_writing(
    bootstrap: str, topic: str, target: list[int], idempotent: bool = True
) -> AckedProducer:
    producer = AckedProducer(bootstrap, topic, idempotent=idempotent)
    producer.start()
    try:
        wait_for(lambda: len(producer.acked) >= 3000, "3000 records written", timeout=60)
        reassign_and_finish(bootstrap, topic, target)
        written = len(producer.acked)
        wait_for(lambda: len(producer.acked) >= written + 300, "more records written", 30)
    finally:
        producer.stop()
    return producer


def check_read_back(bootstrap: str, topic: str, producer: AckedProducer) -> None:
    """Every acknowledged record at its offset; none twice if the producer is idempotent
    (a plain one may write a record again when an answer is lost)."""
    assert producer.failed == []
    records = read_partition(bootstrap, topic, 0)
    assert [o for o, _ in records] == list(range(len(records)))
    at = dict(records)
    assert {v: o for v, o in producer.acked.items() if at.get(o) != v} == {}
    values = [v for _, v in records]
    if producer.idempotent:
        assert len(set(values)) == len(values)


@pytest.fixture
def chroot(zookeeper: ZooKeeperServer) -> str:
    require_kafka()
    return f"/reassign-mixed-{uuid.uuid4().hex[:8]}"


def test_our_controller_moves_kafka_replicas(
    zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    ours = ControllerBroker(zookeeper.connect + chroot, tmp_path / "ours")
    try:
        ours.start()
        with contextlib.ExitStack() as stack:
            kafka = {
                i: stack.enter_context(
                    kafka_zk_broker(
                        zookeeper.connect, chroot, tmp_path / f"b{i}", i, settings=KAFKA_SETTINGS
                    )
                )
                for i in (1, 2, 3)
            }
            bootstrap = ",".join(b.bootstrap for b in kafka.values())
            # A broker that does not know the controller yet makes librdkafka's
            # CreateTopics wait for its next metadata refresh, past the timeout.
            for b in kafka.values():
                wait_for(lambda b=b: knows_controller(b.bootstrap), "Kafka to know our controller")
            create_topic(bootstrap, "k", [[1, 2]], min_isr=2)
            wait_for(lambda: leaders(bootstrap, "k") == [1], "Kafka broker 1 to lead")
            # (Not idempotent: Kafka 3.9 brokers get producer ids from the controller by
            # AllocateProducerIds, which a kbroker controller does not answer yet.)
            producer = move_while_writing(bootstrap, "k", [2, 3], idempotent=False)
            assert ours.controller is not None and ours.controller.ctx.controller_id == OUR_ID
            logs = {i: b.log.parent / "logs" for i, b in kafka.items()}
            wait_for(lambda: not (logs[1] / "k-0").exists(), "Kafka broker 1 to drop its copy")
            assert (logs[3] / "k-0").is_dir()
            check_read_back(bootstrap, "k", producer)
    finally:
        ours.close()


@pytest.fixture
def kafka_led(zookeeper: ZooKeeperServer, chroot: str, tmp_path: Path) -> Iterator[dict[int, Node]]:
    """Kafka broker 1, started first (so it is the controller), and kbroker brokers 2-4."""
    nodes: dict[int, Node] = {}
    with contextlib.ExitStack() as stack:
        nodes[1] = KafkaNode(
            prepare_kafka_zk_broker(zookeeper.connect, chroot, tmp_path / "b1", 1, KAFKA_SETTINGS)
        )
        stack.callback(nodes[1].kill)
        nodes[1].launch()
        nodes[1].wait_started()
        for i in (2, 3, 4):
            nodes[i] = KbrokerNode(
                i,
                zookeeper.connect + chroot,
                tmp_path / f"b{i}",
                [
                    f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
                    "offsets.topic.replication.factor=1",
                    "group.initial.rebalance.delay.ms=0",
                ],
            )
            stack.callback(nodes[i].kill)
            nodes[i].launch()
        for node in nodes.values():
            node.wait_started()
            node.wait_knows_controller()
        yield nodes


def test_kafkas_controller_moves_kbroker_replicas(kafka_led: dict[int, Node]) -> None:
    nodes = kafka_led
    bootstrap = ",".join(n.bootstrap for n in nodes.values())
    create_topic(bootstrap, "kb", [[2, 3]], min_isr=2)
    wait_for(lambda: leaders(bootstrap, "kb") == [2], "kbroker broker 2 to lead")
    producer = move_while_writing(bootstrap, "kb", [4, 3])
    # Kafka's reassignment election: the first target replica in the ISR leads.
    assert leaders(bootstrap, "kb") == [4]
    wait_for(lambda: not has_replica(nodes[2], "kb", 0), "kbroker broker 2 to delete its copy")
    assert has_replica(nodes[4], "kb", 0)
    check_read_back(bootstrap, "kb", producer)
