"""Replicated partitions across three brokers: failover, the ISR, and identical replicas.

Each scenario runs against Apache Kafka 3.9.1 in ZooKeeper mode first (the
reference: it proves the test) and then against three ``kbroker serve
--zookeeper`` processes, on a fresh chroot each. Topics have three replicas
and min.insync.replicas 2; unclean leader election is off.

- Kafka's own replication test, small: an idempotent acks=all producer writes
  unique values to three partitions from a thread, while the leader of
  partition 0 is stopped twice cleanly (SIGTERM) and killed twice (kill -9),
  then the controller killed once (``KBROKER_BOUNCES=5``: Kafka's size, five
  of each for the leader and then for the controller), every broker restarted after and the ISR
  waited for to be whole again; a consumer group reads throughout. No
  write fails, and then a fresh group reads every acknowledged record exactly
  once, at the offset it was acknowledged at, and nothing else; the group that
  read throughout saw every record and committed the end of each partition;
  and the three replicas hold the same bytes below the high watermark.
- Two of three replicas down (kill -9 of the leader's two followers): the ISR
  shrinks to the leader alone, acks=all writes are refused with
  NOT_ENOUGH_REPLICAS and nothing of them is written (a producer without
  retries gets that error in its delivery report; an idempotent one retries
  until message.timeout.ms and reports _MSG_TIMED_OUT, its debug log showing
  each refusal), acks=1 writes still succeed; once both followers are back the
  ISR is whole and every acknowledged record is there.
- Divergent replicas are truncated: leaders killed (kill -9) and stopped while
  an acks=1 producer and an idempotent acks=all producer write, so a killed
  leader may hold records its followers never fetched; once everything is back
  and the ISR whole, every replica holds byte-identical batches below the high
  watermark (read from the segment files: tests/cluster/replica_logs.py),
  partition leader epochs included, and those epochs show every leader change.
- A consumer group's coordinator is killed (kill -9; __consumer_offsets has
  three replicas): the offsets committed before are still there, read through
  another broker, and the same consumer keeps reading, re-reading nothing from
  before its last commit and skipping nothing.

And replica_logs itself, on one broker of each system (one replica: it runs on
kbroker before replication does): the batches it reads cover every offset below
the high watermark and hold the records written.

Timings (each failover, the longest wait between acknowledgements) are printed:
``-s`` shows them. Select with ``-m kafka`` and the system with ``-k``
(``-k "not kbroker"`` for the reference only: every test here carries the kafka
mark, so ``-k kafka`` alone selects both).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import FindCoordinatorRequest
from kbroker.tools.client import BrokerClient, ClientError
from tests.cluster import replica_logs
from tests.cluster.nodes import (
    SESSION_TIMEOUT_MS,
    SYSTEMS,
    Cluster,
    Listeners,
    cluster,
    fresh_cluster,
)
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer, zk_session

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]

SESSION_S = SESSION_TIMEOUT_MS / 1000
# Clean stops and kills of the leader (each), CI size; Kafka's own test's size is 5
# (then the controller gets as many): KBROKER_BOUNCES=5 pytest ... -k bounces.
BOUNCES = int(os.environ.get("KBROKER_BOUNCES", "2"))
REPLICAS = 3
MIN_ISR = 2
# Below Kafka's default of 30 s, so that a follower that stopped fetching leaves the ISR
# in a test's time; the same setting name for both systems.
LAG_MS = 3000
# Both systems' settings (the same names) for every replicated test here:
# __consumer_offsets replicated three times (few partitions: quick to create and to
# move), unclean elections off.
KAFKA_SETTINGS = {
    "replica.lag.time.max.ms": str(LAG_MS),
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "unclean.leader.election.enable": "false",
}


# -- the cluster, its partitions and their ISR ----------------------------------------


@pytest.fixture(params=SYSTEMS)
def system(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextmanager
def replicated_cluster(
    system: str,
    zookeeper: ZooKeeperServer,
    root: Path,
    listeners: Listeners | None = None,
    **extra: str,
) -> Iterator[Cluster]:
    """Three brokers with the settings above (and ``extra``) on a fresh chroot, with
    ``listeners`` (default: one PLAINTEXT listener each)."""
    settings = {**KAFKA_SETTINGS, **extra}
    with fresh_cluster(system, zookeeper.connect, "repl", root, settings, listeners) as c:
        yield c


def create_replicated_topic(c: Cluster, name: str, partitions: int) -> None:
    """A topic of three replicas and min.insync.replicas 2, every ISR whole."""
    admin = AdminClient(c.client())
    futures = admin.create_topics(
        [NewTopic(name, partitions, REPLICAS, config={"min.insync.replicas": str(MIN_ISR)})],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[name].result(60)
    wait_whole(c, name, timeout=30)


@dataclass(frozen=True)
class PartitionState:
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def partition_states(
    bootstrap: str, topic: str, conf: Mapping[str, Any] | None = None
) -> dict[int, PartitionState]:
    """Partition -> leader, replicas and ISR, as a broker of ``bootstrap`` answers Metadata
    (empty when the topic is unknown to it or no broker answered); ``conf``: the client's
    security settings."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    try:
        md = admin.list_topics(topic, timeout=5)
    except KafkaException:
        return {}
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {
        p.id: PartitionState(p.leader, tuple(p.replicas), tuple(sorted(p.isrs)))
        for p in t.partitions.values()
    }


def leader_of(c: Cluster, topic: str, partition: int) -> int:
    return wait_for(
        lambda: (
            (s := partition_states(c.live_bootstrap(), topic, c.client_conf).get(partition))
            and s.leader > 0
            and s.leader
        ),
        f"a leader of {topic}-{partition}",
    )


def wait_whole(c: Cluster, topic: str, timeout: float = 60) -> dict[int, PartitionState]:
    """Until every partition of ``topic`` has a leader and all its replicas in the ISR."""

    def whole() -> dict[int, PartitionState] | None:
        states = partition_states(c.live_bootstrap(), topic, c.client_conf)
        ok = states and all(s.leader > 0 and len(s.isr) == REPLICAS for s in states.values())
        return states if ok else None

    return wait_for(
        whole, f"every partition of {topic} to have its {REPLICAS} replicas in sync", timeout
    )


def registered(c: Cluster, broker: int) -> bool:
    with zk_session(c.zk_connect) as zk:
        return zk.exists(f"/brokers/ids/{broker}") is not None


def bounce(c: Cluster, broker: int, topic: str, hard: bool) -> str:
    """Stops ``broker`` (kill -9, or SIGTERM and its controlled shutdown), waits for the
    cluster to notice (its registration gone, its partitions led by others), starts it
    again and waits for every ISR of ``topic`` to be whole; the times, in words."""
    node = c.nodes[broker]
    started = time.monotonic()
    if hard:
        node.kill()
    else:
        node.terminate()
    stopped = time.monotonic() - started
    wait_for(
        lambda: not registered(c, broker),
        f"broker {broker}'s registration to go",
        timeout=SESSION_S + 15,
    )
    wait_for(
        lambda: (
            (states := partition_states(c.live_bootstrap(), topic, c.client_conf))
            and all(s.leader > 0 and s.leader != broker for s in states.values())
        ),
        f"the partitions of {topic} to be led by brokers other than {broker}",
        timeout=30,
    )
    failed_over = time.monotonic() - started
    node.launch()
    node.wait_started()
    wait_whole(c, topic)
    return (
        f"{'kill -9' if hard else 'SIGTERM'} of broker {broker}: stopped {stopped:.1f}s, "
        f"partitions led elsewhere {failed_over:.1f}s, ISR whole again "
        f"{time.monotonic() - started:.1f}s"
    )


# What a request sent to the partition's leader as a client's metadata named it may get
# while that leader moves.
LEADER_MOVED = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


def high_watermarks(
    bootstrap: str, topic: str, partitions: int, conf: Mapping[str, Any] | None = None
) -> dict[int, int]:
    """Partition -> high watermark (ListOffsets latest, answered by its leader).

    librdkafka sends the ListOffsets to the leader its metadata names and does not retry a
    NOT_LEADER answer: a leader that moved since (the automatic leader rebalance, 5 s
    after a controller takes over) or a broker's metadata a moment behind makes one
    attempt fail, so a retriable error is asked again, for at most 30 s."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", **(conf or {})})

    def watermark(p: int) -> int:
        tp = TopicPartition(topic, p)
        deadline = time.monotonic() + 30
        while True:
            try:
                return int(c.get_watermark_offsets(tp, timeout=10, cached=False)[1])
            except KafkaException as e:
                if e.args[0].code() not in LEADER_MOVED or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    try:
        return {p: watermark(p) for p in range(partitions)}
    finally:
        c.close()


def read_all(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float = 60,
    conf: Mapping[str, Any] | None = None,
) -> list[Any]:
    """``count`` messages of ``topic`` read from the start by a consumer in a new group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **(conf or {}),
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
        # A moment more: anything beyond ``count`` would be a record nobody wrote.
        end = time.monotonic() + 1
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out


def assert_replicas_identical(c: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Every replica of every partition holds the same batches, byte for byte, below the
    high watermark (producing stopped, the ISR whole); the watermarks."""
    wait_whole(c, topic)
    hws = high_watermarks(c.bootstrap, topic, partitions, c.client_conf)
    dirs = {i: n.data_dir for i, n in c.nodes.items()}
    for p in range(partitions):
        problems = replica_logs.differences(dirs, topic, p, hws[p])
        assert not problems, f"{topic}-{p} below {hws[p]}:\n" + "\n".join(problems)
    return hws


# -- a producer and a consumer group at work ------------------------------------------


@dataclass
class Acked:
    partition: int
    offset: int | None  # None: acknowledged without one (librdkafka's implicit ack)
    value: bytes


@dataclass
class Writer:
    """Writes unique values (``name-n``) round the partitions from a thread of its own,
    recording each acknowledgement and each failed write."""

    bootstrap: str
    topic: str
    partitions: int
    name: str
    conf: dict[str, Any]
    # At most this many writes a second, and this many unanswered.
    rate: float = 100
    in_flight: int = 2000
    acked: list[Acked] = field(default_factory=list)
    failed: list[tuple[bytes, KafkaError]] = field(default_factory=list)
    longest_gap: float = 0.0
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _unflushed: int = 0

    def start(self) -> Writer:
        self._thread = threading.Thread(target=self._run, name=f"writer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 60) -> None:
        """Stops writing and waits for an answer to every write."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"writer {self.name} did not stop in {timeout}s"
        assert self._unflushed == 0, f"writer {self.name}: {self._unflushed} writes unanswered"

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **self.conf})
        last_ack = time.monotonic()

        def delivered(err: KafkaError | None, msg: Any) -> None:
            nonlocal last_ack
            if err is not None:
                self.failed.append((msg.value(), err))
                return
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last_ack)
            last_ack = now
            self.acked.append(Acked(msg.partition(), msg.offset(), msg.value()))

        interval = 1 / self.rate
        while not self._stop.is_set():
            if self.sent - len(self.acked) - len(self.failed) >= self.in_flight:
                producer.poll(0.05)
                continue
            value = f"{self.name}-{self.sent}".encode()
            producer.produce(
                self.topic,
                value=value,
                partition=self.sent % self.partitions,
                on_delivery=delivered,
            )
            self.sent += 1
            producer.poll(interval)
        self._unflushed = producer.flush(60)

    def wait_acked(self, count: int, timeout: float = 30) -> None:
        wait_for(lambda: len(self.acked) >= count, f"{count} acknowledgements", timeout)


@dataclass
class GroupReader:
    """A consumer in a group, reading from a thread and committing every ``every``
    records (synchronously; failures counted, as a coordinator may be moving)."""

    bootstrap: str
    topic: str
    group: str
    every: int = 200
    # More consumer settings (security).
    conf: Mapping[str, Any] = field(default_factory=dict)
    seen: list[tuple[int, int, bytes]] = field(default_factory=list)
    commits: int = 0
    failed_commits: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _want: dict[int, int] | None = None  # partition -> end offset, to stop at
    _done: threading.Event = field(default_factory=threading.Event)
    committed: dict[int, int] = field(default_factory=dict)

    def start(self) -> GroupReader:
        self._thread = threading.Thread(target=self._run, name=f"group-{self.group}", daemon=True)
        self._thread.start()
        return self

    def finish(self, ends: dict[int, int], timeout: float = 60) -> None:
        """Reads on up to ``ends`` (partition -> end offset), commits and leaves."""
        self._want = ends
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(15)
        assert self._done.is_set(), f"group {self.group} did not reach {ends} in {timeout}s"

    def _reached(self, positions: dict[int, int]) -> bool:
        return self._want is not None and all(
            positions.get(p, 0) >= end for p, end in self._want.items()
        )

    def _commit(self, consumer: Consumer) -> bool:
        try:
            consumer.commit(asynchronous=False)
            self.commits += 1
            return True
        except KafkaException as exc:
            self.failed_commits.append(str(exc.args[0]))
            return False

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **self.conf,
            }
        )
        consumer.subscribe([self.topic])
        positions: dict[int, int] = {}
        uncommitted = 0
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None:
                    if msg.error() is not None:
                        self.errors.append(str(msg.error()))
                        continue
                    self.seen.append((msg.partition(), msg.offset(), msg.value()))
                    positions[msg.partition()] = msg.offset() + 1
                    uncommitted += 1
                    if uncommitted >= self.every and self._commit(consumer):
                        uncommitted = 0
                if self._reached(positions):
                    deadline = time.monotonic() + 30
                    while not self._commit(consumer) and time.monotonic() < deadline:
                        time.sleep(0.5)
                    parts = [TopicPartition(self.topic, p) for p in positions]
                    found = consumer.committed(parts, timeout=10)
                    self.committed = {tp.partition: tp.offset for tp in found}
                    self._done.set()
                    return
        finally:
            consumer.close()


# -- the scenarios --------------------------------------------------------------------


@pytest.mark.timeout(120 + 60 * BOUNCES)
def test_leader_and_controller_bounces_lose_and_duplicate_nothing(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with replicated_cluster(system, zookeeper, tmp_path) as c:
        # CI size: the controller killed once; full size: as often as the leader.
        controller = (True,) if BOUNCES <= 2 else (False, True) * BOUNCES
        bounces_lose_and_duplicate_nothing(c, (False, True) * BOUNCES, controller)


def bounces_lose_and_duplicate_nothing(
    c: Cluster, leader_bounces: Sequence[bool], controller_bounces: Sequence[bool]
) -> None:
    """While an idempotent acks=all producer writes to three partitions and a group reads,
    the leader of partition 0 is bounced (``leader_bounces``: True a kill -9, False a
    SIGTERM), then the controller (``controller_bounces``); no write fails, a fresh group
    reads every acknowledged record once where it was acknowledged and nothing else, the
    group that read throughout saw everything and committed the ends, and the replicas
    are identical. Prints what happened (``-s``)."""
    system = c.system
    partitions = 3
    topic = f"bounce-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(c, topic, partitions)
    writer = Writer(
        c.bootstrap,
        topic,
        partitions,
        "idem",
        {
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": 120000,
            **c.client_conf,
        },
    ).start()
    group = GroupReader(c.bootstrap, topic, f"throughout-{topic}", conf=c.client_conf).start()
    try:
        writer.wait_acked(300)
        wait_for(lambda: len(group.seen) >= 100, "the group to read", timeout=30)
        log: list[str] = []
        for hard in leader_bounces:
            leader = leader_of(c, topic, 0)
            log.append(f"leader: {bounce(c, leader, topic, hard)}")
        for hard in controller_bounces:
            controller = wait_for(c.controller_id, "a controller")
            log.append(f"controller: {bounce(c, controller, topic, hard)}")
        # A few more writes once every broker is back.
        writer.wait_acked(len(writer.acked) + 200)
    finally:
        writer.stop()
    print(f"\n[{system}] " + f"\n[{system}] ".join(log))
    print(
        f"[{system}] {len(writer.acked)} acknowledged, {len(writer.failed)} failed, "
        f"longest gap between acknowledgements {writer.longest_gap:.1f}s"
    )
    assert not writer.failed, writer.failed[:5]
    assert len(writer.acked) >= 500

    hws = assert_replicas_identical(c, topic, partitions)
    # A fresh group reads every acknowledged record once, where it was acknowledged.
    msgs = read_all(c.bootstrap, topic, sum(hws.values()), conf=c.client_conf)
    read = {(m.partition(), m.offset()): m.value() for m in msgs}
    values = [m.value() for m in msgs]
    offset_of = where_acked(msgs)
    missing = [a for a in writer.acked if read.get((a.partition, offset_of(a))) != a.value]
    implicit = sum(1 for a in writer.acked if a.offset is None)
    print(
        f"[{system}] high watermarks {hws}: read {len(msgs)}, {len(missing)} acknowledged "
        f"records lost, {len(values) - len(set(values))} duplicated, {implicit} acknowledged "
        "without an offset"
    )
    assert sum(hws.values()) == len(writer.acked)
    assert len(values) == len(set(values)), "a value was read twice"
    assert len(read) == len(msgs), "an offset was read twice"
    assert not missing, f"{len(missing)} acknowledged records not read where acked: {missing[:5]}"
    assert len(msgs) == len(writer.acked)

    # The group that read throughout saw everything and committed the end.
    group.finish(hws)
    print(
        f"[{system}] group read {len(group.seen)} records ({group.commits} commits, "
        f"{len(group.failed_commits)} failed: {group.failed_commits[:3]})"
    )
    by_offset = {(a.partition, offset_of(a)): a.value for a in writer.acked}
    assert all(by_offset.get((p, o)) == v for p, o, v in group.seen)
    assert {v for _, _, v in group.seen} == {a.value for a in writer.acked}
    assert group.committed == hws


def where_acked(msgs: Sequence[Any]) -> Callable[[Acked], int | None]:
    """The offset each acknowledged record is to be read at, given the records read.

    librdkafka acknowledges a record without its offset when the answer to its own request
    was lost (a leader bounced) and a later batch of the idempotent producer's was accepted
    (an implicit ack: the broker checks sequences, so the earlier one was written). Such a
    record must be in its partition (once: callers count duplicates), where the producer
    could not say."""
    found_at = {(m.partition(), m.value()): m.offset() for m in msgs}

    def offset_of(a: Acked) -> int | None:
        return a.offset if a.offset is not None else found_at.get((a.partition, a.value))

    return offset_of


class ClientLog(logging.Handler):
    """librdkafka's log lines of one client (its ``logger``; ``debug`` says which)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:8]}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def write(
    bootstrap: str, topic: str, values: list[bytes], **conf: Any
) -> list[tuple[bytes, KafkaError | None, int]]:
    """Writes ``values`` to partition 0 with a new producer: (value, error, offset) each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports: list[tuple[bytes, KafkaError | None, int]] = []
    for v in values:
        producer.produce(
            topic,
            value=v,
            partition=0,
            on_delivery=lambda err, msg: reports.append((msg.value(), err, msg.offset())),
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    return reports


# librdkafka's debug line for a produce the leader refused this way (and not with
# NOT_ENOUGH_REPLICAS_AFTER_APPEND, "... in-sync replicas after append").
REFUSED_LINE = re.compile(r"encountered error: Broker: Not enough in-sync replicas \(actions ")


def test_two_replicas_down_refuse_acks_all_and_take_acks_1(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    topic = f"isr-{uuid.uuid4().hex[:6]}"
    with replicated_cluster(system, zookeeper, tmp_path) as c:
        create_replicated_topic(c, topic, 1)
        before = write(c.bootstrap, topic, [f"before-{i}".encode() for i in range(100)], acks="all")
        assert [err for _, err, _ in before] == [None] * 100
        leader = leader_of(c, topic, 0)
        followers = [i for i in c.nodes if i != leader]
        started = time.monotonic()
        for f in followers:
            c.nodes[f].kill()
        alone = c.nodes[leader].bootstrap
        wait_for(
            lambda: (s := partition_states(alone, topic).get(0)) and s.isr == (leader,),
            f"the ISR to shrink to the leader {leader}",
            timeout=SESSION_S + LAG_MS / 1000 + 20,
        )
        print(
            f"\n[{system}] ISR down to the leader {leader} after {time.monotonic() - started:.1f}s"
        )

        # acks=all is refused: at once without retries (the error is the broker's)...
        once = write(alone, topic, [f"once-{i}".encode() for i in range(10)], acks="all", retries=0)
        assert [err.code() if err else None for _, err, _ in once] == [
            KafkaError.NOT_ENOUGH_REPLICAS
        ] * 10
        # ... and an idempotent producer retries it until message.timeout.ms: then the
        # delivery report says _MSG_TIMED_OUT, while its log shows the broker's answers.
        log = ClientLog()
        retried = write(
            alone,
            topic,
            [f"retried-{i}".encode() for i in range(10)],
            acks="all",
            **{
                "enable.idempotence": True,
                "message.timeout.ms": 3000,
                "debug": "msg",
                "logger": log.logger,
            },
        )
        assert [err.code() if err else None for _, err, _ in retried] == [
            KafkaError._MSG_TIMED_OUT
        ] * 10
        answers = [line for line in log.lines if "encountered error" in line]
        assert answers, log.lines[-20:]
        assert all(REFUSED_LINE.search(line) for line in answers), answers
        print(f"[{system}] the idempotent producer was refused {len(answers)} times")

        # acks=1 still succeeds: the leader alone holds it.
        acks1 = write(alone, topic, [f"acks1-{i}".encode() for i in range(100)], acks=1)
        assert [err for _, err, _ in acks1] == [None] * 100

        started = time.monotonic()
        for f in followers:
            c.nodes[f].launch()
        for f in followers:
            c.nodes[f].wait_started()
        state = wait_whole(c, topic)[0]
        print(f"[{system}] ISR whole again after {time.monotonic() - started:.1f}s")
        assert state.leader == leader

        # Every acknowledged record is there, where it was acknowledged; nothing refused is.
        acked = {off: v for v, _, off in before + acks1}
        assert sorted(acked) == list(range(200))
        hws = high_watermarks(c.bootstrap, topic, 1)
        assert hws == {0: 200}
        msgs = read_all(c.bootstrap, topic, 200)
        assert {m.offset(): m.value() for m in msgs} == acked
        assert len(msgs) == 200
        assert_replicas_identical(c, topic, 1)


def test_divergent_replicas_are_truncated_to_identical_bytes(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    topic = f"diverge-{uuid.uuid4().hex[:6]}"
    with replicated_cluster(system, zookeeper, tmp_path) as c:
        create_replicated_topic(c, topic, 1)
        # acks=1: a killed leader may hold records no follower fetched, which the new
        # leader never had; they must go when it comes back as a follower.
        loose = Writer(c.bootstrap, topic, 1, "acks1", {"acks": 1}).start()
        idem = Writer(
            c.bootstrap,
            topic,
            1,
            "idem",
            {"enable.idempotence": True, "acks": "all", "message.timeout.ms": 120000},
        ).start()
        log: list[str] = []
        bounces = (True, True, False)
        try:
            loose.wait_acked(200)
            idem.wait_acked(200)
            for hard in bounces:
                leader = leader_of(c, topic, 0)
                log.append(bounce(c, leader, topic, hard))
                idem.wait_acked(len(idem.acked) + 100)
        finally:
            loose.stop()
            idem.stop()
        print(f"\n[{system}] " + f"\n[{system}] ".join(log))

        hws = assert_replicas_identical(c, topic, 1)
        leader = leader_of(c, topic, 0)
        batches = replica_logs.batches_below(c.nodes[leader].data_dir, topic, 0, hws[0])
        epochs = [b.leader_epoch for b in batches]
        assert epochs == sorted(epochs), "partition leader epochs go back along the log"
        # Every leader change while writing shows as a new epoch (Kafka's ZooKeeper
        # controller also bumps it when it shrinks an ISR: more may appear).
        assert len(set(epochs)) >= 1 + len(bounces), sorted(set(epochs))

        msgs = read_all(c.bootstrap, topic, hws[0])
        read = {m.offset(): m.value() for m in msgs}
        assert len(read) == len(msgs) == hws[0]
        assert not idem.failed, idem.failed[:5]
        offset_of = where_acked(msgs)
        missing = [a for a in idem.acked if read.get(offset_of(a)) != a.value]
        assert not missing, f"acks=all records not where acknowledged: {missing[:5]}"
        idem_values = [v for v in read.values() if v.startswith(b"idem-")]
        assert len(idem_values) == len(set(idem_values)) == len(idem.acked)
        lost = sum(1 for a in loose.acked if read.get(a.offset) != a.value)
        print(
            f"[{system}] {len(batches)} batches below {hws[0]}, epochs {sorted(set(epochs))}; "
            f"acks=1: {len(loose.acked)} acknowledged, {lost} of them lost, "
            f"{len(loose.failed)} failed; acks=all: {len(idem.acked)} acknowledged"
        )


def group_coordinator(c: Cluster, group: str) -> int | None:
    """The broker id of ``group``'s coordinator (FindCoordinator to a live broker), or None
    while there is none. (A raw request: librdkafka's admin client, destroyed after a
    coordinator lookup failed, can abort the process on an assertion of its own.)"""
    for node in c.nodes.values():
        if not node.alive:
            continue
        try:
            with BrokerClient(node.bootstrap, timeout=5) as client:
                found = client.request(
                    ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group, key_type=0)
                )
        except (OSError, ClientError):
            continue
        return int(found.node_id) if found.error_code == ErrorCode.NONE else None
    return None


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int] | None:
    """Partition -> ``group``'s committed offset (OffsetFetch through its coordinator, found
    through ``bootstrap``; a consumer that does not join), or None while none answers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 5)
    except KafkaException:
        return None
    finally:
        consumer.close()
    if any(tp.error is not None for tp in found):
        return None
    return {tp.partition: tp.offset for tp in found}


def test_group_keeps_its_offsets_when_its_coordinator_is_killed(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    partitions, per_partition = 2, 500
    topic = f"coord-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    with replicated_cluster(system, zookeeper, tmp_path) as c:
        create_replicated_topic(c, topic, partitions)
        values = [f"v-{i}".encode() for i in range(partitions * per_partition)]
        # Small batches, fetched a few at a time: the group reads the partitions in turn.
        # (It stops at each one's half, too.)
        producer = Producer(
            {
                "bootstrap.servers": c.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 20,
            }
        )
        reports = send_to_partitions(producer, topic, values, partitions)
        assert all(err is None for err, _ in reports)
        ends = {p: per_partition for p in range(partitions)}
        assert high_watermarks(c.bootstrap, topic, partitions) == ends

        consumer = Consumer(
            {
                "bootstrap.servers": c.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "max.partition.fetch.bytes": 1024,
            }
        )
        consumer.subscribe([topic])
        before: list[tuple[int, int]] = []
        after: list[tuple[int, int]] = []
        try:
            # Half of each partition: one that reached its half is paused meanwhile.
            half = per_partition // 2
            deadline = time.monotonic() + 30
            while len({p for p, o in before if o >= half - 1}) < partitions:
                assert time.monotonic() < deadline, f"read {len(before)} of half in 30s"
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                before.append((msg.partition(), msg.offset()))
                if msg.offset() == half - 1:
                    consumer.pause([TopicPartition(topic, msg.partition())])
            # Each partition's next offset.
            committed = {p: 1 + max(o for q, o in before if q == p) for p in ends}
            consumer.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
                asynchronous=False,
            )
            consumer.resume([TopicPartition(topic, p) for p in ends])
            assert sum(committed.values()) == len(before)
            assert group_offsets(c.bootstrap, group, topic, partitions) == committed
            # Read on without committing: these may be read again.
            poll_into(consumer, before, len(before) + 100, timeout=30)

            coordinator = wait_for(lambda: group_coordinator(c, group), "the group's coordinator")
            started = time.monotonic()
            c.nodes[coordinator].kill()
            # The offsets committed before are intact, through another broker.
            intact = wait_for(
                lambda: group_offsets(c.live_bootstrap(), group, topic, partitions),
                "the group's offsets from a new coordinator",
                timeout=SESSION_S + 30,
                interval=0.5,
            )
            moved_to = wait_for(
                lambda: (new := group_coordinator(c, group)) not in (None, coordinator) and new,
                "a new coordinator",
            )
            print(
                f"\n[{system}] coordinator {coordinator} killed: offsets from "
                f"coordinator {moved_to} after {time.monotonic() - started:.1f}s; "
                f"committed {committed}"
            )
            assert intact == committed

            # The same consumer keeps reading, from no earlier than the committed offsets.
            positions = {p: 0 for p in range(partitions)}
            for p, o in before:
                positions[p] = max(positions[p], o + 1)

            def reached() -> bool:
                return all(positions[p] >= end for p, end in ends.items())

            deadline = time.monotonic() + 60
            while not reached() and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                after.append((msg.partition(), msg.offset()))
                positions[msg.partition()] = max(positions[msg.partition()], msg.offset() + 1)
            assert reached(), f"read up to {positions} of {ends} in 60s"
            deadline = time.monotonic() + 30
            while True:
                try:
                    consumer.commit(asynchronous=False)
                    break
                except KafkaException:
                    assert time.monotonic() < deadline, "no commit took in 30s"
                    time.sleep(0.5)
        finally:
            consumer.close()

        # Read again after the kill: only what was not committed (a rebalance may repeat
        # it more than once; Kafka keeps the member through the move and repeats nothing).
        first = set(before)
        again = [(p, o) for p, o in after if (p, o) in first]
        print(
            f"[{system}] read {len(before)} before the kill, {len(after)} after "
            f"({len(again)} of them again, {len(after) - len(set(after))} twice after it)"
        )
        assert all(o >= committed[p] for p, o in after), "read again from before the commit"
        for p in range(partitions):
            seen = {o for q, o in before + after if q == p}
            assert seen == set(range(per_partition)), f"partition {p}: a gap"
        assert group_offsets(c.live_bootstrap(), group, topic, partitions) == ends


def send_to_partitions(
    producer: Producer, topic: str, values: list[bytes], partitions: int
) -> list[tuple[KafkaError | None, Any]]:
    """Writes ``values`` round the partitions, flushes; the delivery reports."""
    reports: list[tuple[KafkaError | None, Any]] = []
    for i, v in enumerate(values):
        producer.produce(
            topic,
            value=v,
            partition=i % partitions,
            on_delivery=lambda err, msg: reports.append((err, msg)),
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    return reports


def poll_into(consumer: Consumer, into: list[tuple[int, int]], count: int, timeout: float) -> None:
    """Polls until ``into`` holds ``count`` (partition, offset) pairs."""
    deadline = time.monotonic() + timeout
    while len(into) < count:
        assert time.monotonic() < deadline, f"read {len(into)} of {count} in {timeout}s"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        into.append((msg.partition(), msg.offset()))


def test_replica_logs_reads_the_batches_a_broker_wrote(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """replica_logs against each system's files (one replica: runs on kbroker today)."""
    topic = f"files-{uuid.uuid4().hex[:6]}"
    chroot = f"/files-{uuid.uuid4().hex[:8]}"
    with cluster(system, zookeeper.connect, chroot, tmp_path, size=1) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(60)
        producer = Producer(
            {"bootstrap.servers": c.bootstrap, "linger.ms": 5, "batch.num.messages": 50}
        )
        values = [f"f-{i}".encode() for i in range(500)]
        assert all(err is None for err, _ in send_to_partitions(producer, topic, values, 1))
        hw = high_watermarks(c.bootstrap, topic, 1)[0]
        assert hw == 500
        batches = replica_logs.batches_below(c.nodes[1].data_dir, topic, 0, hw)
        assert len(batches) >= 10
        assert replica_logs.differences({1: c.nodes[1].data_dir}, topic, 0, hw) == []
        assert {b.leader_epoch for b in batches} == {0}
        assert all(v in b"".join(b.data for b in batches) for v in values[:: len(values) // 7])
        # Below a lower mark: the batches wholly below it.
        mid = batches[len(batches) // 2].base_offset
        assert (
            replica_logs.batches_below(c.nodes[1].data_dir, topic, 0, mid)
            == batches[: len(batches) // 2]
        )
