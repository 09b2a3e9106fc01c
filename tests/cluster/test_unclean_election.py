"""What unclean leader election costs, shown on purpose on real broker processes.

Kafka 3.9.1 in ZooKeeper mode first (the reference), then kbroker; three brokers,
a topic of replication factor 2 on brokers 1 (leader) and 2 with
``unclean.leader.election.enable=true`` and ``min.insync.replicas=1`` as topic
configs (the brokers keep unclean election off):

The follower is killed, so the ISR shrinks to the leader, which goes on
acknowledging acks=all writes alone. The leader is killed too, and the follower,
out of sync, comes back first: with unclean election allowed it is elected, and
the records it never had are gone, though every one was acknowledged to an
acks=all producer. Their offsets go to the next records. When the old leader
returns it cuts those records from its log and copies the new ones: afterwards
both replicas hold the same bytes, the lost records in neither. kbroker's
controller logs the election and counts it.

The fault harness (``python -m bench.faults --unclean``) brings one fault at a
time, which never leaves a partition with no in-sync replica alive, so it never
sees this loss; it takes two failures together, as here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.nodes import SYSTEMS, Cluster, fresh_cluster
from tests.cluster.partition_zero import batches, log_bytes, read, state, write
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

LEADER, FOLLOWER = 1, 2
SETTINGS = {
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "false",
}


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    with fresh_cluster(request.param, zookeeper.connect, "unclean", tmp_path, SETTINGS) as c:
        yield c


def test_an_unclean_election_loses_acknowledged_records(brokers: Cluster) -> None:
    c = brokers
    topic = f"unclean-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    new = NewTopic(
        topic,
        num_partitions=1,
        replica_assignment=[[LEADER, FOLLOWER]],
        config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
    )
    admin.create_topics([new], operation_timeout=30)[topic].result(60)
    wait_for(lambda: state(c, topic) == (LEADER, [LEADER, FOLLOWER]), "both replicas in sync")

    kept = [f"m{i}".encode() for i in range(10)]
    assert write(c, topic, kept) == list(range(10))
    wait_for(lambda: len(batches(c, FOLLOWER, topic, 10)) > 0, "the follower has m0-m9")
    wait_for(
        lambda: log_bytes(c, FOLLOWER, topic) == log_bytes(c, LEADER, topic),
        "the follower has every byte",
    )
    c.nodes[FOLLOWER].kill()
    wait_for(lambda: state(c, topic) == (LEADER, [LEADER]), "the follower out of the ISR", 30)
    lost = [f"n{i}".encode() for i in range(10)]
    assert write(c, topic, lost) == list(range(10, 20))  # acks=all, the ISR being the leader

    c.nodes[LEADER].kill()
    wait_for(lambda: state(c, topic)[0] == -1, "the partition offline", 30)
    c.nodes[FOLLOWER].restart()
    wait_for(lambda: state(c, topic) == (FOLLOWER, [FOLLOWER]), "the follower elected", 60)

    # n0-n9 were acknowledged and are gone; their offsets go to the next records.
    assert read(c, topic, 10) == list(enumerate(kept))
    after = [f"p{i}".encode() for i in range(5)]
    assert write(c, topic, after) == list(range(10, 15))

    c.nodes[LEADER].restart()
    wait_for(lambda: state(c, topic) == (FOLLOWER, [LEADER, FOLLOWER]), "the old leader back", 60)
    expected = list(enumerate(kept + after))
    assert read(c, topic, 15) == expected
    wait_for(
        lambda: batches(c, LEADER, topic, 15) == batches(c, FOLLOWER, topic, 15),
        "the old leader's log the same as the new leader's",
    )
    assert not any(b"n0" in b for b in batches(c, LEADER, topic, 15))
    if c.system == "kbroker":
        logs = "\n".join(n.output() for n in c.nodes.values())
        assert f"unclean election of broker {FOLLOWER}" in logs, c.outputs()
