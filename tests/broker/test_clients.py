"""Real clients against a real kbroker process: produce, consume, offsets, restarts."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers import BrokerProcess, consume_all, create_topic, produce, topic_name

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_roundtrip_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = topic_name()
    records = [
        (b"key-%d" % i, b"value-%d" % i * (i % 7 + 1), [("trace", b"%d" % i), ("empty", None)])
        for i in range(500)
    ]
    records += [(None, b"no key", None), (b"tombstone", None, None)]
    reports = produce(broker.bootstrap, topic, records, **{"compression.type": codec})
    assert all(err is None for err, _ in reports)
    got = consume_all(broker.bootstrap, topic, 1, len(records))
    assert [(m.key(), m.value()) for m in got] == [(r[0], r[1]) for r in records]
    assert [m.offset() for m in got] == list(range(len(records)))
    assert got[3].headers() == [("trace", b"3"), ("empty", None)]


def test_each_client_reads_what_the_others_wrote(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer

    topic = topic_name()
    create_topic(broker.bootstrap, topic, partitions=3)
    produce(broker.bootstrap, topic, [(b"c%d" % i, b"confluent") for i in range(30)])
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
    for i in range(30):
        kp.send(topic, key=b"k%d" % i, value=b"kafka-python", headers=[("h", b"1")])
    kp.flush(10)
    kp.close()

    async def aio() -> list[bytes]:
        pr = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="snappy")
        await pr.start()
        try:
            for i in range(30):
                await pr.send_and_wait(topic, b"aiokafka", key=b"a%d" % i)
        finally:
            await pr.stop()
        co = AIOKafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        )
        await co.start()
        values: list[bytes] = []
        try:
            deadline = time.monotonic() + 20
            while len(values) < 90 and time.monotonic() < deadline:
                for msgs in (await co.getmany(timeout_ms=500)).values():
                    values += [m.value for m in msgs]
        finally:
            await co.stop()
        return values

    aio_values = asyncio.run(aio())
    kc = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        group_id=None,
    )
    kp_values = [m.value for m in kc]
    kc.close()
    cf_values = [m.value() for m in consume_all(broker.bootstrap, topic, 3, 90)]
    for values in (aio_values, kp_values, cf_values):
        assert sorted(values) == sorted(
            [b"confluent"] * 30 + [b"kafka-python"] * 30 + [b"aiokafka"] * 30
        )
    kcat = subprocess.run(
        ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-f", "%s\n"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert sorted(kcat.stdout.split()) == sorted(
        [b"confluent"] * 30 + [b"kafka-python"] * 30 + [b"aiokafka"] * 30
    )


def test_kcat_produce_and_consume_keys(broker: BrokerProcess) -> None:
    topic = topic_name()
    lines = "".join(f"key{i}:value{i}\n" for i in range(50))
    subprocess.run(
        ["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-K:", "-z", "lz4"],
        input=lines.encode(),
        timeout=30,
        check=True,
    )
    out = subprocess.run(
        ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-f", "%o %k=%s\n"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.decode().splitlines() == [f"{i} key{i}=value{i}" for i in range(50)]


def test_idempotent_producer_no_duplicates_many_partitions(broker: BrokerProcess) -> None:
    topic = topic_name()
    create_topic(broker.bootstrap, topic, partitions=16)
    records = [(b"%d" % i, b"v%d" % i, None, i % 16) for i in range(4000)]
    reports = produce(
        broker.bootstrap,
        topic,
        records,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "batch.num.messages": 50,
            "linger.ms": 0,
        },
    )
    assert all(err is None for err, _ in reports)
    got = consume_all(broker.bootstrap, topic, 16, 4000)
    assert sorted(int(m.value()[1:]) for m in got) == list(range(4000))
    for p in range(16):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == list(range(250))


def test_message_size_limit(broker_factory: Any) -> None:
    b = broker_factory("message.max.bytes=100000")
    topic = topic_name()
    near = b"x" * 99_000
    reports = produce(
        b.bootstrap,
        topic,
        [(b"k", near)],
        **{"compression.type": "none", "message.max.bytes": 1_000_000},
    )
    assert reports[0][0] is None
    reports = produce(
        b.bootstrap,
        topic,
        [(b"k", b"y" * 150_000)],
        **{"compression.type": "none", "message.max.bytes": 1_000_000},
    )
    assert reports[0][0] is not None and reports[0][0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    got = consume_all(b.bootstrap, topic, 1, 1)
    assert [m.value() for m in got] == [near]


def test_list_offsets_by_time(broker: BrokerProcess) -> None:
    topic = topic_name()
    base = 1_700_000_000_000
    produce(
        broker.bootstrap,
        topic,
        [(None, b"%d" % i, None, 0, base + i * 1000) for i in range(100)],
        **{"linger.ms": 0, "batch.num.messages": 7},
    )
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        for ts, want in [(base, 0), (base + 41_500, 42), (base + 99_000, 99), (base + 10**9, -1)]:
            [tp] = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.offset == want, (ts, tp.offset)
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 100)
    finally:
        c.close()


def test_log_append_time_topic(broker: BrokerProcess) -> None:
    topic = topic_name()
    create_topic(broker.bootstrap, topic, **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce(broker.bootstrap, topic, [(None, b"v", None, 0, 1000)])
    [msg] = consume_all(broker.bootstrap, topic, 1, 1)
    kind, ts = msg.timestamp()
    assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME
    assert before - 1000 <= ts <= int(time.time() * 1000) + 1000


def test_restart_and_continue(broker: BrokerProcess) -> None:
    topic = topic_name()
    produce(broker.bootstrap, topic, [(None, b"a%d" % i) for i in range(100)])
    assert broker.stop() == 0
    broker.start()
    produce(broker.bootstrap, topic, [(None, b"b%d" % i) for i in range(100)])
    got = consume_all(broker.bootstrap, topic, 1, 200)
    assert [m.offset() for m in got] == list(range(200))
    assert got[100].value() == b"b0"


def test_kill_9_recovers_everything_acknowledged(broker: BrokerProcess) -> None:
    topic = topic_name()
    reports = produce(
        broker.bootstrap, topic, [(b"k", b"v%d" % i) for i in range(2000)], acks="all"
    )
    acked = sum(1 for err, _ in reports if err is None)
    assert acked == 2000
    broker.kill()
    broker.start()
    got = consume_all(broker.bootstrap, topic, 1, acked)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(2000)]
    produce(broker.bootstrap, topic, [(b"k", b"after")])
    assert consume_all(broker.bootstrap, topic, 1, 2001)[-1].offset() == 2000


def test_consumers_see_only_committed_and_long_poll(broker: BrokerProcess) -> None:
    """A consumer waiting at the log end gets new data as soon as it is written."""
    topic = topic_name()
    produce(broker.bootstrap, topic, [(None, b"first")])
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "lp",
            "fetch.wait.max.ms": 5000,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 1)])
    try:
        assert c.poll(1.0) is None
        produce(broker.bootstrap, topic, [(None, b"second")])
        start = time.monotonic()
        msg = None
        while msg is None and time.monotonic() - start < 10:
            msg = c.poll(0.5)
        assert msg is not None and msg.value() == b"second"
        assert time.monotonic() - start < 4.0  # woken by the write, not the 5 s timeout
    finally:
        c.close()


def test_fetch_large_catch_up_uses_whole_batches(broker: BrokerProcess) -> None:
    """Many MiB of data: the zero-copy path; consumers get every record in order."""
    topic = topic_name()
    value = b"z" * 1000
    produce(
        broker.bootstrap,
        topic,
        [(None, value)] * 20_000,
        **{"compression.type": "none", "batch.size": 1_000_000},
    )
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "big",
            "enable.auto.commit": False,
            "fetch.max.bytes": 4_000_000,
            "max.partition.fetch.bytes": 2_000_000,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < 20_000 and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None
                assert m.offset() == seen and m.value() == value
                seen += 1
    finally:
        c.close()
    assert seen == 20_000


def test_altered_limits_take_effect_on_produce(broker: BrokerProcess) -> None:
    """Topic overrides and dynamic broker defaults reach the produce path at once."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(resource: ConfigResource) -> None:
        admin.incremental_alter_configs([resource])[resource].result(timeout=15)

    def produce_error(topic: str, size: int) -> Any:
        [(err, _)] = produce(
            broker.bootstrap,
            topic,
            [(b"k", b"x" * size)],
            **{"compression.type": "none", "message.max.bytes": 1_000_000},
        )
        return None if err is None else err.code()

    overridden, defaulted = topic_name(), topic_name()
    create_topic(broker.bootstrap, overridden)
    create_topic(broker.bootstrap, defaulted)
    assert produce_error(overridden, 50_000) is None
    alter(
        ConfigResource(
            "topic",
            overridden,
            incremental_configs=[
                ConfigEntry(
                    "max.message.bytes", "10000", incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
    )
    assert produce_error(overridden, 50_000) == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_error(defaulted, 50_000) is None
    alter(
        ConfigResource(
            "broker",
            "0",
            incremental_configs=[
                ConfigEntry(
                    "message.max.bytes", "20000", incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
    )
    assert produce_error(defaulted, 50_000) == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_error(defaulted, 5_000) is None
