"""compression.type, topic and broker level, with real clients: the broker stores each batch
with the configured codec (recompressing only what came with another one; ``producer`` keeps
what came), and consumers read the same records."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer

from tests.broker.test_admin import admin, create
from tests.helpers import KBROKER, BrokerProcess

pytestmark = pytest.mark.timeout(120)

RECORDS = [(f"key-{i}".encode(), (f"value-{i} " * (i % 7 + 1)).encode()) for i in range(200)]


def produce(b: BrokerProcess, topic: str, codec: str, idempotent: bool = False) -> None:
    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "compression.type": codec,
            "linger.ms": 20,
            "enable.idempotence": idempotent,
        }
    )
    for k, v in RECORDS:
        p.produce(topic, v, k, partition=0, headers=[("h", k)])
    assert p.flush(30) == 0


def stored_codecs(b: BrokerProcess, topic: str) -> list[str]:
    """The codec of every batch in the partition's segment files, as `kbroker dump-log` shows it."""
    segments = sorted((b.data_dir / f"{topic}-0").glob("*.log"))
    done = subprocess.run(
        [*KBROKER, "dump-log", *map(str, segments)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [
        line.split("compresscodec: ")[1].split()[0]
        for line in done.stdout.splitlines()
        if "compresscodec:" in line
    ]


def consume(b: BrokerProcess, topic: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = []
    deadline = time.monotonic() + 30
    while len(out) < len(RECORDS) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append((m.key(), m.value(), list(m.headers() or [])))
    c.close()
    return out


def expected() -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(k, v, [("h", k)]) for k, v in RECORDS]


def test_topic_codec_is_what_is_stored(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory("auto.create.topics.enable=false")
    a = admin(b)
    create(
        a,
        NewTopic("to-zstd", 1, 1, config={"compression.type": "zstd"}),
        NewTopic("to-none", 1, 1, config={"compression.type": "uncompressed"}),
        NewTopic("kept", 1, 1, config={"compression.type": "producer"}),
        NewTopic("same", 1, 1, config={"compression.type": "lz4"}),
    )
    produce(b, "to-zstd", "gzip", idempotent=True)
    produce(b, "to-none", "snappy")
    produce(b, "kept", "gzip")
    produce(b, "same", "lz4")
    for topic, codec in [
        ("to-zstd", "zstd"),
        ("to-none", "none"),
        ("kept", "gzip"),
        ("same", "lz4"),
    ]:
        codecs = stored_codecs(b, topic)
        assert codecs and set(codecs) == {codec}, (topic, codecs)
        assert consume(b, topic) == expected(), topic
    # A second client library reads the recompressed batches too.
    kc = KafkaConsumer(
        "to-zstd",
        bootstrap_servers=b.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    got = [(m.key, m.value) for m in kc]
    kc.close()
    assert got == RECORDS


def test_broker_default_codec(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    b = broker_factory("compression.type=snappy")
    produce(b, "auto", "none")
    assert set(stored_codecs(b, "auto")) == {"snappy"}
    assert consume(b, "auto") == expected()
