"""The ``kbroker`` Python data source returns the rows Spark's Kafka connector returns:
batch reads (whole topics, offset ranges, patterns, every codec, LogAppendTime) and a
streaming read that resumes from its checkpoint without losing or repeating rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kbroker.spark.kafka import PipelineError
from tests.helpers import BrokerProcess, create_topic, produce, topic_name

ORDER = ["topic", "partition", "offset"]


def fill(bs: str, topic: str, first: int, count: int, codec: str) -> None:
    records = [
        (
            None if i % 11 == 0 else b"k%d" % i,
            None if i % 13 == 0 else b"v%d" % i * (i % 4),
            [("a", b"%d" % i), ("b", None)] if i % 2 else None,
            i % 3,
            1_700_000_000_000 + i,
        )
        for i in range(first, first + count)
    ]
    reports = produce(bs, topic, records, **{"compression.type": codec})
    assert all(err is None for err, _ in reports)


def both(spark: Any, bs: str, **options: str) -> tuple[list[Any], list[Any]]:
    def read(fmt: str) -> list[Any]:
        reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bs)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load().orderBy(*ORDER).collect()

    return read("kafka"), read("kbroker")


@pytest.fixture(scope="module")
def topics(spark_broker: BrokerProcess) -> tuple[str, str]:
    bs = spark_broker.bootstrap
    prefix = topic_name("ds")
    create_topic(bs, f"{prefix}-create", partitions=3)
    create_topic(
        bs, f"{prefix}-append", partitions=3, **{"message.timestamp.type": "LogAppendTime"}
    )
    for n, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        fill(bs, f"{prefix}-create", n * 400, 400, codec)
    fill(bs, f"{prefix}-append", 0, 300, "zstd")
    return f"{prefix}-create", f"{prefix}-append"


def test_batch_rows_equal_the_connectors(
    spark: Any, spark_broker: BrokerProcess, topics: tuple[str, str]
) -> None:
    bs = spark_broker.bootstrap
    create, append = topics
    connector, ours = both(spark, bs, subscribe=create, includeHeaders="true")
    assert len(connector) == 2000
    assert ours == connector
    assert {r.timestampType for r in ours} == {0}

    connector, ours = both(spark, bs, subscribePattern=topics[0].rsplit("-", 1)[0] + "-.*")
    assert len(connector) == 2300 and ours == connector
    assert {r.timestampType for r in ours if r.topic == append} == {1}

    ranges = json.dumps({create: {"0": 10, "1": -2, "2": 600}})
    ends = json.dumps({create: {"0": 200, "1": 5, "2": -1}})
    connector, ours = both(spark, bs, subscribe=create, startingOffsets=ranges, endingOffsets=ends)
    assert len(connector) == 190 + 5 + (2000 // 3 - 600)
    assert ours == connector


def test_streaming_read_resumes_exactly(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    bs = spark_broker.bootstrap
    topic = topic_name("ds-stream")
    create_topic(bs, topic, partitions=3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        stream = (
            spark.readStream.format("kbroker")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None

    fill(bs, topic, 0, 900, "lz4")
    run()
    fill(bs, topic, 900, 600, "none")
    run()
    run()  # nothing new: nothing added
    got = spark.read.parquet(str(out)).orderBy(*ORDER).collect()
    want = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .orderBy(*ORDER)
        .collect()
    )
    assert len(want) == 1500
    assert got == want


def test_missing_topic_is_a_clear_error(spark: Any, spark_broker: BrokerProcess) -> None:
    reader = (
        spark.read.format("kbroker")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", "no-such-topic")
    )
    with pytest.raises(Exception, match="topic no-such-topic does not exist"):
        reader.load().collect()
    with pytest.raises(PipelineError, match="exactly one of subscribe"):
        from kbroker.spark.datasource import _Options

        _Options({"kafka.bootstrap.servers": spark_broker.bootstrap}, streaming=False)
