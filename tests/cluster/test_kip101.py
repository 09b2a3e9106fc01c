"""The two KIP-101 scenarios, driven deterministically on real broker processes.

Each runs against Apache Kafka 3.9.1 in ZooKeeper mode first (the reference)
and then against kbroker, on three brokers with a topic of replication factor
2 on brokers 1 (leader) and 2:

1. *A restarted follower keeps committed records.* The follower is killed
   (kill -9) right after an acks=all write, with a high-watermark checkpoint
   older than the write (the checkpoint interval is long), and restarted.
   Truncating to the checkpointed high watermark (the rule KIP-101 replaced)
   would cut the committed records and fetch them again; agreeing on leader
   epochs with the leader leaves its log file untouched: same bytes, never
   written again. Then the leader dies, the follower leads, and every
   acknowledged record is there.
2. *Replicas do not diverge.* Both replicas hold m1, m2 (acks=all); the
   leader is killed, the follower takes over and is killed too, and loses m2
   from its disk before it restarts (a write it acknowledged but had not
   flushed: cut from its segment file, as a power failure would). Back first,
   it leads and takes m3 at m2's offset. The old leader then returns with
   m2 still at that offset and a checkpointed high watermark above it: by
   the old rule it would keep m2 and the replicas would differ there for
   good; by leader epochs it truncates m2 and fetches m3. Afterwards both
   logs are byte-identical below the high watermark.

And a third, on three replicas: *a leader that wrote nothing rejoins.* Broker 2
becomes leader (broker 1 killed) and loses the leadership (paused past its
session) before it writes anything, so only its own epoch cache knows its epoch,
starting at its log end. Broker 3, which never saw that epoch, leads and takes
writes; when broker 2 comes back it must drop its empty epoch (truncating at its
log end removes no record, but that epoch must go, as Kafka's truncateTo does)
or every fetch is answered with the same divergence and it never catches up.

Select with ``-m kafka`` (the reference needs Kafka's jars: bench/kafka/fetch.sh).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.nodes import SYSTEMS, Cluster, fresh_cluster
from tests.cluster.partition_zero import batches, log_bytes, read, segment_file, state, write
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

LEADER, FOLLOWER = 1, 2
# Longer than any test: the follower's checkpointed high watermark stays behind.
SETTINGS = {
    "replica.high.watermark.checkpoint.interval.ms": "600000",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "false",
}


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    with fresh_cluster(request.param, zookeeper.connect, "kip101", tmp_path, SETTINGS) as c:
        yield c


def create(c: Cluster, topic: str, replicas: tuple[int, ...] = (LEADER, FOLLOWER)) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    new = NewTopic(
        topic,
        num_partitions=1,
        replica_assignment=[list(replicas)],
        config={"min.insync.replicas": "1"},
    )
    admin.create_topics([new], operation_timeout=30)[topic].result(60)
    wait_for(lambda: state(c, topic) == (replicas[0], sorted(replicas)), "every replica in sync")


def fingerprint(path: Path) -> tuple[int, int, str]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def test_restarted_follower_keeps_committed_records(brokers: Cluster) -> None:
    c = brokers
    topic = f"kip101-keep-{uuid.uuid4().hex[:6]}"
    create(c, topic)
    values = [f"m{i}".encode() for i in range(200)]
    offsets = write(c, topic, values)
    assert offsets == list(range(200))
    follower_file = segment_file(c, FOLLOWER, topic)
    wait_for(
        lambda: (
            len(batches(c, FOLLOWER, topic, 200)) > 0
            and log_bytes(c, FOLLOWER, topic) == log_bytes(c, LEADER, topic)
        ),
        "the follower has every record",
    )
    before = fingerprint(follower_file)
    c.nodes[FOLLOWER].kill()
    wait_for(lambda: state(c, topic) == (LEADER, [LEADER]), "the follower out of the ISR", 30)
    c.nodes[FOLLOWER].restart()
    wait_for(lambda: state(c, topic) == (LEADER, [LEADER, FOLLOWER]), "the follower back", 60)
    # Not truncated and fetched again: the file was never written since.
    assert fingerprint(follower_file) == before
    # The follower leads now; it has every acknowledged record.
    c.nodes[LEADER].kill()
    wait_for(lambda: state(c, topic)[0] == FOLLOWER, "the follower leading", 30)
    assert read(c, topic, 200) == list(zip(range(200), values, strict=True))


def test_replicas_do_not_diverge(brokers: Cluster) -> None:
    c = brokers
    topic = f"kip101-diverge-{uuid.uuid4().hex[:6]}"
    create(c, topic)
    assert write(c, topic, [b"m1"]) == [0]
    assert write(c, topic, [b"m2"]) == [1]
    follower_file = segment_file(c, FOLLOWER, topic)
    wait_for(lambda: len(batches(c, FOLLOWER, topic, 2)) == 2, "the follower has m1 and m2")
    # The leader's high watermark reaches its checkpoint before it dies (a clean stop
    # writes it): it would keep m2 by the old rule.
    assert c.nodes[LEADER].terminate() in (0, 143)
    wait_for(lambda: state(c, topic) == (FOLLOWER, [FOLLOWER]), "the follower leading", 30)
    c.nodes[FOLLOWER].kill()
    wait_for(lambda: state(c, topic)[0] == -1, "the partition offline", 30)
    # The follower loses m2, as unflushed data is lost in a power failure.
    first = batches(c, FOLLOWER, topic, 1)
    assert len(first) == 1
    os.truncate(follower_file, len(first[0]))
    c.nodes[FOLLOWER].restart()
    wait_for(lambda: state(c, topic) == (FOLLOWER, [FOLLOWER]), "the follower leading again", 30)
    assert write(c, topic, [b"m3"]) == [1]
    c.nodes[LEADER].restart()
    wait_for(lambda: state(c, topic) == (FOLLOWER, [LEADER, FOLLOWER]), "the old leader back", 60)
    assert read(c, topic, 2) == [(0, b"m1"), (1, b"m3")]
    assert batches(c, LEADER, topic, 2) == batches(c, FOLLOWER, topic, 2)
    assert len(batches(c, LEADER, topic, 2)) == 2


def test_a_leader_that_wrote_nothing_rejoins(brokers: Cluster) -> None:
    c = brokers
    topic = f"kip101-empty-{uuid.uuid4().hex[:6]}"
    create(c, topic, (1, 2, 3))
    assert write(c, topic, [f"m{i}".encode() for i in range(10)]) == list(range(10))
    c.nodes[1].kill()
    wait_for(lambda: state(c, topic) == (2, [2, 3]), "broker 2 leading", 30)
    # Broker 2 stops before it takes a write; broker 3 leads in a later epoch.
    c.nodes[2].pause()
    try:
        wait_for(lambda: state(c, topic) == (3, [3]), "broker 3 leading alone", 30)
        assert write(c, topic, [f"n{i}".encode() for i in range(10)]) == list(range(10, 20))
    finally:
        c.nodes[2].resume()
    wait_for(lambda: state(c, topic) == (3, [2, 3]), "broker 2 back in the ISR", 60)
    c.nodes[3].kill()  # broker 2 leads, with every record
    wait_for(lambda: state(c, topic)[0] == 2, "broker 2 leading", 30)
    expected = [f"m{i}".encode() for i in range(10)] + [f"n{i}".encode() for i in range(10)]
    assert read(c, topic, 20) == list(enumerate(expected))
