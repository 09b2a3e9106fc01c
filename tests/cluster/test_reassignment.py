"""Partition reassignment (KIP-455) on a cluster of real brokers: replicas moved to other
brokers while clients write, as Kafka 3.9's ZooKeeper controller moves them.

Each scenario runs against four Apache Kafka 3.9.1 brokers in ZooKeeper mode first (the
reference: it proves the test) and then against four ``kbroker serve --zookeeper``
processes, on a fresh chroot each. Reassignments are asked for with kafka-python's
admin client (AlterPartitionReassignments / ListPartitionReassignments, sent to the
controller), with kbroker's own wire client where kafka-python refuses to send the
request, and through the ``/admin/reassign_partitions`` znode that older tools wrote:

- a partition on brokers 1, 2, 3 moves to 2, 3, 4 while an idempotent acks=all
  producer (min.insync.replicas 2) writes to it from a thread: broker 4 copies the
  log from nothing and joins the ISR, the reassignment completes, broker 1 deletes
  its copy, and every acknowledged record is read back once, at its offset;
- a reassignment that leaves the leader out elects the first target replica, one that
  keeps it moves nothing but the replica list; the znode way works too;
- refusals: Kafka's codes for an unregistered broker, an empty or repeated list, a
  cancellation with nothing to cancel, an unknown partition, and a broker that is
  not the controller;
- a reassignment whose new replica is down stays in progress (listed with its
  adding and removing replicas, as the topic's znode has them); cancelled, the
  replicas go back (in the order Kafka keeps them); the controller killed, the next
  one carries the other on, and it completes once the new replica's broker is back.

Select with ``-m kafka`` (the reference needs Kafka's jars: bench/kafka/fetch.sh).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
)
from kbroker.tools.client import BrokerClient
from tests.cluster.nodes import SYSTEMS, Cluster, KafkaNode, Node, cluster
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

# Kafka deletes a removed replica's directory after log.segment.delete.delay.ms (60 s).
# No automatic leader rebalance: the leaders a reassignment leaves are what is checked.
KAFKA_SETTINGS = {
    "log.segment.delete.delay.ms": "1000",
    "auto.leader.rebalance.enable": "false",
}
KBROKER_SETTINGS = ["auto.leader.rebalance.enable=false"]


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    chroot = f"/reassign-{uuid.uuid4().hex[:8]}"
    with cluster(
        request.param,
        zookeeper.connect,
        chroot,
        tmp_path,
        size=4,
        kafka_settings=KAFKA_SETTINGS,
        kbroker_settings=KBROKER_SETTINGS,
    ) as c:
        yield c


# -- helpers ----------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, assignment: list[list[int]], min_isr: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name,
        num_partitions=len(assignment),
        replica_assignment=assignment,
        config={"min.insync.replicas": str(min_isr)},
    )
    admin.create_topics([topic], operation_timeout=30, request_timeout=30)[name].result(60)


def partitions(bootstrap: str, topic: str) -> dict[int, Any]:
    """Partition -> its metadata (leader, replicas, isrs) as ``bootstrap`` answers."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    found = md.topics.get(topic)
    return {} if found is None or found.error is not None else dict(found.partitions)


def leaders(bootstrap: str, topic: str) -> list[int]:
    """Each partition's leader, in partition order (none while the topic is unknown)."""
    return [p.leader for _, p in sorted(partitions(bootstrap, topic).items())]


def admin(c: Cluster) -> KafkaAdminClient:
    """kafka-python's admin client; it sends reassignments to the controller."""
    return KafkaAdminClient(bootstrap_servers=c.live_bootstrap(), request_timeout_ms=30000)


def reassign(c: Cluster, targets: dict[KTP, list[int] | None]) -> dict[KTP, Any]:
    a = admin(c)
    try:
        return a.alter_partition_reassignments(targets)
    finally:
        a.close()


def ongoing(c: Cluster) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """(topic, partition) -> (replicas, adding, removing) of each reassignment in progress."""
    a = admin(c)
    try:
        listed = a.list_partition_reassignments()
    finally:
        a.close()
    return {
        (tp.topic, tp.partition): (r["replicas"], r["adding_replicas"], r["removing_replicas"])
        for tp, r in listed.items()
    }


def ongoing_is(c: Cluster, want: dict[Any, Any], timeout: float = 30) -> None:
    """Until the controller lists ``want`` (clients may name the old controller for a
    while after a failover: they are retried)."""
    seen: list[Any] = []

    def check() -> bool:
        try:
            seen[:] = [ongoing(c)]
        except Exception as exc:
            seen[:] = [exc]
        return seen == [want]

    try:
        wait_for(check, f"the reassignments in progress to be {want}", timeout, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None


def log_dir(node: Node) -> Path:
    if isinstance(node, KafkaNode):
        return node.broker.log.parent / "logs"
    return node.broker.data_dir  # type: ignore[attr-defined, no-any-return]


def has_replica(node: Node, topic: str, partition: int) -> bool:
    """The broker keeps a directory for the partition (Kafka's ``-delete`` ones count)."""
    name = f"{topic}-{partition}"
    return any(d.name == name or d.name.startswith(name + ".") for d in log_dir(node).iterdir())


def controller_node(c: Cluster) -> Node:
    controller = wait_for(c.controller_id, "a controller", timeout=30)
    return c.nodes[controller]


def produce_acked(bootstrap: str, topic: str, partition: int, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v.encode(), partition=partition,
                  on_delivery=lambda err, _msg: errors.append(err))  # fmt: skip
    assert p.flush(30) == 0
    assert errors == [None] * len(values)


def read_partition(bootstrap: str, topic: str, partition: int) -> list[tuple[int, str]]:
    """(offset, value) of every record from the start to the high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        _, high = c.get_watermark_offsets(CTP(topic, partition), timeout=10)
        c.assign([CTP(topic, partition, OFFSET_BEGINNING)])
        out: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.value().decode()))
        return out
    finally:
        c.close()


class AckedProducer(threading.Thread):
    """An acks=all producer (idempotent unless told otherwise) writing numbered records to
    one partition until stopped; `acked` maps each acknowledged value to its offset."""

    def __init__(
        self, bootstrap: str, topic: str, partition: int = 0, idempotent: bool = True
    ) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self.idempotent = idempotent
        self.acked: dict[str, int] = {}
        self.failed: list[str] = []
        self.stopping = threading.Event()
        self.longest_gap = 0.0
        self._last_ack = time.monotonic()

    def _delivered(self, err: Any, msg: Any) -> None:
        value = msg.value().decode()
        if err is not None:
            self.failed.append(f"{value}: {err}")
            return
        now = time.monotonic()
        self.longest_gap = max(self.longest_gap, now - self._last_ack)
        self._last_ack = now
        self.acked[value] = msg.offset()

    def run(self) -> None:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": self.idempotent,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
            }
        )
        pad = "x" * 200
        i = 0
        while not self.stopping.is_set():
            for _ in range(20):
                p.produce(self.topic, f"r{i:08d}-{pad}".encode(), partition=self.partition,
                          on_delivery=self._delivered)  # fmt: skip
                i += 1
            p.poll(0.02)
        p.flush(90)

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)
        assert not self.is_alive(), "the producer did not finish"


# -- scenarios --------------------------------------------------------------------------


def test_move_a_partition_while_writing_with_acks_all(brokers: Cluster) -> None:
    c = brokers
    started = time.monotonic()
    create_topic(c.bootstrap, "moving", [[1, 2, 3]], min_isr=2)
    wait_for(lambda: leaders(c.bootstrap, "moving") == [1], "broker 1 to lead")
    assert not has_replica(c.nodes[4], "moving", 0)

    producer = AckedProducer(c.bootstrap, "moving")
    producer.start()
    try:
        wait_for(lambda: len(producer.acked) >= 5000, "5000 records written", timeout=60)
        tp = KTP("moving", 0)
        assert reassign(c, {tp: [2, 3, 4]}) == {tp: None}
        moved_at = time.monotonic()

        def done() -> bool:
            part = partitions(c.bootstrap, "moving")[0]
            return (
                ongoing(c) == {}
                and part.replicas == [2, 3, 4]
                and sorted(part.isrs) == [2, 3, 4]
                and part.leader in (2, 3, 4)
            )

        wait_for(done, "the reassignment to complete", timeout=90, interval=0.5)
        took = time.monotonic() - moved_at
        wait_for(lambda: not has_replica(c.nodes[1], "moving", 0), "broker 1 to delete it", 30)
        assert has_replica(c.nodes[4], "moving", 0)
        # writes go on through the new leader
        written = len(producer.acked)
        wait_for(lambda: len(producer.acked) >= written + 500, "more records written", 30)
    finally:
        producer.stop()
    assert producer.failed == []
    records = read_partition(c.bootstrap, "moving", 0)
    offsets = [o for o, _ in records]
    assert offsets == list(range(len(records)))
    at = dict(records)
    wrong = {v: o for v, o in producer.acked.items() if at.get(o) != v}
    assert wrong == {}, f"{len(wrong)} acknowledged records not at their offsets"
    values = [v for _, v in records]
    assert len(set(values)) == len(values), "a record was written twice"
    print(
        f"\n{c.system}: {len(producer.acked)} records acknowledged, reassignment took "
        f"{took:.1f} s, longest gap between acks {producer.longest_gap:.2f} s, "
        f"test {time.monotonic() - started:.0f} s"
    )


def test_leadership_moves_into_the_target_replicas(brokers: Cluster) -> None:
    c = brokers
    create_topic(c.bootstrap, "lead", [[1, 2, 3], [1, 2, 3]])
    wait_for(lambda: leaders(c.bootstrap, "lead") == [1, 1], "broker 1 to lead both partitions")
    for p in (0, 1):
        produce_acked(c.bootstrap, "lead", p, [f"before-{p}-{i}" for i in range(50)])
    zk = c.zk()
    try:
        epochs = {
            p: json.loads(zk.get(f"/brokers/topics/lead/partitions/{p}/state")[0])["leader_epoch"]
            for p in (0, 1)
        }
    finally:
        zk.stop()
        zk.close()
    t0, t1 = KTP("lead", 0), KTP("lead", 1)
    # p0 leaves the leader out: the first target replica in the ISR leads (4, not 2);
    # p1 keeps it (1 leads on, though 2 is now the preferred replica).
    assert reassign(c, {t0: [4, 2], t1: [2, 1]}) == {t0: None, t1: None}

    want = {0: (4, [4, 2], [2, 4]), 1: (1, [2, 1], [1, 2])}
    seen: list[Any] = []

    def settled() -> bool:
        parts = partitions(c.bootstrap, "lead")
        seen[:] = [
            {p: (m.leader, m.replicas, sorted(m.isrs)) for p, m in parts.items()},
            ongoing(c),
        ]
        return seen == [want, {}]

    try:
        wait_for(settled, "both reassignments to complete", timeout=90, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None
    zk = c.zk()
    try:
        for p in (0, 1):
            state = json.loads(zk.get(f"/brokers/topics/lead/partitions/{p}/state")[0])
            assert state["leader_epoch"] > epochs[p]
        topic = json.loads(zk.get("/brokers/topics/lead")[0])
        assert topic["partitions"] == {"0": [4, 2], "1": [2, 1]}
        assert (topic["adding_replicas"], topic["removing_replicas"]) == ({}, {})
    finally:
        zk.stop()
        zk.close()
    wait_for(
        lambda: (
            not any(has_replica(c.nodes[b], "lead", 0) for b in (1, 3))
            and not has_replica(c.nodes[3], "lead", 1)
        ),
        "the removed replicas to be deleted",
        timeout=30,
    )
    for p in (0, 1):
        produce_acked(c.bootstrap, "lead", p, [f"after-{p}-{i}" for i in range(50)])
        values = [v for _, v in read_partition(c.bootstrap, "lead", p)]
        assert values == [f"before-{p}-{i}" for i in range(50)] + [
            f"after-{p}-{i}" for i in range(50)
        ]

    # The way tools before KIP-455 asked: the /admin/reassign_partitions znode.
    create_topic(c.bootstrap, "legacy", [[1, 2]])
    wait_for(lambda: leaders(c.bootstrap, "legacy") == [1], "broker 1 to lead")
    zk = c.zk()
    try:
        plan = {
            "version": 1,
            "partitions": [{"topic": "legacy", "partition": 0, "replicas": [3, 4]}],
        }
        zk.create("/admin/reassign_partitions", json.dumps(plan).encode(), makepath=True)
        wait_for(
            lambda: (
                partitions(c.bootstrap, "legacy")[0].replicas == [3, 4]
                and zk.exists("/admin/reassign_partitions") is None
            ),
            "the znode's reassignment to complete and the znode to go",
            timeout=60,
            interval=0.5,
        )
    finally:
        zk.stop()
        zk.close()
    assert partitions(c.bootstrap, "legacy")[0].leader == 3


def raw_reassign(node: Node, topic: str, targets: dict[int, list[int] | None]) -> Any:
    """AlterPartitionReassignments sent to ``node`` by kbroker's wire client (kafka-python
    refuses to send an empty replica list, and may ask a paused broker for metadata)."""
    T = AlterPartitionReassignmentsRequest.Topic
    parts = [T.Partition(partition_index=p, replicas=r) for p, r in targets.items()]
    request = AlterPartitionReassignmentsRequest(
        timeout_ms=30000, topics=[T(name=topic, partitions=parts)]
    )
    with BrokerClient(node.bootstrap, timeout=30) as client:
        return client.request(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            client.version(ApiKey.ALTER_PARTITION_REASSIGNMENTS),
            request,
        )


def test_bad_reassignments_get_kafkas_codes(brokers: Cluster) -> None:
    c = brokers
    create_topic(c.bootstrap, "bad", [[1, 2]])
    wait_for(lambda: leaders(c.bootstrap, "bad") == [1], "broker 1 to lead")
    tp = KTP("bad", 0)
    invalid = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    # a broker that is not registered
    assert reassign(c, {tp: [1, 9]})[tp].errno == invalid
    # nothing to cancel
    assert reassign(c, {tp: None})[tp].errno == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    # a partition or a topic that does not exist
    for missing in (KTP("bad", 5), KTP("no-such-topic", 0)):
        assert reassign(c, {missing: [1, 2]})[missing].errno == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # an empty list, a broker twice
    controller = controller_node(c)
    for replicas in ([], [2, 2]):
        resp = raw_reassign(controller, "bad", {0: replicas})
        assert resp.error_code == ErrorCode.NONE
        [[part]] = [t.partitions for t in resp.responses]
        assert (part.partition_index, part.error_code) == (0, invalid), replicas
        assert part.error_message
    # a broker that is not the controller refuses both requests as a whole
    other = next(n for i, n in c.nodes.items() if i != controller.broker_id)
    resp = raw_reassign(other, "bad", {0: [1, 2]})
    assert (resp.error_code, resp.responses) == (ErrorCode.NOT_CONTROLLER, [])
    with BrokerClient(other.bootstrap, timeout=30) as client:
        listed = client.request(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            client.version(ApiKey.LIST_PARTITION_REASSIGNMENTS),
            ListPartitionReassignmentsRequest(timeout_ms=30000, topics=None),
        )
    assert (listed.error_code, listed.topics) == (ErrorCode.NOT_CONTROLLER, [])
    # nothing moved
    assert ongoing(c) == {}
    part = partitions(c.bootstrap, "bad")[0]
    assert (part.leader, part.replicas) == (1, [1, 2])


def test_cancel_and_carry_on_after_a_controller_failover(brokers: Cluster) -> None:
    c = brokers
    first = controller_node(c)
    # x: a broker that is not the controller, the new replica; the controller is one of
    # the partitions' replicas and the one each reassignment removes.
    x = max(i for i in c.nodes if i != first.broker_id)
    a, b = (i for i in sorted(c.nodes) if i not in (x, first.broker_id))
    ors = [first.broker_id, a, b]
    create_topic(c.bootstrap, "stay", [ors, ors])
    wait_for(lambda: leaders(c.bootstrap, "stay") == [ors[0]] * 2, "both partitions led")
    for p in (0, 1):
        produce_acked(c.bootstrap, "stay", p, [f"v-{p}-{i}" for i in range(20)])

    # x takes the request while paused (still registered), and dies before it can fetch.
    c.nodes[x].pause()
    try:
        asked = raw_reassign(first, "stay", {0: [a, b, x], 1: [a, b, x]})
        assert [
            (p.partition_index, p.error_code) for t in asked.responses for p in t.partitions
        ] == [
            (0, ErrorCode.NONE),
            (1, ErrorCode.NONE),
        ]
    finally:
        c.nodes[x].kill()
    zk = c.zk()
    try:
        # (Once its session is over, clients stop trying to reach it.)
        wait_for(lambda: zk.exists(f"/brokers/ids/{x}") is None, f"broker {x} to be gone", 30)
        topic = json.loads(zk.get("/brokers/topics/stay")[0])
    finally:
        zk.stop()
        zk.close()
    rs = [a, b, x, first.broker_id]  # the target, then the rest of ORS
    assert topic["partitions"] == {"0": rs, "1": rs}
    assert topic["adding_replicas"] == {"0": [x], "1": [x]}
    assert topic["removing_replicas"] == {"0": [first.broker_id], "1": [first.broker_id]}
    assert topic["version"] == 3
    moving = (rs, [x], [first.broker_id])
    ongoing_is(c, {("stay", 0): moving, ("stay", 1): moving})

    # Cancelled: partition 0 goes back to ORS, in the order RS kept it.
    t0 = KTP("stay", 0)
    assert reassign(c, {t0: None}) == {t0: None}
    assert ongoing(c) == {("stay", 1): moving}
    wait_for(
        lambda: (
            getattr(partitions(c.bootstrap, "stay").get(0), "replicas", None)
            == [a, b, first.broker_id]
        ),
        "partition 0 to have its replicas back",
    )

    # The controller dies: the next one (another broker) carries partition 1's on ...
    first.kill()
    wait_for(
        lambda: c.controller_id() not in (None, first.broker_id), "another controller", timeout=40
    )
    ongoing_is(c, {("stay", 1): moving})
    # ... and completes it once x is back and caught up (first is dead: no one to delete).
    c.nodes[x].launch()
    c.nodes[x].wait_started()

    def completed() -> bool:
        part = partitions(c.live_bootstrap(), "stay").get(1)
        return part is not None and (part.replicas, sorted(part.isrs)) == (
            [a, b, x],
            sorted([a, b, x]),
        )

    wait_for(
        completed,
        "partition 1's reassignment to complete",
        timeout=90,
        interval=0.5,
    )
    ongoing_is(c, {})
    for p in (0, 1):
        values = [v for _, v in read_partition(c.live_bootstrap(), "stay", p)]
        assert values == [f"v-{p}-{i}" for i in range(20)]
