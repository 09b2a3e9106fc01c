"""Offsets committed in transactions, on one broker: Apache Kafka 3.9.1 first, then kbroker.

A transactional producer commits a consumer group's offsets with
``send_offsets_to_transaction`` (AddOffsetsToTxn, then TxnOffsetCommit to the
group coordinator). The offsets are the group's only once the transaction
commits; until its marker, OffsetFetch with require_stable (KIP-447) answers
UNSTABLE_OFFSET_COMMIT, and at abort they are dropped. Of a transactional
commit and a consumer's commit of the same partition, the later record wins
when the transaction commits. A pending transactional commit survives a crash
of the broker (kill -9): it is replayed from ``__consumer_offsets`` and ends
with its transaction. The consume-transform-produce loop built on this is
exactly once.

Every test runs on both systems (the ``single`` fixture: one broker of each
for the module, Kafka's first, with the same settings); the restart test
comes last (it restarts the module's broker).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import FindCoordinatorRequest, OffsetFetchRequest
from kbroker.tools.client import ClientError
from tests.cluster.kafka_zk import prepare_kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess, Wire, free_port, wait_for

pytestmark = pytest.mark.timeout(180)

E = ErrorCode
# ZooKeeper's session of Kafka's broker: a restart after kill -9 waits for it to expire.
ZK_SESSION_MS = 6000
SETTINGS = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class Single:
    system: str
    bootstrap: str
    # kill -9, then start again on the same data and port
    restart: Callable[[], None]


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def single(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Single]:
    system = str(request.param)
    root = tmp_path_factory.mktemp(f"txn-offsets-{system}")
    if system == "kafka":
        require_kafka()
        zookeeper = request.getfixturevalue("zookeeper")
        chroot = f"/txn-offsets-{uuid.uuid4().hex[:8]}"
        kafka = prepare_kafka_zk_broker(
            zookeeper.connect,
            chroot,
            root,
            settings={**SETTINGS, "zookeeper.session.timeout.ms": str(ZK_SESSION_MS)},
        )

        def restart_kafka() -> None:
            kafka.kill()
            # The killed broker's registration lasts until its ZooKeeper session expires;
            # a broker started before that refuses to start.
            zk = KazooClient(hosts=zookeeper.connect + chroot, timeout=10)
            zk.start(timeout=10)
            try:
                wait_for(lambda: not zk.exists("/brokers/ids/1"), "the old session to expire")
            finally:
                zk.stop()
                zk.close()
            kafka.launch()
            kafka.wait_started()

        kafka.launch()
        try:
            kafka.wait_started()
            yield Single(system, kafka.bootstrap, restart_kafka)
        finally:
            kafka.kill()
    else:
        broker = BrokerProcess(root / "data", port=free_port())
        settings = [f"{k}={v}" for k, v in SETTINGS.items()]
        broker.start(*settings)

        def restart() -> None:
            broker.kill()
            broker.start(*settings)

        try:
            yield Single(system, broker.bootstrap, restart)
        finally:
            broker.kill()


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def transactional_producer(bootstrap: str, **conf: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 60000,
            **conf,
        }
    )
    producer.init_transactions(30)
    return producer


def consumer(bootstrap: str, group: str, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            **conf,
        }
    )


def fetch_offsets(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, Any]:
    """OffsetFetch v7 with require_stable: partition -> committed offset, or the error (asked
    again while the coordinator is not ready)."""
    retry = (E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE)
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.Topic(name=topic, partition_indexes=partitions)],
        require_stable=True,
    )

    def ask() -> Any:
        try:
            with Wire(bootstrap) as w:
                find = FindCoordinatorRequest(key=group, key_type=0)
                if w.request(ApiKey.FIND_COORDINATOR, 3, find).error_code != E.NONE:
                    return None
                resp = w.request(ApiKey.OFFSET_FETCH, 7, request)
        except ClientError:
            return None  # restarting
        return None if resp.error_code in retry else resp

    resp = wait_for(ask, "the group coordinator", timeout=60)
    assert resp.error_code == E.NONE
    return {
        p.partition_index: E(p.error_code) if p.error_code else p.committed_offset
        for t in resp.topics
        for p in t.partitions
    }


def settled(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, Any]:
    """The offsets once no transaction holds them (a marker lands after EndTxn answers)."""
    return wait_for(
        lambda: (
            found
            if E.UNSTABLE_OFFSET_COMMIT
            not in (found := fetch_offsets(bootstrap, group, topic, partitions)).values()
            else None
        ),
        "the transaction's marker",
        timeout=30,
    )


def test_offsets_wait_for_the_transaction_and_go_at_abort(single: Single) -> None:
    topic = new_topic(single.bootstrap, 2)
    group = f"g-{topic}"
    c = consumer(single.bootstrap, group)
    p = transactional_producer(single.bootstrap)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 30)
        # Pending: stable readers are told to retry; the committed offset is still 3.
        assert fetch_offsets(single.bootstrap, group, topic, [0, 1]) == {
            0: E.UNSTABLE_OFFSET_COMMIT,
            1: -1,
        }
        p.commit_transaction(30)
        assert settled(single.bootstrap, group, topic, [0, 1]) == {0: 7, 1: -1}

        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 9), TopicPartition(topic, 1, 4)], meta, 30
        )
        assert fetch_offsets(single.bootstrap, group, topic, [0, 1]) == {
            0: E.UNSTABLE_OFFSET_COMMIT,
            1: E.UNSTABLE_OFFSET_COMMIT,
        }
        p.abort_transaction(30)
        assert settled(single.bootstrap, group, topic, [0, 1]) == {0: 7, 1: -1}
    finally:
        c.close()


def test_the_later_record_wins_between_a_transaction_and_a_consumer(single: Single) -> None:
    """A consumer's commit made while a transaction holds offsets of the same partition:
    whichever record is later in ``__consumer_offsets`` is the committed offset once the
    transaction commits (Kafka orders them by record offset, not by marker)."""
    topic = new_topic(single.bootstrap, 1)
    group = f"g-{topic}"
    c = consumer(single.bootstrap, group)
    p = transactional_producer(single.bootstrap)
    try:
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 11)], meta, 30)
        c.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
        p.commit_transaction(30)
        assert settled(single.bootstrap, group, topic, [0]) == {0: 12}

        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 15)], meta, 30)
        p.commit_transaction(30)
        assert settled(single.bootstrap, group, topic, [0]) == {0: 15}
    finally:
        c.close()


def _consume(c: Consumer, count: int, timeout: float = 30) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            continue
        got.append(msg)
    return got


def test_consume_transform_produce_is_exactly_once(single: Single) -> None:
    """The loop of a stream processor: read a batch, write its results and its input
    offsets in one transaction. One batch is aborted and read again from the committed
    offsets: every input is in the output exactly once for read_committed readers."""
    source = new_topic(single.bootstrap, 2)
    sink = new_topic(single.bootstrap, 1)
    group = f"g-{source}"
    plain = Producer({"bootstrap.servers": single.bootstrap})
    inputs = [f"v{i}" for i in range(40)]
    for i, value in enumerate(inputs):
        plain.produce(source, value.encode(), partition=i % 2)
    assert plain.flush(30) == 0

    c = consumer(single.bootstrap, group)
    p = transactional_producer(single.bootstrap)
    c.subscribe([source])
    rounds = 0
    try:
        done = 0
        while done < len(inputs):
            batch = _consume(c, 8)
            assert batch, "the source ran dry before every input was processed"
            p.begin_transaction()
            for msg in batch:
                p.produce(sink, msg.value().upper())
            p.send_offsets_to_transaction(
                c.position(c.assignment()), c.consumer_group_metadata(), 30
            )
            rounds += 1
            if rounds == 2:
                # Processing failed: nothing of this round counts; read it again from
                # the offsets the group has committed (the transactions' ones).
                p.abort_transaction(30)
                committed = c.committed(c.assignment(), 30)
                for tp in committed:
                    tp.offset = tp.offset if tp.offset >= 0 else 0
                    c.seek(tp)
                continue
            p.commit_transaction(30)
            done += len(batch)
    finally:
        c.close()

    def read(isolation: str) -> list[bytes]:
        reader = consumer(
            single.bootstrap, f"reader-{uuid.uuid4().hex[:6]}", **{"isolation.level": isolation}
        )
        reader.subscribe([sink])
        try:
            return [m.value() for m in _consume(reader, 100, timeout=15)]
        finally:
            reader.close()

    committed_output = read("read_committed")
    assert sorted(committed_output) == sorted(v.upper().encode() for v in inputs)
    assert len(read("read_uncommitted")) > len(inputs)  # the aborted round is in the log
    assert settled(single.bootstrap, group, source, [0, 1]) == {0: 20, 1: 20}
    # The group resumes after the last committed transaction: nothing is left to read.
    again = consumer(single.bootstrap, group)
    again.subscribe([source])
    try:
        assert _consume(again, 1, timeout=8) == []
    finally:
        again.close()


def test_a_pending_transactional_commit_survives_a_crash(single: Single, tmp_path: Path) -> None:
    """kill -9 of the broker while a transaction holds offsets: reloaded from the log, they
    are still pending, and the transaction's end decides them (here: its commit)."""
    topic = new_topic(single.bootstrap, 1)
    group = f"g-{topic}"
    c = consumer(single.bootstrap, group)
    p = transactional_producer(single.bootstrap)
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 5)], c.consumer_group_metadata(), 30
        )
        single.restart()
        assert fetch_offsets(single.bootstrap, group, topic, [0]) == {0: E.UNSTABLE_OFFSET_COMMIT}
        p.commit_transaction(60)
        assert settled(single.bootstrap, group, topic, [0]) == {0: 5}
    finally:
        c.close()
