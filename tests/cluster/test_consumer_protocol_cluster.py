"""A KIP-848 consumer group (group.protocol=consumer) through its coordinator's kill -9, on
three nodes: Apache Kafka 4.1.1 in KRaft mode first (the reference: Kafka 3.9.1 in
ZooKeeper mode has no consumer group protocol), then three ``kbroker serve --zookeeper``.

A librdkafka member of the group reads a replicated topic and commits after every record.
A third of the way in, the broker coordinating the group (FindCoordinator: the leader of
the group's ``__consumer_offsets`` partition, replicated three times) is killed -9. The
member keeps consuming through the new coordinator: no record is lost, no record whose
offset was committed is delivered again, and the group ends committed at the end of every
partition. The coordinator's move and the time to the first commit after the kill are
printed (``-s``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker.transactions import coordinator
from tests.cluster.kafka_kraft import kraft_cluster
from tests.cluster.nodes import cluster
from tests.cluster.test_cluster_mode import create_topic
from tests.helpers import produce, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SETTINGS = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "3000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
PARTITIONS = 3
INPUTS = 90


@pytest.fixture(params=["kafka4", "kbroker"])
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[int, Any]]:
    """Three nodes of the system, by id: each with bootstrap, alive and kill()."""
    if request.param == "kafka4":
        with kraft_cluster(tmp_path, SETTINGS) as kraft:
            yield dict(kraft.nodes)
        return
    zookeeper = request.getfixturevalue("zookeeper")
    chroot = f"/kip848-{uuid.uuid4().hex[:8]}"
    kbroker_settings = [f"{k}={v}" for k, v in SETTINGS.items()]
    with cluster(
        "kbroker", zookeeper.connect, chroot, tmp_path, kbroker_settings=kbroker_settings
    ) as kbroker:
        yield dict(kbroker.nodes)


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    listed = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}


def commit(
    member: Consumer,
    topic: str,
    owed: dict[int, int],
    committed_to: dict[int, int],
    failed: list[str],
) -> dict[int, int]:
    """Commits ``owed`` (partition -> offset) synchronously: what is still owed after."""
    if not owed:
        return owed
    try:
        member.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in owed.items()], asynchronous=False
        )
    except KafkaException as exc:
        failed.append(str(exc.args[0]))
        return owed
    for p, o in owed.items():
        committed_to[p] = max(committed_to[p], o)
    return {}


def test_group_survives_its_coordinators_kill(nodes: dict[int, Any]) -> None:
    bootstraps = [n.bootstrap for n in nodes.values()]
    bootstrap = ",".join(bootstraps)
    topic, group = f"kip848-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS, rf=3)
    records = [(f"k{i}", f"v{i}", None, i % PARTITIONS) for i in range(INPUTS)]
    produce(bootstrap, topic, records, acks="all")
    ends = dict.fromkeys(range(PARTITIONS), INPUTS // PARTITIONS)
    _, group_node = wait_for(
        lambda: coordinator(bootstraps, group), "the group's coordinator", timeout=60
    )

    member = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    delivered: list[tuple[int, int]] = []
    committed_to = dict.fromkeys(range(PARTITIONS), 0)
    failed_commits: list[str] = []
    # Offsets to commit still (a commit the coordinator's death failed is made again).
    owed: dict[int, int] = {}
    killed_at: float | None = None
    resumed_after: float | None = None
    member.subscribe([topic])
    try:
        started = time.monotonic()
        while committed_to != ends:
            waited = time.monotonic() - started
            assert delivered or waited < 30, "no record in 30 s: the member has no assignment"
            assert waited < 120, (
                f"committed {committed_to} of {ends} in 120 s; failed commits: {failed_commits}"
            )
            msg = member.poll(0.2)
            if msg is None:
                owed = commit(member, topic, owed, committed_to, failed_commits)
                continue
            assert msg.error() is None, msg.error()
            partition, offset = msg.partition(), msg.offset()
            # Committed progress is never delivered again.
            assert offset >= committed_to[partition], (partition, offset, committed_to)
            delivered.append((partition, offset))
            owed[partition] = offset + 1
            owed = commit(member, topic, owed, committed_to, failed_commits)
            if killed_at is not None and resumed_after is None and not owed:
                resumed_after = time.monotonic() - killed_at
            if killed_at is None and len(delivered) == INPUTS // 3:
                nodes[group_node].kill()
                killed_at = time.monotonic()
        live = [n.bootstrap for n in nodes.values() if n.alive]
        _, new_node = wait_for(lambda: coordinator(live, group), "the new coordinator", 60)
        assert new_node != group_node
        print(
            f"\ncoordinator {group_node} killed; {new_node} coordinates the group; the first "
            f"commit after the kill succeeded in {resumed_after or 0:.1f} s; "
            f"{len(failed_commits)} commits failed ({sorted(set(failed_commits))}); "
            f"{len(delivered) - len(set(delivered))} records delivered twice"
        )
        assert sorted(set(delivered)) == sorted(
            (p, o) for p in range(PARTITIONS) for o in range(INPUTS // PARTITIONS)
        )
        assert group_offsets(",".join(live), group, topic) == ends
    finally:
        member.close()
