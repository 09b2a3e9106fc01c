"""The aggregate job: per-key count, sum and average over tumbling event-time windows.

Reads a topic with Spark's Kafka connector, takes each record's value as a
number (UTF-8 text such as ``42`` or ``-1.5``, or with ``field`` the named
member of a JSON object; records whose value is not a number are skipped),
groups by record key and tumbling window of the record timestamp, and writes
one record per (key, window) to the output topic through Spark's Kafka sink
(the Java producer, idempotent by default). The output record's key is the
input key; its value is JSON:

    {"key": "k1", "window_start": 1700000000000, "window_end": 1700000010000,
     "count": 3, "sum": 7.5, "avg": 2.5}

with window bounds in epoch milliseconds. Output mode is append: a window is
written once, when the watermark (the greatest timestamp seen minus the
``watermark`` delay, advanced between micro-batches) passes its end; records
that arrive for a window already written are late and dropped. Window state
and progress live in the checkpoint, so a restart loses no window. Spark's
Kafka sink is at-least-once: a batch cut short after its records reached the
topic but before its commit is written again on restart, so after a crash a
consumer may see a window twice (with the same numbers).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from kbroker.spark.common import parse_duration, run_query
from kbroker.spark.kafka import PipelineError, is_pattern, resolve_topics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

QUERY_NAME = "kbroker_aggregate"
_FIELD = re.compile(r"^[A-Za-z0-9_.-]+$")


def default_checkpoint(topic: str, output_topic: str) -> str:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return str(base / "kbroker" / "pipeline" / f"aggregate-{topic}-{output_topic}")


def check_aggregate(
    bootstrap: str,
    topic: str,
    output_topic: str,
    *,
    window: str = "10s",
    watermark: str = "30s",
    field: str | None = None,
    interval: str = "10s",
) -> tuple[str, str, str]:
    """Checks what an aggregate run needs before any Spark work; returns the window,
    watermark delay and trigger interval in Spark's interval form."""
    window_length = parse_duration(window, "window")
    delay = parse_duration(watermark, "watermark", allow_zero=True)
    trigger_every = parse_duration(interval, "interval")
    if field is not None and not _FIELD.match(field):
        raise PipelineError(f"bad field {field!r}: letters, digits, '_', '-' and '.' only")
    if is_pattern(topic) or is_pattern(output_topic) or "," in topic + output_topic:
        raise PipelineError(
            "the aggregate job reads one topic and writes one topic (names, not patterns)"
        )
    resolve_topics(bootstrap, topic)
    resolve_topics(bootstrap, output_topic)
    return window_length, delay, trigger_every


def start_aggregate(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    output_topic: str,
    *,
    window: str = "10s",
    watermark: str = "30s",
    field: str | None = None,
    checkpoint: str | None = None,
    once: bool = False,
    interval: str = "10s",
) -> StreamingQuery:
    """Starts the aggregation query (see the module docstring) and returns it."""
    from pyspark.sql import functions as F

    window_length, delay, trigger_every = check_aggregate(
        bootstrap,
        topic,
        output_topic,
        window=window,
        watermark=watermark,
        field=field,
        interval=interval,
    )

    text = F.col("value").cast("string")
    if field is not None:
        text = F.get_json_object(text, f"$.{field}")
    values = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "timestamp", text.alias("t"))
        .select("key", "timestamp", F.expr("try_cast(t AS DOUBLE)").alias("x"))
        .where(F.col("x").isNotNull())
    )
    windows = (
        values.withWatermark("timestamp", delay)
        .groupBy(F.window("timestamp", window_length), "key")
        .agg(F.count("x").alias("count"), F.sum("x").alias("sum"), F.avg("x").alias("avg"))
    )
    out = windows.select(
        F.col("key"),
        F.to_json(
            F.struct(
                F.col("key").cast("string").alias("key"),
                F.unix_millis(F.col("window.start")).alias("window_start"),
                F.unix_millis(F.col("window.end")).alias("window_end"),
                "count",
                "sum",
                "avg",
            )
        ).alias("value"),
    )
    writer = (
        out.writeStream.format("kafka")
        .queryName(QUERY_NAME)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint or default_checkpoint(topic, output_topic))
        .outputMode("append")
    )
    writer = (
        writer.trigger(availableNow=True) if once else writer.trigger(processingTime=trigger_every)
    )
    return writer.start()


def aggregate(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    output_topic: str,
    *,
    window: str = "10s",
    watermark: str = "30s",
    field: str | None = None,
    checkpoint: str | None = None,
    once: bool = False,
    interval: str = "10s",
) -> None:
    """Runs the aggregate job: to the end of what is there with ``once``, else until
    SIGTERM/SIGINT. Raises `PipelineError` with a readable message on failure."""
    query = start_aggregate(
        spark,
        bootstrap,
        topic,
        output_topic,
        window=window,
        watermark=watermark,
        field=field,
        checkpoint=checkpoint,
        once=once,
        interval=interval,
    )
    run_query(query, until_stopped=not once)
