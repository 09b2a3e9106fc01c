"""The archive job: topics persisted as Parquet, partitioned by topic, date and hour.

In the spirit of Secor: every record of the topics (a name, ``a,b`` or a
regular expression) lands once under

    OUTPUT/topic=NAME/date=YYYY-MM-DD/hour=H/part-*.parquet

with the columns topic, partition, offset, timestamp, key, value, headers
(topic, date and hour as directory partitions; date and hour in UTC, from the
record timestamp). It is a Structured Streaming query with Spark's Kafka
connector as source and Spark's file sink: the checkpoint (``OUTPUT/_checkpoint``
unless told otherwise) records which offsets each micro-batch covers and the
sink's log (``OUTPUT/_spark_metadata``) which files each committed batch wrote,
so a rerun resumes where the last committed batch ended and a batch cut short
(even by SIGKILL) is redone under the same id: no duplicates, no gaps.

A killed batch can leave part files that no committed batch lists. Spark's own
readers ignore them (they read through ``_spark_metadata``); other readers
(pyarrow, Hive, Trino) would not, so `remove_uncommitted_files()` deletes them
before the query starts again on a local output directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from kbroker.spark.common import parse_duration, run_query
from kbroker.spark.kafka import PipelineError, is_pattern, resolve_topics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
PARTITION_BY = ("topic", "date", "hour")
QUERY_NAME = "kbroker_archive"


def _local_path(location: str) -> Path | None:
    """The local directory behind ``location`` (a path or a file: URI), None for others."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else location).absolute()
    return None


def default_checkpoint(output: str) -> str:
    return output.rstrip("/") + "/_checkpoint"


def committed_files(output: Path) -> set[str] | None:
    """Names of the part files the file sink's log lists as committed (None: no log)."""
    log = output / "_spark_metadata"
    if not log.is_dir():
        return None
    names: set[str] = set()
    for entry in log.iterdir():
        if entry.name.startswith(".") or not entry.is_file():
            continue
        lines = entry.read_text(errors="replace").splitlines()
        for line in lines[1:]:  # the first line is the log's version ("v1")
            try:
                status = json.loads(line)
            except ValueError:
                continue
            path = os.path.basename(urlparse(status.get("path", "")).path)
            if status.get("action", "add") == "add":
                names.add(path)
            else:
                names.discard(path)
    return names


def remove_uncommitted_files(output: Path) -> list[Path]:
    """Deletes part files under ``output`` that no committed batch lists (left by a
    batch that was killed); returns what it deleted. Only safe while no query writes."""
    committed = committed_files(output)
    if committed is None:
        return []
    removed = []
    for root, dirs, files in os.walk(output):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            if name.startswith("part-") and name not in committed:
                path = Path(root) / name
                path.unlink()
                removed.append(path)
                crc = path.with_name(f".{name}.crc")
                if crc.exists():
                    crc.unlink()
    return removed


def check_archive(
    bootstrap: str, topic: str, output: str, checkpoint: str | None = None, interval: str = "10s"
) -> tuple[str, str, str]:
    """Checks what an archive run needs before any Spark work: the interval, the topics
    (a readable error now rather than a query that waits forever) and the output.
    Returns the output (absolute when local), the checkpoint and the trigger interval."""
    trigger_every = parse_duration(interval, "interval")
    resolve_topics(bootstrap, topic)
    local = _local_path(output)
    if local is not None:
        output = str(local)
        if local.exists() and not local.is_dir():
            raise PipelineError(f"output {output} exists and is not a directory")
    return output, checkpoint or default_checkpoint(output), trigger_every


def start_archive(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    output: str,
    *,
    checkpoint: str | None = None,
    once: bool = False,
    interval: str = "10s",
    max_records_per_batch: int | None = None,
) -> StreamingQuery:
    """Starts the archive query (see the module docstring) and returns it.

    ``once`` processes the records there are now and stops (trigger availableNow);
    otherwise a micro-batch runs every ``interval``. ``max_records_per_batch``
    bounds a micro-batch (Kafka's maxOffsetsPerTrigger).
    """
    from pyspark.sql import functions as F

    output, checkpoint, trigger_every = check_archive(
        bootstrap, topic, output, checkpoint, interval
    )
    local = _local_path(output)
    if local is not None and _local_path(checkpoint) is not None:
        remove_uncommitted_files(local)

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern" if is_pattern(topic) else "subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_records_per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    rows = reader.load().select(
        *COLUMNS,
        F.date_format("timestamp", "yyyy-MM-dd").alias("date"),
        F.hour("timestamp").alias("hour"),
    )
    writer = (
        rows.writeStream.format("parquet")
        .queryName(QUERY_NAME)
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .partitionBy(*PARTITION_BY)
        .outputMode("append")
    )
    writer = (
        writer.trigger(availableNow=True) if once else writer.trigger(processingTime=trigger_every)
    )
    return writer.start()


def archive(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    output: str,
    *,
    checkpoint: str | None = None,
    once: bool = False,
    interval: str = "10s",
    max_records_per_batch: int | None = None,
) -> None:
    """Runs the archive job: to the end of what is there with ``once``, else until
    SIGTERM/SIGINT. Raises `PipelineError` with a readable message on failure."""
    query = start_archive(
        spark,
        bootstrap,
        topic,
        output,
        checkpoint=checkpoint,
        once=once,
        interval=interval,
        max_records_per_batch=max_records_per_batch,
    )
    run_query(query, until_stopped=not once)
