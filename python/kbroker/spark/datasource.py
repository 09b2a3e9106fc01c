"""The ``kbroker`` Spark data source: topics read by Python workers, no JVM connector.

Owns `KBrokerDataSource` (pyspark.sql.datasource), registered by
`kbroker.spark.spark_session()` under the name ``kbroker``:

    spark.read.format("kbroker").option("kafka.bootstrap.servers", "host:9092")
         .option("subscribe", "events").load()

Rows have the columns and types of Spark's Kafka connector (key, value, topic,
partition, offset, timestamp, timestampType, and headers with
``includeHeaders=true``), so the two sources are interchangeable in a query.
Options follow the connector's names: ``subscribe`` (a comma list of topics)
or ``subscribePattern`` (a regular expression), ``startingOffsets`` and
``endingOffsets`` (``earliest``, ``latest`` or the connector's JSON form
``{"topic": {"0": 42, "1": -2}}`` with -2 earliest and -1 latest),
``includeHeaders``. ``bootstrap`` is accepted for ``kafka.bootstrap.servers``.

Batch reads plan one input partition per Kafka partition with offsets fixed
when the query is planned. Streaming reads (``spark.readStream``) checkpoint
``{"topic": {"partition": offset}}`` and read exactly the planned ranges in
each micro-batch, so a restarted query neither skips nor repeats records.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kbroker.spark.kafka import (
    EARLIEST,
    LATEST,
    PipelineError,
    cluster_topics,
    offsets,
    read_range,
    resolve_topics,
)

NAME = "kbroker"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
    True,
)


def kafka_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka connector rows."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


class _Options:
    """The options a reader needs, parsed once, picklable to the workers."""

    def __init__(self, options: Mapping[str, str], streaming: bool) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        bootstrap = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap")
        if not bootstrap:
            raise PipelineError("the kbroker source needs option kafka.bootstrap.servers")
        self.bootstrap: str = bootstrap
        subscribe = opts.get("subscribe") or opts.get("topic")
        pattern = opts.get("subscribepattern")
        if bool(subscribe) == bool(pattern):
            raise PipelineError(
                "the kbroker source needs exactly one of subscribe or subscribePattern"
            )
        self.spec: str = subscribe or f"(?:{pattern})"
        self.include_headers = opts.get("includeheaders", "false").lower() == "true"
        self.starting: str = opts.get("startingoffsets", "latest" if streaming else "earliest")
        self.ending: str = opts.get("endingoffsets", "latest")
        if streaming and "endingoffsets" in opts:
            raise PipelineError("endingOffsets is for batch queries only")

    def topics(self) -> list[str]:
        return resolve_topics(self.bootstrap, self.spec)


def _offsets_from(
    spec: str, topics: Sequence[str], bootstrap: str, what: str
) -> dict[tuple[str, int], int]:
    """Concrete offsets for ``earliest``, ``latest`` or the connector's JSON form."""
    earliest = offsets(bootstrap, topics, EARLIEST)
    latest = offsets(bootstrap, topics, LATEST)
    word = spec.strip().lower()
    if word == "earliest":
        return earliest
    if word == "latest":
        return latest
    try:
        given = json.loads(spec)
        if not isinstance(given, dict):
            raise ValueError("not an object")
        wanted = {(t, int(p)): int(o) for t, parts in given.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise PipelineError(f"bad {what} {spec!r}: {exc}") from None
    out: dict[tuple[str, int], int] = {}
    for tp in latest:
        o = wanted.get(tp, EARLIEST if what == "startingOffsets" else LATEST)
        out[tp] = earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
    return out


def _to_json(positions: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _from_json(data: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


class KafkaRange(InputPartition):
    """One Kafka partition's offsets ``[start, end)``, read by one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


def _plan(
    starts: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int]
) -> list[KafkaRange]:
    """A range per partition with records to read; a partition that appeared after the
    start (a new topic matching the pattern, added partitions) is read from its earliest."""
    ranges = []
    for tp, end in sorted(ends.items()):
        start = starts.get(tp, EARLIEST)
        if start == EARLIEST or end > start:
            ranges.append(KafkaRange(tp[0], tp[1], start, end))
    return ranges


def _read(options: _Options, schema: StructType, part: KafkaRange) -> Iterator[Any]:
    """Arrow record batches of one range, one per Fetch response."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    try:  # PySpark >= 4.2 asks for the zone of timestamps; 4.0 took timestamp_utc=True
        arrow_schema = to_arrow_schema(schema, timezone="UTC")  # type: ignore[call-arg,unused-ignore]
    except TypeError:
        arrow_schema = to_arrow_schema(schema)
    start = part.start
    if start == EARLIEST:
        start = offsets(options.bootstrap, [part.topic], EARLIEST)[(part.topic, part.partition)]
    leaders = {p.partition: p.leader for p in cluster_topics(options.bootstrap).get(part.topic, [])}
    leader = leaders.get(part.partition)
    if not leader:
        raise PipelineError(f"partition {part.topic}-{part.partition} has no leader")
    for records in read_range(leader, part.topic, part.partition, start, part.end):
        columns: dict[str, list[Any]] = {
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "topic": [r.topic for r in records],
            "partition": [r.partition for r in records],
            "offset": [r.offset for r in records],
            "timestamp": [r.timestamp_ms * 1000 for r in records],
            "timestampType": [r.timestamp_type for r in records],
        }
        if options.include_headers:
            # The connector gives null, not an empty array, for a record without headers.
            columns["headers"] = [
                [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
                for r in records
            ]
        arrays = []
        for field in arrow_schema:
            if pa.types.is_timestamp(field.type):
                arrays.append(pa.array(columns[field.name], pa.int64()).cast(field.type))
            else:
                arrays.append(pa.array(columns[field.name], field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


class KBrokerBatchReader(DataSourceReader):
    def __init__(self, options: _Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        topics = self.options.topics()
        starts = _offsets_from(
            self.options.starting, topics, self.options.bootstrap, "startingOffsets"
        )
        ends = _offsets_from(self.options.ending, topics, self.options.bootstrap, "endingOffsets")
        return _plan(starts, ends)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange)
        return _read(self.options, self.schema, partition)


class KBrokerStreamReader(DataSourceStreamReader):
    def __init__(self, options: _Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def initialOffset(self) -> dict[str, Any]:
        topics = self.options.topics()
        return _to_json(
            _offsets_from(self.options.starting, topics, self.options.bootstrap, "startingOffsets")
        )

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        # PySpark 4.2 passes the start offset and a read limit; with no default read limit
        # declared the limit is "all available", which is what is returned.
        # Topics (or partitions) that appeared since the start are read from their beginning.
        return _to_json(offsets(self.options.bootstrap, self.options.topics(), LATEST))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return _plan(_from_json(start), _from_json(end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRange)
        return _read(self.options, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: progress lives in Spark's checkpoint."""


class KBrokerDataSource(DataSource):
    """``spark.read.format("kbroker")``: see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return kafka_schema(self.options.get("includeHeaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return KBrokerBatchReader(_Options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KBrokerStreamReader(_Options(self.options, streaming=True), schema)
