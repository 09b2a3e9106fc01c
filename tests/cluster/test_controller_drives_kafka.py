"""kbroker's controller drives real Apache Kafka 3.9.1 brokers (ZooKeeper mode).

The controller's subject is a cluster of brokers; before kbroker brokers join
clusters, real Kafka 3.9.1 brokers are that subject, so every order is judged by
the broker that defined the protocol. The same scenario runs twice:

- ``kafka``: Kafka's own controller (the reference, proving the test itself);
- ``kbroker``: kbroker's `Controller`, elected first on the chroot, so the Kafka
  brokers join as ordinary brokers and obey it.

Scenario: two brokers; topics of replication factor 2 and 1 are created (their
assignment znodes written, as the controller's input) and get leaders; records
go in and come back through the brokers; a partition is added to a topic (its
assignment rewritten) and gets a leader; broker 2 is killed (kill -9): the
factor-2 partition it led is led by broker 1 from its ISR and takes acks=all
writes again, and a factor-1 partition on broker 2 goes offline (leader -1, its
last ISR member kept). A topic with a replica on each broker is deleted while
broker 2 is down: clients stop seeing it and broker 1 deletes its replica, but
the deletion ends only when broker 2, back, has deleted its own; the offline
partition is led again.
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
from tests.cluster.controllers import (
    OUR_ID,
    ControllerThread,
    chroot_client,
    consume,
    kafka_brokers,
    leader_of,
    produce,
    state_of,
)
from tests.cluster.kafka_zk import KafkaZkBroker
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture(params=["kafka", "kbroker"])
def cluster(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[tuple[str, list[KafkaZkBroker], KazooClient, int]]:
    with chroot_client(zookeeper.connect, "drive") as (chroot, zk):
        ours = ControllerThread(zookeeper.connect + chroot) if request.param == "kbroker" else None
        try:
            epoch = ours.start() if ours is not None else -1
            with kafka_brokers(
                zookeeper.connect,
                chroot,
                tmp_path,
                lambda _i: {"zookeeper.session.timeout.ms": "6000"},
            ) as brokers:
                yield request.param, brokers, zk, epoch
        finally:
            if ours is not None:
                ours.close()


def test_create_serve_and_fail_over(
    cluster: tuple[str, list[KafkaZkBroker], KazooClient, int],
) -> None:
    who, (b1, b2), zk, epoch = cluster
    controller = zd.decode_controller(zk.get(zd.CONTROLLER_PATH)[0]).broker_id
    assert controller == (OUR_ID if who == "kbroker" else 1)
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    started = time.monotonic()
    # Topics are made as an assignment znode, the controller's input (a ZooKeeper-mode
    # CreateTopics is answered only by the controller, and ours has no listener).
    for name, replicas in (("rf2", {0: [2, 1]}), ("rf1", {0: [1], 1: [2]}), ("solo", {0: [2]})):
        assignment = zd.TopicAssignment.of(replicas, uuid.uuid4())
        zk.create(zd.topic_path(name), zd.encode_topic_assignment(assignment), makepath=True)
    for name, count in (("rf2", 1), ("rf1", 2), ("solo", 1)):
        wait_for(lambda n=name, c=count: all(leader_of(admin, n, p) >= 0 for p in range(c))
                 if n in admin.list_topics(timeout=10).topics else False,
                 f"{name} to have leaders", timeout=30)  # fmt: skip
    created_s = time.monotonic() - started
    if who == "kbroker":
        assert state_of(zk, "rf2", 0).controller_epoch == epoch

    wait_for(lambda: leader_of(admin, "rf2", 0) == 2, "broker 2 to lead rf2-0", timeout=30)
    assert produce(b1.bootstrap, "rf2", 0, 50, "a") == 50
    assert produce(b1.bootstrap, "rf1", 0, 20, "a") + produce(b1.bootstrap, "rf1", 1, 20, "a") == 40
    assert consume(b1.bootstrap, "rf2", 1, 50) == 50
    assert consume(b2.bootstrap, "rf1", 2, 40) == 40
    assert produce(b1.bootstrap, "solo", 0, 20, "a") == 20
    # Broker 1 caught up as a follower of rf2-0 (its ISR holds both).
    wait_for(lambda: set(state_of(zk, "rf2", 0).isr) == {1, 2}, "rf2-0's ISR", timeout=30)

    # A partition is added to rf2 (its assignment rewritten, as CreatePartitions does).
    data, stat = zk.get(zd.topic_path("rf2"))
    grown = zd.decode_topic_assignment(data)
    more = zd.TopicAssignment.of({**grown.replicas(), 1: [1, 2]}, grown.topic_id)
    zk.set(zd.topic_path("rf2"), zd.encode_topic_assignment(more), version=stat.version)
    wait_for(lambda: leader_of(admin, "rf2", 1) == 1, "rf2-1 led by broker 1", timeout=30)
    assert produce(b1.bootstrap, "rf2", 1, 7, "a") == 7

    b2.kill()
    killed = time.monotonic()
    wait_for(lambda: leader_of(admin, "rf2", 0) == 1, "broker 1 to lead rf2-0", timeout=40)
    assert produce(b1.bootstrap, "rf2", 0, 10, "b") == 10
    failover_s = time.monotonic() - killed
    rf2 = state_of(zk, "rf2", 0)
    assert (rf2.leader, rf2.isr) == (1, (1,))
    # (Written after the elections: the partition nobody can lead loses its leader.)
    wait_for(
        lambda: (state_of(zk, "solo", 0).leader, state_of(zk, "solo", 0).isr) == (-1, (2,)),
        "solo-0 without a leader, its last ISR member kept",
        timeout=20,
    )
    assert consume(b1.bootstrap, "rf2", 2, 67) == 67

    # rf1 is deleted while broker 2, holding rf1-1, is down (its deletion znode, the
    # controller's input): clients stop seeing it and broker 1 deletes rf1-0 at once;
    # the topic's znodes stay until broker 2 has deleted its replica too.
    zk.create(zd.delete_topic_path("rf1"), makepath=True)
    deleting = time.monotonic()

    def logs(b: KafkaZkBroker) -> list[str]:
        # A directory renamed to "...-delete" is deleted (Kafka removes its files later).
        return [
            d.name for d in (b.log.parent / "logs").glob("rf1-*") if not d.name.endswith("-delete")
        ]

    wait_for(
        lambda: "rf1" not in admin.list_topics(timeout=10).topics and not logs(b1),
        "rf1 gone from clients and broker 1",
        timeout=30,
    )
    deleted_s = time.monotonic() - deleting
    time.sleep(1)
    assert zk.exists(zd.topic_path("rf1")) is not None  # waiting for broker 2's replica
    assert logs(b2) == ["rf1-1"]

    # Broker 2 comes back: its offline partition (solo-0) is led again, it follows rf2-0
    # again, and it deletes its rf1 replica, which ends the deletion.
    b2.restart()
    wait_for(lambda: leader_of(admin, "solo", 0) == 2, "solo-0 back online", timeout=40)
    assert produce(b1.bootstrap, "solo", 0, 5, "c") == 5
    assert consume(b2.bootstrap, "solo", 1, 25) == 25
    wait_for(
        lambda: not logs(b2) and zk.exists(zd.topic_path("rf1")) is None,
        "rf1's last replica and its znodes deleted",
        timeout=40,
    )
    assert zk.get_children(zd.DELETE_TOPICS_PATH) == []
    assert consume(b1.bootstrap, "rf2", 2, 67) == 67  # the other topics are untouched
    print(
        f"\n[{who}] topics created in {created_s:.2f}s; kill -9 to an acks=all write on the "
        f"new leader {failover_s:.2f}s; deleted topic gone from clients in {deleted_s:.2f}s"
    )
