"""The partition side of transactions on one broker, on Apache Kafka 3.9.1 (ZooKeeper mode)
and kbroker with the same settings: transactional batches sent at the byte level (kbroker's
own client), WriteTxnMarkers sent as a transaction coordinator would, and what real
clients then see: confluent-kafka consumers at read_committed and read_uncommitted,
ListOffsets by isolation level, the fetch answer's last stable offset and aborted
transactions, Kafka's own kafka-transactions tool (describe-producers, find-hanging,
abort), and Kafka's errors for stale markers and bad input.

Both brokers run with transaction.partition.verification.enable=false: no transaction
coordinator takes part here, so the batches' partitions are in no coordinator's
transaction (KIP-890 verification is tested in tests/replication and end to end with the
coordinator). Kafka's behaviour proves each test; one broker of each system serves the
module.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import (
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from kbroker.protocol.messages.inter_broker import WriteTxnMarkersRequest
from tests.broker.transactions import kafka_transactions
from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import BrokerProcess, Wire, create_topic, knows_controller, topic_name, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

SETTINGS = {"transaction.partition.verification.enable": "false"}
E = ErrorCode
READ_COMMITTED, READ_UNCOMMITTED = 1, 0
M = WriteTxnMarkersRequest.Marker


@dataclass
class System:
    name: str
    bootstrap: str


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def system(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[System]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        with kafka_zk_broker(
            zookeeper.connect, f"/txn-{uuid.uuid4().hex[:8]}", root, settings=SETTINGS
        ) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield System("kafka", kafka.bootstrap)
        return
    broker = BrokerProcess(root / "data")
    broker.start(*(f"{k}={v}" for k, v in SETTINGS.items()))
    try:
        yield System("kbroker", broker.bootstrap)
    finally:
        broker.kill()


class Producer:
    """A producer id and its next sequence, writing transactional batches to partition 0 of
    one topic at the byte level."""

    def __init__(self, wire: Wire, topic: str) -> None:
        self.wire, self.topic = wire, topic
        req = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout_ms=60000,
            producer_id=-1,
            producer_epoch=-1,
        )
        # A broker that just started may still be getting its block of producer ids.
        resp = wait_for(
            lambda: (r := wire.request(ApiKey.INIT_PRODUCER_ID, 4, req)).error_code == 0 and r,
            "a producer id",
        )
        self.pid, self.epoch, self.seq = resp.producer_id, resp.producer_epoch, 0

    def send(
        self,
        *values: bytes,
        transactional: bool = True,
        epoch: int | None = None,
        seq: int | None = None,
        transactional_id: str | None = "txn",
        control: bool = False,
    ) -> tuple[int, int]:
        """(error code, base offset) of one batch of ``values``."""
        first = self.seq if seq is None else seq
        data = build_batch(
            [(None, v, []) for v in values],
            timestamp=time.time_ns() // 1_000_000,
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=first,
            transactional=transactional,
        )
        if control:
            data = with_control_bit(data)
        code, offset = produce(self.wire, self.topic, data, transactional_id)
        if code == 0 and seq is None:
            self.seq += len(values)
        return code, offset

    def marker(
        self,
        committed: bool,
        epoch: int | None = None,
        coordinator_epoch: int = 0,
        partitions: list[int] | None = None,
    ) -> dict[int, int]:
        """WriteTxnMarkers v1 for this producer: each partition's error code."""
        marker = M(
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            transaction_result=committed,
            topics=[M.Topic(name=self.topic, partition_indexes=partitions or [0])],
            coordinator_epoch=coordinator_epoch,
        )
        resp = self.wire.request(
            ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[marker])
        )
        ((result,),) = [m.topics for m in resp.markers]
        return {p.partition_index: p.error_code for p in result.partitions}


def with_control_bit(batch: bytes) -> bytes:
    """``batch`` marked as a control batch (attribute bit 5), its CRC made right again."""
    from kbroker._kbroker import crc32c

    data = bytearray(batch)
    data[22] |= 0x20
    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def plain(value: bytes) -> bytes:
    """A batch of one record of no producer, timestamped now (a batch from 1970 would make
    Kafka roll a new segment, segment.ms after the previous batch's timestamp)."""
    return build_batch([(None, value, [])], timestamp=time.time_ns() // 1_000_000)


def produce(
    wire: Wire, topic: str, records: bytes, transactional_id: str | None
) -> tuple[int, int]:
    req = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.Topic(
                name=topic,
                partition_data=[ProduceRequest.Topic.Partition(index=0, records=records)],
            )
        ],
    )
    part = wire.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def fetch(wire: Wire, topic: str, isolation: int) -> Any:
    partition = FetchRequest.Topic.Partition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.Topic(topic=topic, partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
    )
    return wire.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]


def latest(wire: Wire, topic: str, isolation: int) -> int:
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            ListOffsetsRequest.Topic(
                name=topic,
                partitions=[ListOffsetsRequest.Topic.Partition(partition_index=0, timestamp=-1)],
            )
        ],
    )
    part = wire.request(ApiKey.LIST_OFFSETS, 5, req).topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def consume(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    """The values a confluent-kafka consumer reads from partition 0 at ``isolation``: until
    ``expected`` came, then for a further second (anything more is a failure to see)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        quiet_until = None
        while time.monotonic() < deadline:
            if quiet_until is None and len(values) >= expected:
                quiet_until = time.monotonic() + 1.0
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        c.close()
    return values


@pytest.fixture
def topic(system: System) -> str:
    name = topic_name("txn")
    create_topic(system.bootstrap, name)
    return name


@pytest.fixture
def wire(system: System, topic: str) -> Iterator[Wire]:
    w = Wire(system.bootstrap)
    yield w
    w.close()


def test_read_committed_sees_committed_data_only(system: System, topic: str, wire: Wire) -> None:
    a = Producer(wire, topic)
    b = Producer(wire, topic)
    assert produce(wire, topic, plain(b"p0"), None) == (0, 0)
    assert a.send(b"a0", b"a1") == (0, 1)
    assert b.send(b"b0", b"b1") == (0, 3)
    assert a.marker(committed=True) == {0: 0}  # at 5
    assert b.marker(committed=False) == {0: 0}  # at 6
    assert produce(wire, topic, plain(b"p1"), None) == (0, 7)
    assert a.send(b"c0") == (0, 8)  # a's next transaction stays open
    assert produce(wire, topic, plain(b"p2"), None) == (0, 9)

    # read_committed stops at the open transaction; the aborted one is never delivered.
    assert consume(system.bootstrap, topic, "read_committed", 4) == [b"p0", b"a0", b"a1", b"p1"]
    assert consume(system.bootstrap, topic, "read_uncommitted", 8) == [
        b"p0",
        b"a0",
        b"a1",
        b"b0",
        b"b1",
        b"p1",
        b"c0",
        b"p2",
    ]
    assert latest(wire, topic, READ_COMMITTED) == 8
    assert latest(wire, topic, READ_UNCOMMITTED) == 10
    committed = fetch(wire, topic, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(b.pid, 3)]
    assert fetch(wire, topic, READ_UNCOMMITTED).aborted_transactions is None

    # The open transaction commits: everything up to the end is stable.
    assert a.marker(committed=True) == {0: 0}
    assert latest(wire, topic, READ_COMMITTED) == 11
    assert consume(system.bootstrap, topic, "read_committed", 6) == [
        b"p0",
        b"a0",
        b"a1",
        b"p1",
        b"c0",
        b"p2",
    ]


def test_stale_markers_and_transaction_rules(system: System, topic: str, wire: Wire) -> None:
    p = Producer(wire, topic)
    assert p.send(b"x0")[0] == E.NONE
    # A non-transactional batch while the transaction is open.
    assert p.send(b"x1", transactional=False)[0] == E.INVALID_TXN_STATE
    # An abort from a coordinator that bumped the producer's epoch fences it.
    assert p.marker(committed=False, epoch=p.epoch + 1, coordinator_epoch=3) == {0: E.NONE}
    assert p.send(b"x2")[0] == E.INVALID_PRODUCER_EPOCH
    assert p.marker(committed=True, epoch=p.epoch) == {0: E.INVALID_PRODUCER_EPOCH}
    assert p.marker(committed=True, epoch=p.epoch + 1, coordinator_epoch=2) == {
        0: E.TRANSACTION_COORDINATOR_FENCED
    }
    # Partitions this broker does not have.
    assert p.marker(committed=True, epoch=p.epoch + 1, coordinator_epoch=3, partitions=[0, 7]) == {
        0: E.NONE,
        7: E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # The new epoch starts at sequence 0.
    assert p.send(b"y0", epoch=p.epoch + 1, seq=3)[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.send(b"y0", epoch=p.epoch + 1, seq=0) == (E.NONE, 3)


def test_bad_input_is_refused_and_writes_nothing(system: System, topic: str, wire: Wire) -> None:
    p = Producer(wire, topic)
    # A client's control batch (what only a broker may write).
    assert p.send(b"forged", control=True)[0] == E.INVALID_RECORD
    # Transactional batches without a transactional id.
    assert p.send(b"x", transactional_id=None)[0] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert latest(wire, topic, READ_UNCOMMITTED) == 0


def test_kafka_transactions_describes_producers_and_aborts_a_hanging_one(
    system: System, topic: str, wire: Wire
) -> None:
    done = Producer(wire, topic)
    hanging = Producer(wire, topic)
    done.send(b"d0")
    done.marker(committed=True, coordinator_epoch=4)  # at 1
    assert hanging.send(b"h0", b"h1") == (0, 2)  # never ended by its coordinator
    out = kafka_transactions(
        system.bootstrap, "describe-producers", "--topic", topic, "--partition", "0"
    )
    rows = {int(r[0]): r for r in (line.split() for line in out.splitlines()[1:]) if r}
    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
    # CurrentTransactionStartOffset
    assert rows[done.pid][1:4] == [str(done.epoch), "4", "0"]
    assert rows[done.pid][5] == "None"
    assert rows[hanging.pid][1:4] == [str(hanging.epoch), "-1", "1"]
    assert rows[hanging.pid][5] == "2"
    assert latest(wire, topic, READ_COMMITTED) == 2
    # No coordinator knows the hanging producer (ListTransactions by producer id finds no
    # transactional id): find-hanging reports its open transaction, and only that one.
    out = kafka_transactions(
        system.bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
    )
    # Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp
    # Duration(min)
    hung = [r.split() for r in out.splitlines()[1:] if r.strip()]
    assert [r[:6] for r in hung] == [
        [topic, "0", str(hanging.pid), str(hanging.epoch), "-1", "2"]
    ], out
    # The operator's way out of a hanging transaction: the tool writes its ABORT marker
    # (WriteTxnMarkers to the leader, as a coordinator would).
    kafka_transactions(
        system.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2"
    )
    assert latest(wire, topic, READ_COMMITTED) == 5
    assert consume(system.bootstrap, topic, "read_committed", 1) == [b"d0"]
    out = kafka_transactions(
        system.bootstrap, "describe-producers", "--topic", topic, "--partition", "0"
    )
    assert re.search(rf"^{hanging.pid}\s.*\sNone\s*$", out, re.M), out
    out = kafka_transactions(
        system.bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
    )
    assert out.splitlines()[1:] == [], out
