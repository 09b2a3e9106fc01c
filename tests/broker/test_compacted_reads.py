"""Reading a compacted log to its end, on Apache Kafka 3.9.1 (ZooKeeper mode) and kbroker
with the same settings, after each broker's own cleaner ran.

The log is written by an idempotent producer, a plain one and a transactional one (a
committed and an aborted transaction), with keys overwritten and a few tombstones, so the
cleaner leaves gaps of every kind: batches with fewer records than their offset range
(a cleaned batch keeps its last offset delta), empty batches kept for producer state,
whole batches gone, aborted records gone. Then confluent-kafka, kafka-python and aiokafka
read it from offset 0 with fetches of 1 byte, 100 bytes and the default size, and must
each reach the high watermark in bounded time and see exactly the surviving records; a
consumer placed at the start of every gap must get the next surviving record. Full
segments whose every record was overwritten, cleaned once, must not stop confluent-kafka
(an answer without a record doubles its fetch size; after ten it reports
MSG_SIZE_TOO_LARGE). kbroker's `dump-log` and `log verify` must accept every segment
either cleaner wrote.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from tests.broker.transactions import transactional_producer
from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import KBROKER, BrokerProcess, create_topic, knows_controller, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(240)

SETTINGS = {"log.cleaner.backoff.ms": "100"}
TOPIC = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
}
KEYS = 30
ROLL_KEY = b"roll"
READ_WAIT = 30.0

Record = tuple[int, bytes | None, bytes | None]


@dataclass
class System:
    name: str
    bootstrap: str
    log_dir: Path


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def system(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[System]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        with kafka_zk_broker(
            zookeeper.connect, f"/cr-{uuid.uuid4().hex[:8]}", root, settings=SETTINGS
        ) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield System("kafka", kafka.bootstrap, root / "logs")
        return
    broker = BrokerProcess(root / "data")
    broker.start(*(f"{k}={v}" for k, v in SETTINGS.items()))
    try:
        yield System("kbroker", broker.bootstrap, root / "data")
    finally:
        broker.kill()


def key(i: int) -> bytes:
    return f"k{i % KEYS:02d}".encode()


def produce(p: Producer, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    for k, v in records:
        p.produce(topic, v, k, partition=0)
    assert p.flush(30) == 0


def read_all(system: System, topic: str, **conf: Any) -> list[Record]:
    """confluent-kafka's consumer from offset 0 to the end of the partition."""
    c = Consumer(
        {
            "bootstrap.servers": system.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
            **conf,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Record] = []
        deadline = time.monotonic() + READ_WAIT
        while True:
            assert time.monotonic() < deadline, f"{conf}: read stopped after {out[-1:]}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()


def kafka_python_consumer(system: System, max_bytes: int) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=system.bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=max_bytes,
        fetch_max_bytes=max_bytes,
        fetch_max_wait_ms=50,
    )


def read_all_kafka_python(system: System, topic: str, max_bytes: int) -> list[Record]:
    c = kafka_python_consumer(system, max_bytes)
    tp = KafkaPythonPartition(topic, 0)
    try:
        c.assign([tp])
        c.seek(tp, 0)
        high = c.end_offsets([tp])[tp]
        out: list[Record] = []
        deadline = time.monotonic() + READ_WAIT
        while c.position(tp) < high:
            assert time.monotonic() < deadline, f"{max_bytes}: read stopped at {c.position(tp)}"
            for records in c.poll(timeout_ms=200).values():
                out += [(r.offset, r.key, r.value) for r in records]
        return out
    finally:
        c.close()


def read_all_aiokafka(system: System, topic: str, max_bytes: int) -> list[Record]:
    async def read() -> list[Record]:
        c = AIOKafkaConsumer(
            bootstrap_servers=system.bootstrap,
            enable_auto_commit=False,
            max_partition_fetch_bytes=max_bytes,
            fetch_max_bytes=max_bytes,
            fetch_max_wait_ms=50,
        )
        await c.start()
        tp = AioPartition(topic, 0)
        try:
            c.assign([tp])
            c.seek(tp, 0)
            high = (await c.end_offsets([tp]))[tp]
            out: list[Record] = []
            deadline = time.monotonic() + READ_WAIT
            while await c.position(tp) < high:
                assert time.monotonic() < deadline, f"{max_bytes}: read stopped at {out[-1:]}"
                for records in (await c.getmany(timeout_ms=200)).values():
                    out += [(r.offset, r.key, r.value) for r in records]
            return out
        finally:
            await c.stop()

    return asyncio.run(read())


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    count: int


BATCH_LINE = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) ")


def dump(system: System, topic: str) -> list[Batch]:
    """The partition's batches as `kbroker dump-log` reads them (again when a cleaner
    swapped a file away under it)."""
    part = system.log_dir / f"{topic}-0"
    for _ in range(20):
        files = sorted(part.glob("*.log"))
        run = subprocess.run(
            [*KBROKER, "dump-log", *map(str, files)], capture_output=True, text=True, timeout=60
        )
        if run.returncode == 0:
            return [Batch(int(m[1]), int(m[2]), int(m[3])) for m in BATCH_LINE.finditer(run.stdout)]
        time.sleep(0.2)
    raise AssertionError(f"dump-log failed on {part}: {run.stdout[-2000:]}{run.stderr}")


@dataclass
class Cleaned:
    topic: str
    high: int
    records: list[Record]  # what a default consumer reads, in order
    latest: dict[bytes, bytes | None]  # what was last written per key


@pytest.fixture(scope="module")
def cleaned(system: System) -> Cleaned:
    topic = f"cr-{uuid.uuid4().hex[:8]}"
    create_topic(system.bootstrap, topic, **TOPIC)
    latest: dict[bytes, bytes | None] = {}

    def write(p: Producer, start: int, n: int, tag: str, tombstones: bool = False) -> None:
        records: list[tuple[bytes, bytes | None]] = []
        for i in range(start, start + n):
            value = None if tombstones and i % 7 == 0 else f"{tag}{i}".encode().ljust(60)
            records.append((key(i), value))
        produce(p, topic, records)
        latest.update(records)

    conf = {"bootstrap.servers": system.bootstrap, "linger.ms": 5, "batch.size": 1500}
    # An idempotent producer's batches, all overwritten later: empty batches stay for its
    # producer state.
    write(Producer({**conf, "enable.idempotence": True}), 0, 120, "i")
    plain = Producer(conf)
    write(plain, 0, 400, "p", tombstones=True)
    tx = transactional_producer(conf)
    tx.begin_transaction()
    write(tx, 5, 10, "c")
    tx.commit_transaction(30)
    tx.begin_transaction()
    for i in range(12):
        tx.produce(topic, b"aborted", key(i), partition=0)
    assert tx.flush(30) == 0
    tx.abort_transaction(30)
    # Last, every key once between overwrites of a few hot keys: the survivors stand
    # apart, with gaps between them.
    last_round: list[tuple[bytes, bytes | None]] = [
        (key(i // 7) if i % 7 == 0 else f"h{i % 3}".encode(), f"q{i}".encode().ljust(60))
        for i in range(7 * KEYS)
    ]
    produce(plain, topic, last_round)
    latest.update(last_round)

    def compacted() -> list[Record] | None:
        # Appends roll the idle segments (segment.ms) so the cleaner can take them all.
        produce(plain, topic, [(ROLL_KEY, b"r")])
        records = read_all(system, topic)
        keys = [k for _, k, _ in records if k != ROLL_KEY]
        return records if len(keys) == len(set(keys)) == len(latest) else None

    records = wait_for(compacted, f"{system.name}'s cleaner", timeout=90, interval=1.0)
    latest[ROLL_KEY] = b"r"
    c = Consumer({"bootstrap.servers": system.bootstrap, "group.id": "unused"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    assert records[-1][0] == high - 1
    return Cleaned(topic, high, records, latest)


def test_the_cleaned_log_has_every_kind_of_gap(system: System, cleaned: Cleaned) -> None:
    """The scenario the reads below rely on, as `kbroker dump-log` reads each cleaner's
    files: cleaned batches with fewer records than offsets, empty batches, missing
    offsets between batches; and only the last write of each key left."""
    batches = dump(system, cleaned.topic)
    assert any(0 < b.count < b.last_offset - b.base_offset + 1 for b in batches), batches
    assert any(b.count == 0 for b in batches), batches
    assert any(a.last_offset + 1 < b.base_offset for a, b in itertools.pairwise(batches)), batches
    assert {k: v for _, k, v in cleaned.records} == cleaned.latest
    assert len(cleaned.records) < cleaned.high // 5


def settled(records: list[Record]) -> list[Record]:
    """The records the cleaner no longer changes (it goes on cleaning the rolling appends),
    and the last one read, which must be the log's last."""
    return [r for r in records if r[1] != ROLL_KEY] + records[-1:]


FETCH_SIZES = [
    {},
    {"max.partition.fetch.bytes": 1, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
    {"max.partition.fetch.bytes": 100, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
    {"isolation.level": "read_uncommitted"},
]


@pytest.mark.parametrize("conf", FETCH_SIZES, ids=["default", "1B", "100B", "uncommitted"])
def test_confluent_kafka_reads_to_the_end(
    system: System, cleaned: Cleaned, conf: dict[str, Any]
) -> None:
    assert settled(read_all(system, cleaned.topic, **conf)) == settled(cleaned.records)


@pytest.mark.parametrize("max_bytes", [1, 100, 1 << 20])
def test_kafka_python_reads_to_the_end(system: System, cleaned: Cleaned, max_bytes: int) -> None:
    records = read_all_kafka_python(system, cleaned.topic, max_bytes)
    assert settled(records) == settled(cleaned.records)


@pytest.mark.parametrize("max_bytes", [1, 1 << 20])
def test_aiokafka_reads_to_the_end(system: System, cleaned: Cleaned, max_bytes: int) -> None:
    records = read_all_aiokafka(system, cleaned.topic, max_bytes)
    assert settled(records) == settled(cleaned.records)


def test_a_fetch_inside_a_gap_gets_the_next_record(system: System, cleaned: Cleaned) -> None:
    # Gaps before a keyed record (the rolling appends may be cleaned meanwhile).
    surviving = [offset for offset, k, _ in cleaned.records if k != ROLL_KEY]
    kept = set(surviving)
    gap_starts = sorted({0, *(o + 1 for o in surviving if o + 1 not in kept)})
    gap_starts = [start for start in gap_starts if start <= surviving[-1]]
    assert len(gap_starts) > 10
    c = kafka_python_consumer(system, 1)
    tp = KafkaPythonPartition(cleaned.topic, 0)
    try:
        c.assign([tp])
        for start in gap_starts:
            c.seek(tp, start)
            deadline = time.monotonic() + 10
            got: list[int] = []
            while not got:
                assert time.monotonic() < deadline, f"nothing read from offset {start}"
                got = [r.offset for rs in c.poll(timeout_ms=200).values() for r in rs]
            assert got[0] == min(o for o in surviving if o >= start), start
    finally:
        c.close()


def test_confluent_kafka_reads_past_segments_the_cleaner_emptied(system: System) -> None:
    """Full segments whose every record was overwritten, cleaned by one pass and not
    again (nothing is written after it): confluent-kafka reads from offset 0 through
    them to the records that survive. A fetch answered with no record (kbroker's
    cleaner leaves an empty batch pinning such a segment's end offset) doubles
    librdkafka's fetch size, and after ten it gives up with MSG_SIZE_TOO_LARGE."""
    topic = f"cr-{uuid.uuid4().hex[:8]}"
    # Written uncompacted and made compacted after: the first pass sees every
    # segment at once, each a group of its own (groups go by size before cleaning).
    create_topic(system.bootstrap, topic, **{"segment.bytes": "4096"})
    p = Producer({"bootstrap.servers": system.bootstrap, "linger.ms": 5, "batch.size": 1500})
    rounds = 24
    for r in range(rounds):
        produce(p, topic, [(key(i), f"e{r}-{i}".encode().ljust(60)) for i in range(KEYS)])
    admin = AdminClient({"bootstrap.servers": system.bootstrap})
    compact = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in [
                ("cleanup.policy", "compact"),
                ("min.cleanable.dirty.ratio", "0.01"),
            ]
        ],
    )
    (done,) = admin.incremental_alter_configs([compact], request_timeout=30).values()
    done.result(timeout=30)
    part = system.log_dir / f"{topic}-0"

    def emptied() -> list[Path] | None:
        # The closed segments holding no record any more (at most an empty batch).
        files = [f for f in sorted(part.glob("*.log"))[:-1] if f.stat().st_size < 100]
        return files if len(files) > 10 else None

    wait_for(emptied, f"{system.name}'s cleaner", timeout=60, interval=0.5)
    records = read_all(system, topic)
    last = {k: v for _, k, v in records}
    assert last == {key(i): f"e{rounds - 1}-{i}".encode().ljust(60) for i in range(KEYS)}
    assert len(records) < 3 * KEYS


def test_kbroker_tools_accept_the_cleaned_segments(system: System, cleaned: Cleaned) -> None:
    batches = dump(system, cleaned.topic)
    assert batches and batches[-1].last_offset == cleaned.high - 1
    part = system.log_dir / f"{cleaned.topic}-0"
    verify = subprocess.run(
        [*KBROKER, "log", "verify", str(part)], capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert " 0 bad batches" in verify.stdout, verify.stdout
