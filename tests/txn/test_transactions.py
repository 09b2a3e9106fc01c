"""Transactions with a real client (confluent-kafka's transactional producer) on one broker:
Apache Kafka 3.9.1 (ZooKeeper mode) first, proving the test, then kbroker, with the same
settings.

Committed transactions are read whole and aborted ones never by read_committed consumers
(read_uncommitted ones read both); an open transaction holds read_committed readers back; a
second producer with the same transactional id fences the first (its open transaction is
aborted, its commit fails); a transaction open past its timeout is aborted by the
coordinator, which fences its producer. One broker of each system serves the module.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.txn import DescribeTransactionsRequest
from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import BrokerProcess, Wire, create_topic, knows_controller, topic_name, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

# The same for both systems: timed-out transactions are looked for twice a second.
SETTINGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        with kafka_zk_broker(
            zookeeper.connect, f"/txn-{uuid.uuid4().hex[:8]}", root, settings=SETTINGS
        ) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield kafka.bootstrap
    else:
        broker = BrokerProcess(root / "data").start(*(f"{k}={v}" for k, v in SETTINGS.items()))
        try:
            yield broker.bootstrap
        finally:
            broker.kill()


def transactional(bootstrap: str, txn: str, **conf: Any) -> Producer:
    """A transactional producer, initialised."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn, "linger.ms": 5, **conf})
    p.init_transactions(60)
    return p


def send(p: Producer, topic: str, values: list[str], partitions: int = 2) -> None:
    """Produces ``values`` round-robin over the partitions and waits until they are sent."""
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


def read(bootstrap: str, topic: str, committed: bool, partitions: int = 2) -> list[str]:
    """Everything a consumer of ``topic`` reads up to the end of each partition (for
    read_committed: the last stable offset), in partition order."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"did not reach the end of {topic}: {found}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(msg.partition())
                continue
            found[msg.partition()].append(msg.value().decode())
    finally:
        c.close()
    return [v for p in range(partitions) for v in found[p]]


def txn_state(bootstrap: str, txn: str) -> str:
    """The transaction's state as its coordinator (the one broker) describes it."""
    w = Wire(bootstrap)
    try:
        answer = w.request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[txn])
        )
        return str(answer.transaction_states[0].transaction_state)
    finally:
        w.close()


def new_topic(bootstrap: str) -> str:
    name = topic_name("txn")
    create_topic(bootstrap, name, 2)
    return name


def test_committed_transactions_are_read_whole_and_aborted_ones_never(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    p = transactional(bootstrap, f"commit-abort-{topic}")
    p.begin_transaction()
    send(p, topic, ["a0", "a1", "a2", "a3"])
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, topic, ["b0", "b1", "b2", "b3"])
    p.abort_transaction(30)
    p.begin_transaction()
    send(p, topic, ["c0", "c1"])
    p.commit_transaction(30)
    assert read(bootstrap, topic, committed=True) == ["a0", "a2", "c0", "a1", "a3", "c1"]
    assert read(bootstrap, topic, committed=False) == [
        "a0",
        "a2",
        "b0",
        "b2",
        "c0",
        "a1",
        "a3",
        "b1",
        "b3",
        "c1",
    ]
    assert txn_state(bootstrap, f"commit-abort-{topic}") == "CompleteCommit"


def test_an_open_transaction_holds_read_committed_readers_back(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    p = transactional(bootstrap, f"open-{topic}")
    p.begin_transaction()
    send(p, topic, ["x0", "x1"])
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, topic, ["open0", "open1"])
    assert read(bootstrap, topic, committed=True) == ["x0", "x1"]
    assert read(bootstrap, topic, committed=False) == ["x0", "open0", "x1", "open1"]
    assert txn_state(bootstrap, f"open-{topic}") == "Ongoing"
    p.commit_transaction(30)
    assert read(bootstrap, topic, committed=True) == ["x0", "open0", "x1", "open1"]


def test_a_second_producer_with_the_same_id_fences_the_first(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    txn = f"zombie-{topic}"
    zombie = transactional(bootstrap, txn)
    zombie.begin_transaction()
    send(zombie, topic, ["zombie0", "zombie1"])
    # The new instance: the zombie's open transaction is aborted on its way in.
    successor = transactional(bootstrap, txn)
    with pytest.raises(KafkaException) as failed:
        zombie.commit_transaction(30)
    assert failed.value.args[0].code() == KafkaError._FENCED
    successor.begin_transaction()
    send(successor, topic, ["next0", "next1"])
    successor.commit_transaction(30)
    assert read(bootstrap, topic, committed=True) == ["next0", "next1"]
    assert sorted(read(bootstrap, topic, committed=False)) == [
        "next0",
        "next1",
        "zombie0",
        "zombie1",
    ]


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(
    bootstrap: str,
) -> None:
    topic = new_topic(bootstrap)
    txn = f"slow-{topic}"
    slow = transactional(bootstrap, txn, **{"transaction.timeout.ms": 2000})
    slow.begin_transaction()
    send(slow, topic, ["late0", "late1"])
    wait_for(lambda: txn_state(bootstrap, txn) == "CompleteAbort", "the abort", timeout=30)
    with pytest.raises(KafkaException) as failed:
        slow.commit_transaction(30)
    assert failed.value.args[0].code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert read(bootstrap, topic, committed=True) == []
    assert read(bootstrap, topic, committed=False) == ["late0", "late1"]
    # A timeout beyond transaction.max.timeout.ms is refused at init.
    too_long = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn, "transaction.timeout.ms": 900_001}
    )
    with pytest.raises(KafkaException) as refused:
        too_long.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
