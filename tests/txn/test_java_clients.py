"""Apache Kafka's own Java clients against transactions on one broker: Kafka 3.9.1 (ZooKeeper
mode) first, proving each test, then kbroker, with the same settings.

The Java client (kafka-clients 3.9.1, driven by tests/java/TxnClient.java, one JVM per
scenario group): transactional produce with commit and abort, read_committed readers never
seeing aborted or open data while read_uncommitted ones do; a consume-transform-produce loop
with sendOffsetsToTransaction; zombie fencing (ProducerFencedException for the older of two
producers of one transactional id, and for one an administrator fences with
Admin.fenceProducers), a transaction aborted by its timeout, and a timeout above the
broker's maximum (INVALID_TRANSACTION_TIMEOUT).

Kafka's kafka-transactions tool (TransactionsCommand 3.9.1): list (with its filters),
describe, describe-producers and find-hanging on transactions of real producers.
One broker of each system serves the module.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.txn import ListTransactionsRequest
from tests.broker.transactions import (
    kafka_transactions,
    run_kafka_transactions,
    tool_rows,
    transactional_producer,
)
from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import (
    BrokerProcess,
    Wire,
    create_topic,
    knows_controller,
    topic_name,
    wait_for,
)
from tests.java import run_java
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

# The same for both systems: timed-out transactions are looked for twice a second, and a
# group's first member joins at once.
SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}
PARTITIONS = 2  # TxnClient.PARTITIONS


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    require_kafka()
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
            assert "Traceback" not in broker.output(), broker.output()[-4000:]
        finally:
            broker.kill()


def new_topic(bootstrap: str) -> str:
    name = topic_name("jtxn")
    create_topic(bootstrap, name, PARTITIONS)
    return name


def txn_client(bootstrap: str, *args: str) -> dict[str, str]:
    """One run of tests/java/TxnClient.java: what it observed."""
    _, lib = require_kafka()
    return run_java("TxnClient", [lib], bootstrap, *args)


def items(prefix: str, count: int) -> list[str]:
    """``partition:value`` of ``prefix0..`` sent round-robin over the partitions."""
    return [f"{i % PARTITIONS}:{prefix}{i}" for i in range(count)]


def by_partition(found: list[str]) -> str:
    """As TxnClient lists what it read: partition by partition, in the order sent."""
    return ",".join(sorted(found, key=lambda item: int(item.partition(":")[0])))


def test_java_commit_abort_and_what_each_isolation_level_reads(bootstrap: str) -> None:
    seen = txn_client(bootstrap, "commit-abort", new_topic(bootstrap))
    a, b, c = items("a", 4), items("b", 4), items("c", 4)
    # The open transaction (c) holds read_committed back; the aborted one (b) is never read.
    assert seen["open.read_committed"] == by_partition(a)
    assert seen["open.read_uncommitted"] == by_partition(a + b + c)
    assert seen["after.read_committed"] == by_partition(a + c)
    assert seen["after.read_uncommitted"] == by_partition(a + b + c)


def test_java_consume_transform_produce(bootstrap: str) -> None:
    source, sink = new_topic(bootstrap), new_topic(bootstrap)
    seen = txn_client(
        bootstrap, "consume-transform-produce", source, sink, f"g-{uuid.uuid4().hex[:8]}"
    )
    count = 20
    # Each input's result exactly once, on its input's partition; the group's offsets
    # moved with the transactions, to the end of the input.
    expected = [f"{i % PARTITIONS}:V{i}" for i in range(count)]
    assert sorted(seen["output.read_committed"].split(",")) == sorted(expected)
    assert seen["committed.offsets"] == ",".join(f"{p}:{count // PARTITIONS}" for p in range(2))
    # The aborted first round is there for read_uncommitted readers only.
    aborted = int(seen["aborted"])
    assert aborted > 0
    uncommitted = seen["output.read_uncommitted"].split(",")
    assert len(uncommitted) == count + aborted
    assert set(uncommitted) == set(expected)


def test_java_zombie_fencing_and_transaction_timeout(bootstrap: str) -> None:
    seen = txn_client(bootstrap, "fencing", new_topic(bootstrap))
    assert seen["old.commit"] == "ProducerFencedException"
    assert seen["slow.commit"] == "ProducerFencedException"
    assert seen["admin.fence"] == "none"
    assert seen["admin.commit"] == "ProducerFencedException"
    # The Java client reports INVALID_TRANSACTION_TIMEOUT by the error's description.
    assert seen["too.long.init"] == (
        "KafkaException: Unexpected error in InitProducerIdResponse; The transaction timeout "
        "is larger than the maximum value allowed by the broker (as configured by "
        "transaction.max.timeout.ms)."
    )
    old, new, slow, admin = items("old", 2), items("new", 2), items("slow", 2), items("admin", 2)
    assert seen["read_committed"] == by_partition(new)
    assert seen["read_uncommitted"] == by_partition(old + new + slow + admin)


# -- Kafka's kafka-transactions tool ------------------------------------------------------


def test_kafka_transactions_tool_on_an_open_transaction(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    conf = {"bootstrap.servers": bootstrap}
    (broker_id,) = AdminClient(conf).list_topics(timeout=10).brokers
    txn = f"tool-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(conf, txn)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(topic, b"open", partition=p)
    assert producer.flush(30) == 0
    time.sleep(0.05)  # the transaction has been open for a while

    # TransactionalId Coordinator ProducerId TransactionState
    listed = {r[0]: r for r in tool_rows(kafka_transactions(bootstrap, "list"))}
    pid = listed[txn][2]
    assert listed[txn][1:] == [str(broker_id), pid, "Ongoing"]
    longer = tool_rows(kafka_transactions(bootstrap, "list", "--duration-filter", "3600000"))
    assert txn not in {r[0] for r in longer}

    # CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState
    # TransactionTimeoutMs CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions
    (row,) = tool_rows(kafka_transactions(bootstrap, "describe", "--transactional-id", txn))
    assert row[:3] == [str(broker_id), txn, pid]
    assert row[4:6] == ["Ongoing", "60000"]
    started = row[6]
    assert 0 <= time.time() * 1000 - int(started) < 60_000
    assert sorted(row[8].split(",")) == [f"{topic}-{p}" for p in range(PARTITIONS)]

    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
    # CurrentTransactionStartOffset
    (producer_row,) = tool_rows(
        kafka_transactions(bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    )
    assert producer_row[0] == pid and producer_row[3] == "0" and producer_row[5] == "0"

    # Its coordinator knows every partition of the open transaction: nothing hangs (the
    # search of a broker's partitions; that of a topic's is in
    # tests/broker/test_transactions_partition.py).
    out = kafka_transactions(
        bootstrap, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0"
    )
    assert tool_rows(out) == [], out

    producer.commit_transaction(30)
    (row,) = wait_for(
        lambda: (
            (
                rows := tool_rows(
                    kafka_transactions(bootstrap, "describe", "--transactional-id", txn)
                )
            )[0][4]
            == "CompleteCommit"
            and rows
        ),
        "the commit to complete",
    )
    # A completed transaction keeps its start time.
    assert row[4:7] == ["CompleteCommit", "60000", started]
    assert row[8:] == []


def test_kafka_transactions_tool_describes_an_unknown_id(bootstrap: str) -> None:
    txn = f"nobody-{uuid.uuid4().hex[:8]}"
    proc = run_kafka_transactions(bootstrap, "describe", "--transactional-id", txn)
    assert proc.returncode == 1
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("Failed to describe")]
    assert line == (
        f"Failed to describe transaction state of transactional-id `{txn}`: "
        f"DescribeTransactions request for transactionalId `{txn}` failed because the ID "
        "could not be found. Enable debug logging for additional detail."
    )


def test_list_transactions_filters_on_the_wire(bootstrap: str) -> None:
    """ListTransactions' state and producer id filters (what find-hanging and other admin
    clients send), and the state names no state has."""
    topic = new_topic(bootstrap)
    conf = {"bootstrap.servers": bootstrap}
    open_id, done_id = (f"filter-{uuid.uuid4().hex[:8]}" for _ in range(2))
    ongoing = transactional_producer(conf, open_id)
    ongoing.begin_transaction()
    ongoing.produce(topic, b"x", partition=0)
    assert ongoing.flush(30) == 0
    done = transactional_producer(conf, done_id)
    done.begin_transaction()
    done.produce(topic, b"y", partition=1)
    done.commit_transaction(30)

    def listed(states: list[str], pids: list[int]) -> tuple[dict[str, Any], list[str]]:
        w = Wire(bootstrap)
        try:
            resp = w.request(
                ApiKey.LIST_TRANSACTIONS,
                1,
                ListTransactionsRequest(
                    state_filters=states, producer_id_filters=pids, duration_filter=-1
                ),
            )
        finally:
            w.close()
        assert resp.error_code == 0
        mine = {
            t.transactional_id: (t.producer_id, t.transaction_state)
            for t in resp.transaction_states
            if t.transactional_id in (open_id, done_id)
        }
        return mine, sorted(resp.unknown_state_filters)

    # EndTxn is answered once the commit is prepared; its markers follow.
    everything, unknown = wait_for(
        lambda: (found := listed([], []))[0].get(done_id, (0, ""))[1] == "CompleteCommit" and found,
        "the commit to complete",
    )
    assert {k: s for k, (_, s) in everything.items()} == {
        open_id: "Ongoing",
        done_id: "CompleteCommit",
    }
    assert unknown == []
    open_pid, done_pid = everything[open_id][0], everything[done_id][0]
    assert listed(["Ongoing"], [])[0] == {open_id: (open_pid, "Ongoing")}
    assert listed(["CompleteCommit", "Bogus", "ongoing"], []) == (
        {done_id: (done_pid, "CompleteCommit")},
        ["Bogus", "ongoing"],
    )
    assert listed([], [done_pid])[0] == {done_id: (done_pid, "CompleteCommit")}
    assert listed(["Ongoing"], [done_pid])[0] == {}
    ongoing.abort_transaction(30)
