"""Records refused inside a batch, on Apache Kafka 3.9.1 (ZooKeeper mode) and kbroker:
Produce v8+ names each refused record (``record_errors``: its index in the batch and
why) and says why the batch failed (``error_message``), and nothing of the batch is
appended.

The cases: records without a key on a compacted topic (INVALID_RECORD), and record
timestamps outside ``message.timestamp.before.max.ms`` / ``after.max.ms`` or the older
``message.timestamp.difference.max.ms`` of a CreateTime topic (INVALID_TIMESTAMP). The
raw answers are decoded with kbroker's own protocol client and compared field by field
with what Kafka answers; confluent-kafka and kafka-python report the error code, Kafka's
Java producer the record's message. One broker of each system serves the module.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError as KafkaPythonInvalidRecord
from kafka.errors import InvalidTimestampError as KafkaPythonInvalidTimestamp

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import (
    BrokerProcess,
    Wire,
    knows_controller,
    produce_req,
    topic_name,
    wait_for,
    wire_create_topic,
)
from tests.java import run_java
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

HOUR_MS = 3_600_000


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        with kafka_zk_broker(zookeeper.connect, f"/rec-{uuid.uuid4().hex[:8]}", root) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield kafka.bootstrap
        return
    broker = BrokerProcess(root / "data").start()
    try:
        yield broker.bootstrap
        assert "Traceback" not in broker.output(), broker.output()[-4000:]
    finally:
        broker.kill()


@pytest.fixture
def wire(bootstrap: str) -> Iterator[Wire]:
    w = Wire(bootstrap)
    yield w
    w.close()


def new_topic(wire: Wire, **configs: str) -> str:
    name = topic_name("rec")
    assert wire_create_topic(wire, name, 1, configs) == ErrorCode.NONE
    probe = build_batch([(b"k", b"probe", [])], timestamp=int(time.time() * 1000))
    wait_for(lambda: produce(wire, name, probe) is not None, "a leader")
    return name


def produce(wire: Wire, topic: str, batch: bytes, version: int = 9) -> Any:
    """Partition 0's answer to Produce ``version`` of ``batch`` (acks=all); None while the
    partition has no leader yet."""
    resp = wire.request(ApiKey.PRODUCE, version, produce_req(topic, batch))
    part = resp.responses[0].partition_responses[0]
    if part.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE):
        return None
    return part


def record_errors(part: Any) -> list[tuple[int, str | None]]:
    return [(e.batch_index, e.batch_index_error_message) for e in part.record_errors]


KEY_ERROR = "Compacted topic cannot accept message without key in topic partition {}-0"
TIMESTAMP_ERROR = re.compile(
    r"Timestamp (-?\d+) of message with offset (\d+) is out of range\. "
    r"The timestamp should be within \[(-?\d+), (-?\d+)\]"
)
INVALID_TIMESTAMP_MESSAGE = "One or more records have been rejected due to invalid timestamp"


def java_long(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


def timestamp_error(text: str | None) -> tuple[int, int, int, int]:
    """(timestamp, offset, lower bound, upper bound) of Kafka's out-of-range message."""
    assert text is not None
    found = TIMESTAMP_ERROR.fullmatch(text)
    assert found is not None, text
    ts, offset, lo, hi = found.groups()
    return int(ts), int(offset), int(lo), int(hi)


def end_offset_after(wire: Wire, topic: str) -> int:
    """The offset a good batch appended now gets: proves what came before appended nothing."""
    part = produce(
        wire, topic, build_batch([(b"k", b"after", [])], timestamp=int(time.time() * 1000))
    )
    assert part.error_code == ErrorCode.NONE, part
    return int(part.base_offset)


def test_keyless_records_on_a_compacted_topic_are_named(wire: Wire) -> None:
    topic = new_topic(wire, **{"cleanup.policy": "compact"})
    batch = build_batch([(b"a", b"1", []), (None, b"2", []), (b"c", b"3", []), (None, b"4", [])])
    part = produce(wire, topic, batch)
    key_error = KEY_ERROR.format(topic)
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert (part.base_offset, part.log_start_offset) == (-1, 0)
    assert record_errors(part) == [(1, key_error), (3, key_error)]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{key_error}')" for i in (1, 3))
    assert part.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [{shown}]"
    )
    # Five keyless records: all named, three shown in the message.
    many = build_batch([(None, str(i).encode(), []) for i in range(5)], codec=1)
    part = produce(wire, topic, many)
    assert record_errors(part) == [(i, key_error) for i in range(5)]
    assert part.error_message is not None
    assert "due to 5 record errors" in part.error_message
    assert part.error_message.count("RecordError(") == 3
    # The probe took offset 0; nothing of the refused batches was appended.
    assert end_offset_after(wire, topic) == 1


@pytest.mark.parametrize(
    "configs",
    [
        {
            "message.timestamp.before.max.ms": str(HOUR_MS),
            "message.timestamp.after.max.ms": str(HOUR_MS),
        },
        {"message.timestamp.difference.max.ms": str(HOUR_MS)},
    ],
    ids=["before-after", "difference"],
)
def test_timestamps_outside_the_window_are_named(wire: Wire, configs: dict[str, str]) -> None:
    topic = new_topic(wire, **configs)
    now = int(time.time() * 1000)
    old, future = now - 2 * HOUR_MS, now + 2 * HOUR_MS
    batch = build_batch(
        [
            (b"a", b"1", [], now),
            (b"b", b"2", [], old),
            (b"c", b"3", [], future),
            (b"d", b"", [], -1),
        ],
        timestamp=now,
    )
    part = produce(wire, topic, batch)
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert (part.base_offset, part.log_start_offset) == (-1, 0)
    assert part.error_message == INVALID_TIMESTAMP_MESSAGE
    assert [e.batch_index for e in part.record_errors] == [1, 2]
    seen = [timestamp_error(e.batch_index_error_message) for e in part.record_errors]
    assert [(ts, offset) for ts, offset, _, _ in seen] == [(old, 1), (future, 2)]
    for _, _, lo, hi in seen:
        assert hi - lo == 2 * HOUR_MS
        assert now - 60_000 <= lo + HOUR_MS <= now + 60_000
    # Before v8 the error code alone.
    for version in (3, 7):
        part = produce(wire, topic, batch, version)
        assert (part.error_code, part.record_errors) == (ErrorCode.INVALID_TIMESTAMP, [])
    assert end_offset_after(wire, topic) == 1


def test_a_keyless_record_and_an_old_one_in_one_batch(wire: Wire) -> None:
    topic = new_topic(
        wire, **{"cleanup.policy": "compact", "message.timestamp.before.max.ms": str(HOUR_MS)}
    )
    now = int(time.time() * 1000)
    old = now - 2 * HOUR_MS
    batch = build_batch([(None, b"1", [], old), (b"b", b"2", [], old)], timestamp=old)
    part = produce(wire, topic, batch)
    # A keyless record is refused for its key only; any timestamp error makes the batch's
    # error INVALID_TIMESTAMP.
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert part.error_message == INVALID_TIMESTAMP_MESSAGE
    assert record_errors(part)[0] == (0, KEY_ERROR.format(topic))
    assert part.record_errors[1].batch_index == 1
    ts, offset, lo, hi = timestamp_error(part.record_errors[1].batch_index_error_message)
    assert (ts, offset) == (old, 1)
    # after.max.ms is unlimited: Kafka prints now + Long.MAX_VALUE as a Java long would.
    assert hi == java_long(lo + HOUR_MS + 2**63 - 1)
    assert end_offset_after(wire, topic) == 1


def test_clients_report_the_refused_record(bootstrap: str, wire: Wire) -> None:
    compacted = new_topic(wire, **{"cleanup.policy": "compact"})
    timed = new_topic(wire, **{"message.timestamp.before.max.ms": str(HOUR_MS)})
    day_ago = int(time.time() * 1000) - 24 * HOUR_MS

    # confluent-kafka: the delivery report's error code.
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 30000})
    reports: list[Any] = []
    producer.produce(compacted, value=b"no key", on_delivery=lambda e, m: reports.append(e))
    producer.produce(
        timed, key=b"k", value=b"old", timestamp=day_ago, on_delivery=lambda e, m: reports.append(e)
    )
    assert producer.flush(60) == 0
    assert [e.code() if e else None for e in reports] == [
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
    ]

    # kafka-python: the future's exception.
    kp = KafkaProducer(bootstrap_servers=bootstrap, retries=0, request_timeout_ms=10000)
    try:
        with pytest.raises(KafkaPythonInvalidRecord):
            kp.send(compacted, value=b"no key").get(timeout=30)
        with pytest.raises(KafkaPythonInvalidTimestamp):
            kp.send(timed, key=b"k", value=b"old", timestamp_ms=day_ago).get(timeout=30)
    finally:
        kp.close(timeout=10)

    # Kafka's Java producer: the record's own message in the exception.
    _, lib = require_kafka()
    seen = run_java("ProduceRecordError", [lib], bootstrap, compacted, "keyless")
    assert seen["error"] == (
        f"org.apache.kafka.common.InvalidRecordException: {KEY_ERROR.format(compacted)}"
    )
    seen = run_java("ProduceRecordError", [lib], bootstrap, timed, "old-timestamp")
    cls, _, text = seen["error"].partition(": ")
    assert cls == "org.apache.kafka.common.errors.InvalidTimestampException"
    assert timestamp_error(text)[1] == 0
