"""kbroker's controller shuts a real Apache Kafka 3.9.1 broker down cleanly and moves
leadership back to preferred replicas (ZooKeeper mode).

As in test_controller_drives_kafka, the brokers are real Kafka 3.9.1 brokers and the
controller is kbroker's, elected on the chroot before they start. Here it starts only
once they are registered, on partitions left as a previous controller might leave
them: led by a replica that is not the first, with every replica in sync. (Kafka
brokers report ISR growth with AlterPartition, which this in-process controller has
no listener for, so a broker killed and restarted would never be back in the ISR, and
no preferred election could pick it; test_controller_isr_changes runs the controller
inside a kbroker broker, which answers AlterPartition, for that.)

Scenario, with brokers 1 and 2:

- ElectLeaders (PREFERRED) moves ``back-0`` to broker 2, its first replica, and
  answers ELECTION_NOT_NEEDED and UNKNOWN_TOPIC_OR_PARTITION where Kafka does;
- ``/admin/preferred_replica_election`` naming ``back-1`` moves it too, and the
  znode is deleted;
- the leader rebalance check moves ``lean-0``, the only partition of broker 1's
  (first replica) that it does not lead;
- ControlledShutdown of broker 2 with an old epoch is STALE_BROKER_EPOCH, for an
  unknown broker BROKER_NOT_AVAILABLE; with its epoch, every replicated partition
  it leads moves to broker 1 and it leaves every ISR but those it is alone in;
  the answer is the replicated partition nobody else can lead (``stuck-0``, its
  other replica on a broker that never started), not the single-replica one
  (``solo-0``), as Kafka answers; clients see broker 1 lead and acks=all writes
  go through; broker 2 is elected nowhere afterwards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from kbroker.cluster import zk_data as zd
from kbroker.controller.controller import ControllerSettings
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ErrorCode
from kbroker.protocol.errors import KafkaError
from tests.cluster.controllers import (
    ControllerThread,
    chroot_client,
    kafka_brokers,
    leader_of,
    produce,
    state_of,
)
from tests.cluster.kafka_zk import KafkaZkBroker
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

# topic -> partition -> (replicas, (leader, ISR) left by a "previous controller" or None)
TOPICS: dict[str, dict[int, tuple[list[int], tuple[int, list[int]] | None]]] = {
    "back": {0: ([2, 1], (1, [1, 2])), 1: ([2, 1], (1, [1, 2]))},
    "lean": {0: ([1, 2], (2, [2, 1]))},
    "both": {0: ([2, 1], None), 1: ([1, 2], None)},
    "solo": {0: ([2], None)},
    "stuck": {0: ([2, 3], None)},  # broker 3 never starts
}


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def write_topics(zk: KazooClient, controller_epoch: int) -> None:
    for name, partitions in TOPICS.items():
        assignment = zd.TopicAssignment.of(
            {p: replicas for p, (replicas, _) in partitions.items()}, uuid.uuid4()
        )
        zk.create(zd.topic_path(name), zd.encode_topic_assignment(assignment), makepath=True)
        for p, (replicas, led) in partitions.items():
            if led is not None:
                state = PartitionState(replicas, led[0], 0, led[1], controller_epoch)
                data = zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(state))
                zk.create(zd.partition_state_path(name, p), data, makepath=True)


def code(error: KafkaError | None) -> ErrorCode:
    return ErrorCode.NONE if error is None else error.code


@pytest.fixture
def cluster(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[tuple[ControllerThread, list[KafkaZkBroker], KazooClient]]:
    with chroot_client(zookeeper.connect, "duties") as (chroot, zk):
        ours = ControllerThread(zookeeper.connect + chroot)
        try:
            # The periodic check is asked for by hand below, not left to a timer.
            epoch = ours.elect(ControllerSettings(auto_leader_rebalance=False))
            with kafka_brokers(
                zookeeper.connect,
                chroot,
                tmp_path,
                lambda _i: {"zookeeper.session.timeout.ms": "6000"},
            ) as brokers:
                write_topics(zk, epoch)
                assert ours.controller is not None
                ours.call(ours.controller.start())
                yield ours, brokers, zk
        finally:
            ours.close()


def test_preferred_elections_and_controlled_shutdown(
    cluster: tuple[ControllerThread, list[KafkaZkBroker], KazooClient],
) -> None:
    ours, (b1, b2), zk = cluster
    controller = ours.controller
    assert controller is not None
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    started = time.monotonic()

    def leaders() -> dict[TopicPartition, int]:
        return {tp(n, p): leader_of(admin, n, p) for n, parts in TOPICS.items() for p in parts}

    first = {
        tp("back", 0): 1,  # as left
        tp("back", 1): 1,
        tp("lean", 0): 2,
        tp("both", 0): 2,  # as created: the first replica
        tp("both", 1): 1,
        tp("solo", 0): 2,
        tp("stuck", 0): 2,
    }
    wait_for(lambda: leaders() == first, "every partition led, as left or created", timeout=30)

    # -- preferred elections ---------------------------------------------------------
    results = ours.call(
        controller.elect_preferred_leaders([tp("back", 0), tp("both", 0), tp("nope", 0)])
    )
    assert {k: code(v) for k, v in results.items()} == {
        tp("back", 0): ErrorCode.NONE,
        tp("both", 0): ErrorCode.ELECTION_NOT_NEEDED,
        tp("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    back0 = state_of(zk, "back", 0)
    assert (back0.leader, back0.leader_epoch, set(back0.isr)) == (2, 1, {1, 2})
    wait_for(lambda: leader_of(admin, "back", 0) == 2, "clients see broker 2 lead back-0", 20)
    assert produce(b1.bootstrap, "back", 0, 10, "a") == 10

    zk.create(
        zd.PREFERRED_REPLICA_ELECTION_PATH,
        zd.encode_preferred_replica_election([tp("back", 1)]),
        makepath=True,
    )
    wait_for(
        lambda: (
            state_of(zk, "back", 1).leader == 2
            and zk.exists(zd.PREFERRED_REPLICA_ELECTION_PATH) is None
        ),
        "back-1 elected from the znode, and the znode gone",
        timeout=20,
    )
    wait_for(lambda: leader_of(admin, "back", 1) == 2, "clients see broker 2 lead back-1", 20)

    assert ours.call(controller.rebalance_leaders()) == [tp("lean", 0)]
    wait_for(lambda: leader_of(admin, "lean", 0) == 1, "clients see broker 1 lead lean-0", 20)
    assert ours.call(controller.rebalance_leaders()) == []  # balanced now
    elections_s = time.monotonic() - started

    # -- controlled shutdown ----------------------------------------------------------
    epoch2 = zk.exists(zd.broker_path(2)).czxid
    with pytest.raises(KafkaError) as stale:
        ours.call(controller.controlled_shutdown(2, epoch2 - 1))
    assert stale.value.code is ErrorCode.STALE_BROKER_EPOCH
    with pytest.raises(KafkaError) as unknown:
        ours.call(controller.controlled_shutdown(7, 0))
    assert unknown.value.code is ErrorCode.BROKER_NOT_AVAILABLE
    assert state_of(zk, "back", 0).leader == 2  # nothing changed

    shutting = time.monotonic()
    assert ours.call(controller.controlled_shutdown(2, epoch2)) == {tp("stuck", 0)}
    states = {
        (n, p): (s.leader, s.isr)
        for n, parts in TOPICS.items()
        for p in parts
        for s in [state_of(zk, n, p)]
    }
    assert states == {
        ("back", 0): (1, (1,)),  # led by 2: moved
        ("back", 1): (1, (1,)),
        ("both", 0): (1, (1,)),
        ("lean", 0): (1, (1,)),  # followed by 2: out of the ISR
        ("both", 1): (1, (1,)),
        ("solo", 0): (2, (2,)),  # one replica: untouched, not in the answer
        ("stuck", 0): (2, (2,)),  # nobody else in sync: still led, in the answer
    }
    wait_for(
        lambda: all(
            leader_of(admin, n, p) == 1 for n, p in (("back", 0), ("back", 1), ("both", 0))
        ),
        "clients see broker 1 lead what broker 2 led",
        timeout=20,
    )
    shutdown_s = time.monotonic() - shutting
    assert produce(b1.bootstrap, "both", 0, 10, "b") == 10  # acks=all with broker 1 alone
    # Broker 2 stopped following both-1 (StopReplica) but kept its log (delete=false).
    assert (b2.log.parent / "logs" / "both-1").is_dir()
    assert produce(b1.bootstrap, "back", 1, 10, "b") == 10

    # Broker 2 is elected nowhere now, and asking again changes nothing.
    [refused] = ours.call(controller.elect_preferred_leaders([tp("both", 0)])).values()
    assert code(refused) is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert ours.call(controller.controlled_shutdown(2, epoch2)) == {tp("stuck", 0)}
    assert state_of(zk, "both", 0).leader_epoch == 1
    print(
        f"\nelections done in {elections_s:.2f}s; controlled shutdown seen by clients in "
        f"{shutdown_s:.2f}s"
    )
