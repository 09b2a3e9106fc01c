"""The transaction coordinator's APIs at the byte level, on Apache Kafka 3.9.1 (ZooKeeper mode)
and on kbroker, with the same requests and the same expected answers: the errors of every
version for bad producers, epochs, states and partitions, KIP-890's verify-only form,
DescribeTransactions, ListTransactions, AddOffsetsToTxn, and transactional ids too long to be
a Kafka string (the connection is closed, nothing is written). Kafka's answers prove the
test; one broker of each system serves the whole module."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import InitProducerIdRequest
from kbroker.protocol.messages.group import FindCoordinatorRequest
from kbroker.protocol.messages.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
)
from kbroker.tools.client import ClientError
from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import BrokerProcess, Wire, create_topic, knows_controller, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

E = ErrorCode
TOPIC = "txn-wire"
# Answers a coordinator gives while it is getting ready: asked again.
_NOT_READY = {E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR}


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        with kafka_zk_broker(zookeeper.connect, f"/txn-wire-{uuid.uuid4().hex[:8]}", root) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            create_topic(kafka.bootstrap, TOPIC, 2)
            yield kafka.bootstrap
    else:
        broker = BrokerProcess(root / "data").start()
        try:
            create_topic(broker.bootstrap, TOPIC, 2)
            yield broker.bootstrap
        finally:
            broker.kill()


@pytest.fixture
def wire(bootstrap: str) -> Iterator[Wire]:
    w = Wire(bootstrap, timeout=30)
    yield w
    w.close()


def _until_ready(ask: Any) -> Any:
    """``ask()`` until its answer is not the coordinator getting ready (first use creates
    __transaction_state)."""
    deadline = time.monotonic() + 60
    while True:
        answer = ask()
        if answer.error_code not in _NOT_READY or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def find(w: Wire, txn: str) -> Any:
    return w.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=txn, key_type=1))


def init(
    w: Wire, txn: str, timeout_ms: int = 60000, version: int = 4, pid: int = -1, epoch: int = -1
) -> Any:
    request = InitProducerIdRequest(
        transactional_id=txn,
        transaction_timeout_ms=timeout_ms,
        producer_id=pid,
        producer_epoch=epoch,
    )
    return w.request(ApiKey.INIT_PRODUCER_ID, version, request)


def producer(w: Wire, txn: str) -> tuple[int, int]:
    """A new transactional producer: (producer id, epoch)."""
    assert _until_ready(lambda: find(w, txn)).error_code == E.NONE
    answer = _until_ready(lambda: init(w, txn))
    assert answer.error_code == E.NONE, answer
    return answer.producer_id, answer.producer_epoch


def add(
    w: Wire, version: int, txn: str, pid: int, epoch: int, **parts: list[int]
) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-3 of ``parts`` (topic -> partitions; "_" stands for TOPIC):
    each partition's error."""
    topics = [
        AddPartitionsToTxnTopic(name=TOPIC if name == "_" else name, partitions=ids)
        for name, ids in parts.items()
    ]
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics,
    )
    answer = w.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, request)
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def verify(w: Wire, txn: str, pid: int, epoch: int, partitions: list[int]) -> dict[int, int]:
    """AddPartitionsToTxn v4 with verify_only, as a partition leader asks."""
    request = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnRequest.Transaction(
                transactional_id=txn,
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=True,
                topics=[AddPartitionsToTxnTopic(name=TOPIC, partitions=partitions)],
            )
        ]
    )
    answer = w.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, request)
    assert answer.error_code == E.NONE
    [result] = answer.results_by_transaction
    assert result.transactional_id == txn
    [topic] = result.topic_results
    return {p.partition_index: p.partition_error_code for p in topic.results_by_partition}


def end(w: Wire, version: int, txn: str, pid: int, epoch: int, committed: bool) -> int:
    request = EndTxnRequest(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=committed
    )
    return int(w.request(ApiKey.END_TXN, version, request).error_code)


def describe(w: Wire, *txns: str) -> list[Any]:
    request = DescribeTransactionsRequest(transactional_ids=list(txns))
    return list(w.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, request).transaction_states)


def test_init_producer_id_errors_of_each_version(wire: Wire) -> None:
    pid, epoch = producer(wire, "init-errors")
    assert epoch == 0
    for timeout in (0, -5, 900_001):  # transaction.max.timeout.ms is 15 minutes
        assert init(wire, "init-errors", timeout).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert init(wire, "").error_code == E.INVALID_REQUEST
    # v3+: a producer id without an epoch is not a request.
    assert init(wire, "init-errors", version=3, pid=pid).error_code == E.INVALID_REQUEST
    # Another producer id: fenced, as each version names it.
    assert init(wire, "init-errors", version=4, pid=pid + 77, epoch=0).error_code == (
        E.PRODUCER_FENCED
    )
    assert init(wire, "init-errors", version=3, pid=pid + 77, epoch=0).error_code == (
        E.INVALID_PRODUCER_EPOCH
    )
    # The producer itself resumes (KIP-360), a new instance bumps once more.
    resumed = init(wire, "init-errors", version=4, pid=pid, epoch=0)
    assert (resumed.error_code, resumed.producer_id, resumed.producer_epoch) == (E.NONE, pid, 1)
    again = init(wire, "init-errors", version=2)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (E.NONE, pid, 2)


def test_add_partitions_and_end_txn_errors_change_nothing(wire: Wire) -> None:
    txn = "add-errors"
    pid, epoch = producer(wire, txn)
    # One partition that does not exist: none is added.
    assert add(wire, 3, txn, pid, epoch, _=[0, 7], nope=[0]) == {
        (TOPIC, 0): E.OPERATION_NOT_ATTEMPTED,
        (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert add(wire, 3, txn, pid, epoch + 1, _=[0]) == {(TOPIC, 0): E.PRODUCER_FENCED}
    assert add(wire, 1, txn, pid, epoch + 1, _=[0]) == {(TOPIC, 0): E.INVALID_PRODUCER_EPOCH}
    assert add(wire, 3, txn, pid + 1, epoch, _=[0]) == {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert add(wire, 3, "nobody", pid, epoch, _=[0]) == {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
    # Nothing to end; wrong epochs as each version names them.
    assert end(wire, 3, txn, pid, epoch, True) == E.INVALID_TXN_STATE
    assert end(wire, 3, txn, pid, epoch + 3, True) == E.PRODUCER_FENCED
    assert end(wire, 1, txn, pid, epoch + 3, False) == E.INVALID_PRODUCER_EPOCH
    assert end(wire, 0, "nobody", pid, epoch, False) == E.INVALID_PRODUCER_ID_MAPPING
    [state] = describe(wire, txn)
    assert (state.error_code, state.transaction_state, state.topics) == (E.NONE, "Empty", [])
    assert (state.producer_id, state.producer_epoch) == (pid, epoch)


def test_verify_only_describe_list_and_add_offsets(wire: Wire) -> None:
    txn = "verify"
    pid, epoch = producer(wire, txn)
    assert verify(wire, txn, pid, epoch, [0]) == {0: E.TRANSACTION_ABORTABLE}
    assert add(wire, 3, txn, pid, epoch, _=[0]) == {(TOPIC, 0): E.NONE}
    # Verifying adds nothing; it answers each partition.
    assert verify(wire, txn, pid, epoch, [0, 1]) == {0: E.NONE, 1: E.TRANSACTION_ABORTABLE}
    assert verify(wire, txn, pid, epoch + 1, [0]) == {0: E.PRODUCER_FENCED}
    assert verify(wire, txn, pid + 1, epoch, [0]) == {0: E.INVALID_PRODUCER_ID_MAPPING}
    request = AddOffsetsToTxnRequest(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id="g1"
    )
    assert wire.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, request).error_code == E.NONE
    described, unknown, empty = describe(wire, txn, "nobody", "")
    topics = {t.topic: sorted(t.partitions) for t in described.topics}
    # g1's partition of __consumer_offsets (of 50) joined the transaction.
    assert topics == {TOPIC: [0], "__consumer_offsets": [42]}
    assert (described.transaction_state, described.transaction_timeout_ms) == ("Ongoing", 60000)
    assert described.transaction_start_time_ms > 0
    assert unknown.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    assert empty.error_code == E.INVALID_REQUEST
    # Kafka fills the fields of an error with zeros.
    assert (unknown.producer_id, unknown.transaction_start_time_ms, unknown.transaction_state) == (
        0,
        0,
        "",
    )
    listed = wire.request(
        ApiKey.LIST_TRANSACTIONS,
        1,
        ListTransactionsRequest(
            state_filters=["Ongoing", "Bogus"], producer_id_filters=[pid], duration_filter=-1
        ),
    )
    assert listed.error_code == E.NONE and listed.unknown_state_filters == ["Bogus"]
    found = [
        (t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states
    ]
    assert found == [(txn, pid, "Ongoing")]
    # Open for less than an hour: not listed by a one-hour duration filter.
    listed = wire.request(
        ApiKey.LIST_TRANSACTIONS,
        1,
        ListTransactionsRequest(
            state_filters=[], producer_id_filters=[pid], duration_filter=3_600_000
        ),
    )
    assert listed.transaction_states == []
    # Committing after an abort was asked is refused; the abort again is a retry.
    assert end(wire, 3, txn, pid, epoch, False) == E.NONE
    deadline = time.monotonic() + 30
    while describe(wire, txn)[0].transaction_state != "CompleteAbort":
        assert time.monotonic() < deadline, describe(wire, txn)
        time.sleep(0.1)
    assert end(wire, 3, txn, pid, epoch, True) == E.INVALID_TXN_STATE
    assert end(wire, 3, txn, pid, epoch, False) == E.NONE


@pytest.mark.parametrize("size", [32767, 32768, 1 << 20])
def test_transactional_ids_longer_than_a_kafka_string_close_the_connection(
    bootstrap: str, size: int
) -> None:
    txn = "i" * size
    for ask in (find, init):
        w = Wire(bootstrap, timeout=30)
        try:
            if size <= 32767:
                assert _until_ready(lambda w=w, ask=ask: ask(w, txn)).error_code == E.NONE
            else:
                with pytest.raises(ClientError, match="closed the connection"):
                    ask(w, txn)
        finally:
            w.close()
    # Nothing was kept of an id too long.
    w = Wire(bootstrap, timeout=30)
    try:
        listed = w.request(
            ApiKey.LIST_TRANSACTIONS,
            0,
            ListTransactionsRequest(state_filters=[], producer_id_filters=[]),
        )
        assert max(len(t.transactional_id) for t in listed.transaction_states) <= 32767
        if size <= 32767:
            [state] = describe(w, txn)
            assert (state.error_code, state.transaction_state) == (E.NONE, "Empty")
    finally:
        w.close()
