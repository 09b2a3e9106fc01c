"""Real Apache Kafka 3.9.1 brokers (ZooKeeper mode) change their ISRs through kbroker's
controller: AlterPartition.

Kafka 3.9's brokers, as partition leaders, ask the controller to shrink an ISR when a
follower falls behind and to expand it when one catches up. The controller here is
kbroker's, run by a kbroker broker in this process (id 100, no replica of anything),
started first so it wins the election: the Kafka brokers find it through
UpdateMetadata and send it their AlterPartition requests, which its handler passes
to the `Controller`.

Scenario, brokers 1 and 2, ``pair-0`` on [1, 2] and ``pair-1`` on [2, 1]:

- requests the test sends itself, as broker 1 with its epoch (kbroker's codec):
  each refusal has Kafka's code and nothing changes; the ISR the state already
  has is answered with the current state;
- broker 1 is paused (SIGSTOP) past ``replica.lag.time.max.ms``: broker 2, leading
  ``pair-1``, shrinks its ISR to [2] (written in the same leader epoch, a new znode
  version) once it has records broker 1 lacks; resumed, broker 1 catches up and
  broker 2 expands it again;
- broker 2 is killed (kill -9): the controller moves ``pair-1`` to broker 1 and
  takes broker 2 out of ``pair-0``'s ISR, as before; acks=all writes go on with
  broker 1 alone; restarted, broker 2 catches up on both and broker 1 asks for
  both ISRs back: clients see [1, 2] again, and a preferred election moves
  ``pair-1`` back to broker 2.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from kbroker.cluster import zk_data as zd
from kbroker.controller.isr_changes import IsrChange
from kbroker.log import TopicPartition
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.messages.inter_broker import AlterPartitionRequest
from kbroker.tools.client import BrokerClient
from tests.cluster.controllers import (
    OUR_ID,
    ControllerBroker,
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

LAG_MS = 3000  # replica.lag.time.max.ms of the Kafka brokers


def tp(p: int) -> TopicPartition:
    return TopicPartition("pair", p)


def isr_is(zk: KazooClient, partition: int, isr: set[int]) -> zd.LeaderAndIsr | None:
    """pair-``partition``'s state in ZooKeeper if its ISR is ``isr``."""
    state = state_of(zk, "pair", partition)
    return state if set(state.isr) == isr else None


def isr_seen(admin: AdminClient, topic: str, partition: int) -> list[int]:
    """The partition's ISR as clients see it (a broker's metadata)."""
    md = admin.list_topics(topic, timeout=10)
    part = md.topics[topic].partitions.get(partition)
    return [] if part is None else sorted(part.isrs)


def produce_one_ack(bootstrap: str, topic: str, partition: int, n: int) -> int:
    """``n`` records acknowledged by the leader alone (acks=1): delivered ones."""
    delivered: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "message.timeout.ms": 10000})
    for i in range(n):
        p.produce(topic, f"one-{i}".encode(), partition=partition,
                  on_delivery=lambda err, msg: delivered.append(err))  # fmt: skip
    p.flush(15)
    return sum(1 for err in delivered if err is None)


def alter_partition(
    broker_id: int,
    broker_epoch: int,
    topic: str,
    topic_id: uuid.UUID,
    partition: int,
    leader_epoch: int,
    isr: list[int],
    partition_epoch: int,
) -> Any:
    """One partition's AlterPartition, every version's fields set (ISR epochs unknown)."""
    P = AlterPartitionRequest.Topic.Partition
    part = P(
        partition_index=partition,
        leader_epoch=leader_epoch,
        new_isr=isr,
        new_isr_with_epochs=[P.BrokerState(broker_id=b, broker_epoch=-1) for b in isr],
        partition_epoch=partition_epoch,
    )
    topic_data = AlterPartitionRequest.Topic(topic_name=topic, topic_id=topic_id, partitions=[part])
    return AlterPartitionRequest(
        broker_id=broker_id, broker_epoch=broker_epoch, topics=[topic_data]
    )


@pytest.fixture
def cluster(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[tuple[ControllerBroker, list[KafkaZkBroker], KazooClient]]:
    def settings(i: int) -> dict[str, str]:
        return {
            # Broker 1 is paused, for less than its session, and broker 2 killed, noticed
            # sooner (the test ZooKeeper allows 1-10 s).
            "zookeeper.session.timeout.ms": "10000" if i == 1 else "6000",
            "replica.lag.time.max.ms": str(LAG_MS),
        }

    with chroot_client(zookeeper.connect, "isr") as (chroot, zk):
        ours = ControllerBroker(zookeeper.connect + chroot, tmp_path / "ours")
        try:
            ours.start()
            with kafka_brokers(zookeeper.connect, chroot, tmp_path, settings) as brokers:
                yield ours, brokers, zk
        finally:
            ours.close()


def test_kafka_leaders_shrink_and_expand_isrs_through_our_controller(
    cluster: tuple[ControllerBroker, list[KafkaZkBroker], KazooClient],
) -> None:
    ours, (b1, b2), zk = cluster
    assert zd.decode_controller(zk.get(zd.CONTROLLER_PATH)[0]).broker_id == OUR_ID
    controller = ours.controller
    assert controller is not None
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    topic_id, far_id = uuid.uuid4(), uuid.uuid4()
    for name, replicas, tid in (
        ("pair", {0: [1, 2], 1: [2, 1]}, topic_id),
        ("far", {0: [1, 3]}, far_id),  # broker 3 never starts
    ):
        assignment = zd.TopicAssignment.of(replicas, tid)
        zk.create(zd.topic_path(name), zd.encode_topic_assignment(assignment), makepath=True)
    wait_for(
        lambda: (
            [leader_of(admin, "pair", p) for p in (0, 1)] == [1, 2]
            and leader_of(admin, "far", 0) == 1
        ),
        "every partition led by its first replica",
        timeout=30,
    )
    assert produce(b1.bootstrap, "pair", 0, 20, "a") == 20
    assert produce(b1.bootstrap, "pair", 1, 20, "a") == 20

    # -- requests from the test: Kafka's codes, and nothing changes ------------------------
    epoch1 = zk.exists(zd.broker_path(1)).czxid
    epoch2 = zk.exists(zd.broker_path(2)).czxid
    p0 = state_of(zk, "pair", 0)
    far = state_of(zk, "far", 0)
    assert (p0.leader, p0.isr, far.isr) == (1, (1, 2), (1,))

    def ask(version: int, req: Any) -> tuple[int, list[tuple[Any, int, int, list[int], int]]]:
        with BrokerClient(ours.bootstrap, timeout=20) as c:
            resp = c.request(ApiKey.ALTER_PARTITION, version, req)
        return resp.error_code, [
            (t.topic_name if version < 2 else t.topic_id, p.partition_index, p.error_code,
             list(p.isr), p.partition_epoch)
            for t in resp.topics for p in t.partitions
        ]  # fmt: skip

    def pair0(isr: list[int], leader_epoch: int = p0.leader_epoch, version: int = p0.zk_version,
              broker: int = 1, epoch: int = epoch1) -> Any:  # fmt: skip
        return alter_partition(broker, epoch, "pair", topic_id, 0, leader_epoch, isr, version)

    assert ask(3, pair0([1], epoch=epoch1 - 1)) == (ErrorCode.STALE_BROKER_EPOCH, [])
    assert ask(3, pair0([1], broker=7)) == (ErrorCode.STALE_BROKER_EPOCH, [])
    for req, code in (
        (pair0([1], leader_epoch=p0.leader_epoch - 1), ErrorCode.FENCED_LEADER_EPOCH),
        (pair0([1], leader_epoch=p0.leader_epoch + 1), ErrorCode.NOT_CONTROLLER),
        (pair0([1], version=p0.zk_version - 1), ErrorCode.INVALID_UPDATE_VERSION),
        (pair0([2], broker=2, epoch=epoch2), ErrorCode.INVALID_REQUEST),  # not the leader
        (pair0([1, 3]), ErrorCode.INVALID_REQUEST),  # 3 is no replica
        (pair0([2]), ErrorCode.INVALID_REQUEST),  # without the leader
        (
            alter_partition(1, epoch1, "far", far_id, 0, far.leader_epoch, [1, 3], far.zk_version),
            ErrorCode.INELIGIBLE_REPLICA,  # 3 is not live
        ),
        (
            alter_partition(1, epoch1, "pair", topic_id, 9, 0, [1], 0),
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ),
        (
            alter_partition(1, epoch1, "pair", uuid.uuid4(), 0, 0, [1], 0),
            ErrorCode.UNKNOWN_TOPIC_ID,
        ),
    ):
        [(_, _, got, isr, _)] = ask(3, req)[1]
        assert (got, isr) == (code, []), req
    # v1: topics by name; an ineligible replica is OPERATION_NOT_ATTEMPTED before v2
    far_v1 = alter_partition(1, epoch1, "far", far_id, 0, far.leader_epoch, [1, 3], far.zk_version)
    assert ask(1, far_v1) == (
        ErrorCode.NONE,
        [("far", 0, ErrorCode.OPERATION_NOT_ATTEMPTED, [], -1)],
    )
    # the ISR the state already has: answered with it, at every version, nothing written
    for v in range(4):
        [(_, _, got, isr, version)] = ask(v, pair0([1, 2]))[1]
        assert (got, isr, version) == (ErrorCode.NONE, [1, 2], p0.zk_version)
    assert (state_of(zk, "pair", 0), state_of(zk, "far", 0)) == (p0, far)
    # through the controller's API too: an answer per change, the request refused as a whole
    same = IsrChange("pair", 0, p0.leader_epoch, [1, 2], p0.zk_version)
    [answer] = ours.call(controller.alter_partition(1, epoch1, [same]))
    assert (answer.error, answer.tp, answer.state and answer.state.isr) == (
        ErrorCode.NONE,
        tp(0),
        [1, 2],
    )
    with pytest.raises(KafkaError) as stale:
        ours.call(controller.alter_partition(2, epoch2 + 1, [same]))
    assert stale.value.code is ErrorCode.STALE_BROKER_EPOCH

    # -- broker 1 paused: broker 2 shrinks pair-1's ISR; resumed, it expands it again -------
    p1 = state_of(zk, "pair", 1)
    assert (p1.leader, p1.isr) == (2, (2, 1))
    assert b1.proc is not None
    b1.proc.send_signal(signal.SIGSTOP)
    paused = time.monotonic()
    try:
        # (A follower is out of sync only once the leader has records it has not fetched.)
        assert produce_one_ack(b2.bootstrap, "pair", 1, 5) == 5
        shrunk = wait_for(
            lambda: isr_is(zk, 1, {2}),
            "broker 2 to shrink pair-1's ISR",
            timeout=LAG_MS / 1000 * 2 + 2,
        )
        shrink_s = time.monotonic() - paused
    finally:
        b1.proc.send_signal(signal.SIGCONT)
    # the same leader and leader epoch, one znode version on, in our controller's epoch
    assert (shrunk.leader, shrunk.leader_epoch, shrunk.zk_version) == (
        2,
        p1.leader_epoch,
        p1.zk_version + 1,
    )
    assert shrunk.controller_epoch == controller.ctx.epoch
    expanded = wait_for(
        lambda: isr_is(zk, 1, {1, 2}),
        "broker 2 to take broker 1 back into pair-1's ISR",
        timeout=30,
    )
    assert (expanded.leader_epoch, expanded.zk_version) == (p1.leader_epoch, p1.zk_version + 2)
    wait_for(lambda: isr_seen(admin, "pair", 1) == [1, 2], "clients to see pair-1's ISR", 20)

    # -- broker 2 killed: out of the ISRs (the controller); restarted: back (AlterPartition) -
    b2.kill()
    wait_for(
        lambda: (
            [(s.leader, s.isr) for s in (state_of(zk, "pair", 0), state_of(zk, "pair", 1))]
            == [(1, (1,)), (1, (1,))]
        ),
        "broker 1 to lead both partitions alone",
        timeout=30,
    )
    after_kill = [state_of(zk, "pair", p) for p in (0, 1)]
    wait_for(lambda: leader_of(admin, "pair", 1) == 1, "clients to see broker 1 lead pair-1", 20)
    assert produce(b1.bootstrap, "pair", 0, 30, "b") == 30
    assert produce(b1.bootstrap, "pair", 1, 30, "b") == 30

    b2.restart()
    restarted = time.monotonic()
    back = wait_for(
        lambda: (s0 := isr_is(zk, 0, {1, 2})) and (s1 := isr_is(zk, 1, {1, 2})) and [s0, s1],
        "broker 1 to take broker 2 back into both ISRs",
        timeout=40,
    )
    rejoin_s = time.monotonic() - restarted
    for before, now in zip(after_kill, back, strict=True):
        # AlterPartition: the same leader epoch (a controller's election would raise it)
        assert (now.leader, now.leader_epoch) == (1, before.leader_epoch)
        assert now.zk_version > before.zk_version
    wait_for(
        lambda: [isr_seen(admin, "pair", p) for p in (0, 1)] == [[1, 2], [1, 2]],
        "clients to see both ISRs whole",
        timeout=20,
    )

    # -- a preferred election moves pair-1 back to broker 2 ------------------------------------
    results = ours.call(controller.elect_preferred_leaders([tp(1)]))
    assert results == {tp(1): None}
    assert state_of(zk, "pair", 1).leader == 2
    wait_for(lambda: leader_of(admin, "pair", 1) == 2, "clients to see broker 2 lead pair-1", 20)
    assert produce(b1.bootstrap, "pair", 1, 10, "c") == 10
    assert consume(b2.bootstrap, "pair", 2, 115) == 115
    print(
        f"\nISR shrunk {shrink_s:.2f}s after the pause (lag {LAG_MS} ms); restarted broker "
        f"back in both ISRs {rejoin_s:.2f}s after its restart"
    )
