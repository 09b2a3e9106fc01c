"""A consumer group of the consumer group protocol (KIP-848) through kill -9 of its
coordinator, on a 3-broker kbroker cluster with a real ZooKeeper.

Two librdkafka consumers (``group.protocol=consumer``) share a replicated topic and
commit what they processed; the broker that coordinates their group is killed -9
half-way. The group's state is in ``__consumer_offsets`` (replication factor 3), so the
next leader of its partition loads it and the members go on heartbeating to it: every
record is consumed (at least once), the committed offsets reach the end of every
partition, and the group ends Stable with both members again.

Apache Kafka 3.9.1 in ZooKeeper mode, the reference of the other cluster tests, has no
KIP-848 (only KRaft-mode Kafka has it), so this test runs on kbroker alone.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.nodes import Cluster, fresh_cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(300)

RECORDS = 3000
PARTITIONS = 6
SETTINGS = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    # Members that lose their coordinator must not be dropped while it moves.
    "group.consumer.session.timeout.ms": "45000",
}


def _coordinator(admin: AdminClient, group: str) -> int:
    described = admin.describe_consumer_groups([group])[group].result(30)
    return int(described.coordinator.id)


def _consume_until(consumers: list[Consumer], seen: set[bytes], want: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        for c in consumers:
            msgs = c.consume(100, 0.2)
            for m in msgs:
                if m.error() is None:
                    seen.add(m.value())
            if msgs:
                # No coordinator for a moment: the next commit covers it.
                with contextlib.suppress(KafkaException):
                    c.commit(asynchronous=False)


def test_a_consumer_group_survives_kill_9_of_its_coordinator(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with fresh_cluster("kbroker", zookeeper.connect, "kip848", tmp_path, SETTINGS) as c:
        _run(c)


def _run(c: Cluster) -> None:
    admin = AdminClient(c.client())
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    producer = Producer(c.client(acks="all", **{"enable.idempotence": True}))
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(60) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = c.client(
        **{
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumers = [Consumer(conf), Consumer(conf)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        seen: set[bytes] = set()
        _consume_until(consumers, seen, RECORDS // 2, 60)
        assert len(seen) >= RECORDS // 2, f"only {len(seen)} records before the kill"
        victim = _coordinator(admin, group)
        c.nodes[victim].kill()
        survivors = c.live_bootstrap()
        admin = AdminClient(c.client(survivors))
        _consume_until(consumers, seen, RECORDS, 120)
        assert seen == {str(i).encode() for i in range(RECORDS)}
        # Everything processed is committed, through the new coordinator.
        deadline = time.monotonic() + 60
        while True:
            for consumer in consumers:
                consumer.consume(100, 0.2)
                with contextlib.suppress(KafkaException):
                    consumer.commit(asynchronous=False)
            committed = consumers[0].committed(
                [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
            )
            ends = [
                consumers[0].get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)
            ]
            if [tp.offset for tp in committed] == ends:
                break
            assert time.monotonic() < deadline, f"committed {committed}, ends {ends}"
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert int(described.coordinator.id) != victim
        assert len(described.members) == 2
        owned = sorted(
            tp.partition for m in described.members for tp in m.assignment.topic_partitions
        )
        assert owned == list(range(PARTITIONS))
    finally:
        for consumer in consumers:
            consumer.close()
