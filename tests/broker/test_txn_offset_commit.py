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

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from kazoo.client import KazooClient

from kbroker.protocol import ErrorCode
from tests.broker.transactions import (
    consume,
    consumer,
    fetch_offsets,
    new_topic,
    produce_inputs,
    read_sink,
    rewind,
    run_in_transaction,
    settled,
    transactional_producer,
)
from tests.cluster.kafka_zk import prepare_kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess, free_port, wait_for

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

    @property
    def conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}

    @property
    def bootstraps(self) -> list[str]:
        return [self.bootstrap]


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


def test_offsets_wait_for_the_transaction_and_go_at_abort(single: Single) -> None:
    topic = new_topic(single.conf, 2)
    group = f"g-{topic}"
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 30)
        # Pending: stable readers are told to retry; the committed offset is still 3.
        assert fetch_offsets(single.bootstraps, group, topic, [0, 1]) == {
            0: E.UNSTABLE_OFFSET_COMMIT,
            1: -1,
        }
        p.commit_transaction(30)
        assert settled(single.bootstraps, group, topic, [0, 1]) == {0: 7, 1: -1}

        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 9), TopicPartition(topic, 1, 4)], meta, 30
        )
        assert fetch_offsets(single.bootstraps, group, topic, [0, 1]) == {
            0: E.UNSTABLE_OFFSET_COMMIT,
            1: E.UNSTABLE_OFFSET_COMMIT,
        }
        p.abort_transaction(30)
        assert settled(single.bootstraps, group, topic, [0, 1]) == {0: 7, 1: -1}
    finally:
        c.close()


def test_the_later_record_wins_between_a_transaction_and_a_consumer(single: Single) -> None:
    """A consumer's commit made while a transaction holds offsets of the same partition:
    whichever record is later in ``__consumer_offsets`` is the committed offset once the
    transaction commits (Kafka orders them by record offset, not by marker)."""
    topic = new_topic(single.conf, 1)
    group = f"g-{topic}"
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    try:
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 11)], meta, 30)
        c.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
        p.commit_transaction(30)
        assert settled(single.bootstraps, group, topic, [0]) == {0: 12}

        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 15)], meta, 30)
        p.commit_transaction(30)
        assert settled(single.bootstraps, group, topic, [0]) == {0: 15}
    finally:
        c.close()


def test_consume_transform_produce_is_exactly_once(single: Single) -> None:
    """The loop of a stream processor: read a batch, write its results and its input
    offsets in one transaction. One round is aborted and read again from the committed
    offsets: every input is in the output exactly once for read_committed readers."""
    source = new_topic(single.conf, 2)
    sink = new_topic(single.conf, 1)
    group = f"g-{source}"
    inputs = produce_inputs(single.conf, source, 2, 40)
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    c.subscribe([source])
    try:
        done = rounds = 0
        while done < len(inputs):
            batch = consume(c, 8)
            assert batch, "the source ran dry before every input was processed"
            rounds += 1
            if rounds == 2:
                # Processing failed: nothing of this round counts.
                p.begin_transaction()
                for msg in batch:
                    p.produce(sink, msg.value().upper())
                p.send_offsets_to_transaction(
                    c.position(c.assignment()), c.consumer_group_metadata(), 30
                )
                p.abort_transaction(30)
                rewind(c)
            elif run_in_transaction(p, c, batch, sink):
                done += len(batch)
    finally:
        c.close()

    expected = sorted(v.upper().encode() for v in inputs)
    assert sorted(read_sink(single.conf, sink, "read_committed", len(inputs))) == expected
    # The aborted round's records are in the log; read_uncommitted readers see them.
    assert len(read_sink(single.conf, sink, "read_uncommitted", len(inputs) + 1)) > len(inputs)
    assert settled(single.bootstraps, group, source, [0, 1]) == {0: 20, 1: 20}
    # The group resumes after the last committed transaction: nothing is left to read.
    again = consumer(single.conf, group)
    again.subscribe([source])
    try:
        assert consume(again, 1, timeout=8) == []
    finally:
        again.close()


def test_a_pending_transactional_commit_survives_a_crash(single: Single) -> None:
    """kill -9 of the broker while a transaction holds offsets: reloaded from the log, they
    are still pending, and the transaction's end decides them (here: its commit)."""
    topic = new_topic(single.conf, 1)
    group = f"g-{topic}"
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 5)], c.consumer_group_metadata(), 30
        )
        single.restart()
        assert fetch_offsets(single.bootstraps, group, topic, [0]) == {0: E.UNSTABLE_OFFSET_COMMIT}
        p.commit_transaction(60)
        assert settled(single.bootstraps, group, topic, [0]) == {0: 5}
    finally:
        c.close()
