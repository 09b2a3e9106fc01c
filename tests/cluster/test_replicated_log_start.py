"""DeleteRecords on a replicated partition moves the log start on every in-sync replica.

Against Apache Kafka 3.9.1 in ZooKeeper mode first (the reference), then kbroker:
three brokers, a topic of replication factor 3. DeleteRecords through the
AdminClient answers once every in-sync replica has dropped the records (its
low watermark is the new log start); then the leader is killed, and the new
leader's log starts at the same offset: a consumer from the beginning reads
from there, and nothing deleted comes back.

Select with ``-m kafka`` (the reference needs Kafka's jars: bench/kafka/fetch.sh).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.cluster.nodes import SYSTEMS, Cluster, cluster
from tests.helpers import consume_all, produce, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    chroot = f"/logstart-{uuid.uuid4().hex[:8]}"
    with cluster(request.param, zookeeper.connect, chroot, tmp_path) as c:
        yield c


def leader_and_isr(admin: AdminClient, topic: str) -> tuple[int, list[int]]:
    p = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
    if p is None:  # the answering broker does not know the new topic yet
        return -1, []
    return p.leader, sorted(p.isrs)


def test_delete_records_moves_every_replicas_log_start(brokers: Cluster) -> None:
    c = brokers
    topic = f"logstart-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(60)
    wait_for(lambda: leader_and_isr(admin, topic)[1] == [1, 2, 3], "a full ISR")
    reports = produce(
        c.bootstrap, topic, [(None, f"v{i}".encode()) for i in range(100)], acks="all"
    )
    assert all(err is None for err, _ in reports)

    deleted = admin.delete_records([TopicPartition(topic, 0, 60)], operation_timeout=30)
    low = next(iter(deleted.values())).result(60)
    assert low.low_watermark == 60

    leader, _ = leader_and_isr(admin, topic)
    c.nodes[leader].kill()
    live = AdminClient({"bootstrap.servers": c.live_bootstrap()})
    wait_for(lambda: leader_and_isr(live, topic)[0] not in (-1, leader), "a new leader", 30)
    earliest = live.list_offsets({TP(topic, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(30).offset == 60
    got = consume_all(c.live_bootstrap(), topic, 1, expected=40, timeout=30)
    assert [(m.offset(), m.value()) for m in got] == [(i, f"v{i}".encode()) for i in range(60, 100)]
