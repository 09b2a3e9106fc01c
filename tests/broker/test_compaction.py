"""Log compaction end to end: a real broker's cleaner, seen through confluent-kafka.

Topics get small segments that roll after a second and a near-zero
min.cleanable.dirty.ratio, and the broker a short log.cleaner.backoff.ms, so
everything written gets cleaned within a few seconds; each test waits for
what a consumer reading from offset 0 would see.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.helpers import BrokerProcess, create_topic, send, topic_name, wait_for

pytestmark = pytest.mark.timeout(90)

FAST_CLEANER = "log.cleaner.backoff.ms=100"
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
    # Idle active segments roll within a second, so all data gets cleanable.
    "segment.ms": "1000",
}
WAIT = 30.0

Record = tuple[int, bytes | None, bytes | None]


@pytest.fixture
def kb(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(FAST_CLEANER)


def compacted_topic(b: BrokerProcess, **configs: str) -> str:
    name = topic_name("c")
    create_topic(b.bootstrap, name, **{**COMPACTED, **configs})
    return name


def producer(b: BrokerProcess, **conf: Any) -> Producer:
    # Batches well below segment.bytes (a batch never spans segments).
    return Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 4000, **conf})


def send_ok(p: Producer, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    errors = [err for err, _msg in send(p, topic, records) if err]
    assert errors == []


def read_log(b: BrokerProcess, topic: str) -> list[Record]:
    """Every record from offset 0 up to the current high watermark."""
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    tp = TopicPartition(topic, 0, 0)
    try:
        _, high = c.get_watermark_offsets(tp, timeout=10)
        c.assign([tp])
        out: list[Record] = []
        deadline = time.monotonic() + WAIT
        while high > 0 and (not out or out[-1][0] < high - 1):
            assert time.monotonic() < deadline, f"read stopped at {out[-1:] or 'nothing'} of {high}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        c.close()


def latest(records: list[Record]) -> dict[bytes | None, bytes | None]:
    return {k: v for _, k, v in records}


def value(key: int, round_: int) -> bytes:
    return f"k{key}-r{round_}-".encode().ljust(100, b".")


def test_compaction_keeps_the_latest_value_of_each_key(kb: BrokerProcess) -> None:
    topic = compacted_topic(kb)
    written = [(f"k{k}".encode(), value(k, r)) for r in range(150) for k in range(20)]
    # Idempotent and compressed: emptied batches must stay readable and
    # rewritten ones keep their codec.
    send_ok(producer(kb, **{"enable.idempotence": True, "compression.type": "lz4"}), topic, written)
    expected = dict(written)

    # 3000 records written; once every segment is cleaned, one per key.
    wait_for(lambda: len(read_log(kb, topic)) == 20, "the cleaner")
    records = read_log(kb, topic)
    assert latest(records) == expected
    # Each survivor sits at the offset it was written at.
    assert records == sorted((i, k, v) for i, (k, v) in enumerate(written) if expected[k] == v)


def test_tombstones_go_after_delete_retention(kb: BrokerProcess) -> None:
    topic = compacted_topic(kb, **{"delete.retention.ms": "1500"})
    p = producer(kb)
    send_ok(p, topic, [(f"k{k}".encode(), value(k, 0)) for k in range(10)])
    send_ok(p, topic, [(f"k{k}".encode(), None) for k in range(5)])
    # Filler under other keys closes the segment holding the tombstones.
    send_ok(p, topic, [(f"f{i % 20}".encode(), value(i, 1)) for i in range(400)])
    deleted = {f"k{k}".encode() for k in range(5)}

    # First the old values go while the tombstones stay (for
    # delete.retention.ms after the pass that first saw them), then the
    # tombstones go too.
    seen_tombstones_alone = False
    deadline = time.monotonic() + WAIT
    while True:
        records = read_log(kb, topic)
        old_values = [r for r in records if r[1] in deleted and r[2] is not None]
        tombstones = [r for r in records if r[1] in deleted and r[2] is None]
        if not old_values and len(tombstones) == 5:
            seen_tombstones_alone = True
        if not old_values and not tombstones:
            break
        assert time.monotonic() < deadline, "timed out waiting for the tombstones to go"
        time.sleep(0.2)
    assert seen_tombstones_alone
    final = latest(read_log(kb, topic))
    assert all(final[f"k{k}".encode()] == value(k, 0) for k in range(5, 10))


def test_consumers_see_a_consistent_log_while_it_is_cleaned(kb: BrokerProcess) -> None:
    topic = compacted_topic(kb)
    written = [(f"k{k}".encode(), value(k, r)) for r in range(200) for k in range(25)]
    allowed = set(written)
    done = threading.Event()
    failure: list[BaseException] = []

    def write() -> None:
        try:
            p = producer(kb, **{"compression.type": "gzip"})
            for i in range(0, len(written), 500):
                send_ok(p, topic, written[i : i + 500])
                time.sleep(0.3)  # let passes run between the writes
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    cleaned_while_writing = False
    try:
        # Read the whole log over and over while it grows and is cleaned.
        while not done.is_set() or reads < 3:
            records = read_log(kb, topic)
            offsets = [o for o, _, _ in records]
            assert offsets == sorted(set(offsets)), "offsets must only increase"
            assert {(k, v) for _, k, v in records} <= allowed
            if records and not done.is_set():
                cleaned_while_writing |= len(records) < offsets[-1] + 1
            reads += 1
    finally:
        writer.join()
    assert not failure, failure
    assert cleaned_while_writing
    wait_for(lambda: len(read_log(kb, topic)) == 25, "the cleaner")
    assert latest(read_log(kb, topic)) == dict(written)


def test_keyless_records_are_refused_on_compacted_topics(kb: BrokerProcess) -> None:
    topic = compacted_topic(kb)
    p = producer(kb, **{"message.send.max.retries": 0})
    reports: list[Any] = []
    # One flush each, so the two records travel in separate batches.
    p.produce(topic, key=None, value=b"no key", on_delivery=lambda e, _m: reports.append(e))
    assert p.flush(30) == 0
    p.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda e, _m: reports.append(e))
    assert p.flush(30) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD
    assert reports[1] is None
    assert read_log(kb, topic) == [(0, b"k", b"keyed")]
