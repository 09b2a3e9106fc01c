"""Compaction of a topic holding transactions, on Apache Kafka 3.9.1 (ZooKeeper mode) and
kbroker with the same settings: committed, aborted and open transactions written by
confluent-kafka's transactional producers, then read by read_committed and
read_uncommitted consumers before and after the broker's own cleaner ran.

What both must show: the read_committed view by key is the same before and after
cleaning; the records of aborted transactions are gone; an open transaction (past the
last stable offset) is untouched; a marker stays while its transaction has data in the
log and, once none is left, until delete.retention.ms has passed; and kbroker's
`dump-log` and `log verify` read what each cleaner wrote. One broker of each system
serves the module; the topic rolls segments every second and is cleaned at once.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.broker.transactions import transactional_producer
from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import KBROKER, BrokerProcess, create_topic, knows_controller, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(240)

SETTINGS = {"log.cleaner.backoff.ms": "100"}
RETENTION_MS = 6000
TOPIC = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(RETENTION_MS),
    # Held back until the test has read the log as written, then set to 0.
    "min.compaction.lag.ms": "3600000",
}
WAIT = 90.0

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
            zookeeper.connect, f"/txc-{uuid.uuid4().hex[:8]}", root, settings=SETTINGS
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


def read(bootstrap: str, topic: str, isolation: str) -> list[Record]:
    """Every record a consumer at ``isolation`` reads from offset 0 to its end of the
    partition (the last stable offset for read_committed)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Record] = []
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, f"{isolation} read stopped at {out[-1:]}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()


def by_key(records: list[Record]) -> dict[bytes | None, bytes | None]:
    return {k: v for _, k, v in records}


@dataclass(frozen=True)
class Batch:
    base_offset: int
    count: int
    producer_id: int
    is_control: bool


BATCH_LINE = re.compile(
    r"baseOffset: (\d+) lastOffset: \d+ count: (\d+) .* producerId: (-?\d+) .*"
    r"isControl: (True|False)"
)


def dump(system: System, topic: str) -> list[Batch]:
    """The partition's batches, as `kbroker dump-log` reads the segment files (again
    when a cleaner swapped a file away under it)."""
    part = system.log_dir / f"{topic}-0"
    for _ in range(20):
        files = sorted(part.glob("*.log"))
        run = subprocess.run(
            [*KBROKER, "dump-log", *map(str, files)], capture_output=True, text=True, timeout=60
        )
        if run.returncode == 0:
            return [
                Batch(int(m[1]), int(m[2]), int(m[3]), m[4] == "True")
                for m in BATCH_LINE.finditer(run.stdout)
            ]
        # A file renamed or deleted by a swap, or the tail of the active segment
        # being written: read again.
        time.sleep(0.2)
    raise AssertionError(f"dump-log failed on {part}: {run.stdout[-2000:]}{run.stderr}")


def markers(batches: list[Batch]) -> list[Batch]:
    return [b for b in batches if b.is_control and b.count > 0]


def produce(p: Producer, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    for key, value in records:
        p.produce(topic, value, key, partition=0)
    assert p.flush(30) == 0


def filler(p: Producer, topic: str, round_: int, n: int = 30) -> None:
    # Values of 100 bytes under 10 keys: segments of 4 KiB roll every ~35 records.
    produce(
        p, topic, [(f"f{i % 10}".encode(), f"{round_}-{i}".encode().ljust(100)) for i in range(n)]
    )


def test_compaction_of_committed_aborted_and_open_transactions(system: System) -> None:
    conf: dict[str, Any] = {"bootstrap.servers": system.bootstrap}
    topic = f"txc-{uuid.uuid4().hex[:8]}"
    create_topic(system.bootstrap, topic, **TOPIC)
    plain = Producer({**conf, "linger.ms": 2, "batch.size": 2000})
    keys = [f"k{i}".encode() for i in range(10)]
    produce(plain, topic, [(k, b"plain") for k in keys])
    a = transactional_producer(conf)
    b = transactional_producer(conf)
    # A commits k0-k4, B aborts k5-k9, A commits k0-k1 again, B commits kb.
    a.begin_transaction()
    produce(a, topic, [(k, b"a1") for k in keys[:5]])
    a.commit_transaction(30)
    b.begin_transaction()
    produce(b, topic, [(k, b"aborted") for k in keys[5:]])
    b.abort_transaction(30)
    a.begin_transaction()
    produce(a, topic, [(k, b"a2") for k in keys[:2]])
    a.commit_transaction(30)
    b.begin_transaction()
    produce(b, topic, [(b"kb", b"b2")])
    b.commit_transaction(30)
    filler(plain, topic, 0, 80)
    # C's transaction stays open: the last stable offset stops at it.
    c = transactional_producer(conf)
    c.begin_transaction()
    produce(c, topic, [(keys[3], b"open")])
    time.sleep(1.1)
    filler(plain, topic, 1)
    committed_before = read(system.bootstrap, topic, "read_committed")
    uncommitted_before = read(system.bootstrap, topic, "read_uncommitted")
    assert any(v == b"aborted" for _, _, v in uncommitted_before)
    assert not any(v in (b"aborted", b"open") for _, _, v in committed_before)
    open_record = next(r for r in uncommitted_before if r[2] == b"open")
    marks = markers(dump(system, topic))
    assert len(marks) == 4, marks
    a1_commit, b_abort, a2_commit, _b2_commit = marks
    assert a1_commit.producer_id == a2_commit.producer_id != b_abort.producer_id

    # Now the cleaner may start: it removes the aborted records below the open
    # transaction.
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = AdminClient(conf)
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)

    def aborted_gone() -> bool:
        return not any(
            v == b"aborted" for _, _, v in read(system.bootstrap, topic, "read_uncommitted")
        )

    wait_for(aborted_gone, f"{system.name}'s cleaner to remove aborted data", WAIT)
    present = markers(dump(system, topic))
    committed_after = read(system.bootstrap, topic, "read_committed")
    uncommitted_after = read(system.bootstrap, topic, "read_uncommitted")
    assert by_key(committed_after) == by_key(committed_before)
    assert set(committed_after) <= set(committed_before)
    # The open transaction is untouched, and still invisible to read_committed.
    assert open_record in uncommitted_after
    # B's abort marker stays until delete.retention.ms after its data went.
    assert b_abort in present, present
    assert a1_commit in present and a2_commit in present

    # C aborts; once cleaning reaches past it and the horizon passes, B's abort
    # marker goes, while A's first commit marker stays: k2-k4 of it remain.
    c.abort_transaction(30)
    expected = {**by_key(committed_before)}
    rounds = iter(range(2, 1000))

    def settled() -> bool:
        filler(plain, topic, next(rounds), 10)
        batches = dump(system, topic)
        return b_abort not in markers(batches) and not any(
            v == b"open" for _, _, v in read(system.bootstrap, topic, "read_uncommitted")
        )

    wait_for(settled, f"{system.name}'s cleaner to remove the abort marker", WAIT, interval=0.5)
    final = markers(dump(system, topic))
    assert a1_commit in final, final
    committed_final = read(system.bootstrap, topic, "read_committed")
    final_view = by_key(committed_final)
    for k in [*keys, b"kb"]:
        assert final_view[k] == expected[k], k
    assert final_view[keys[3]] == b"a1"

    # kbroker's tools read every segment the cleaner wrote.
    part = system.log_dir / f"{topic}-0"
    verify = subprocess.run(
        [*KBROKER, "log", "verify", str(part)], capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
