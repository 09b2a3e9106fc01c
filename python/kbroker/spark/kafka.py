"""Reading topics over kbroker's own protocol layer, without any Kafka client library.

Owns what the jobs and the Python data source ask brokers directly:
`cluster_topics()` (Metadata: topics, partitions, leaders), `resolve_topics()`
(a topic name, a comma list or a regular expression -> existing topics, or a
`PipelineError` a person can read), `offsets()` (ListOffsets: earliest or
latest per partition) and `read_range()` (Fetch from a partition's leader,
decoded with the Rust record decoder) that yields the same fields Spark's
Kafka connector puts in its rows.

Reads are read_uncommitted, as the connector's consumer is by default: control
batches (transaction markers) are skipped, every other record is returned.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kbroker._kbroker import KBrokerError, decode_records
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import (
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
)
from kbroker.tools.client import BrokerClient, ClientError

EARLIEST = -2
LATEST = -1
_METADATA_VERSION = 12
_LIST_OFFSETS_VERSION = 5
_FETCH_VERSION = 11
_LEGAL_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# Record batch v2 header: baseOffset int64, batchLength int32, then
# partitionLeaderEpoch int32, magic int8, crc uint32, attributes int16.
_LOG_OVERHEAD = 12
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_BATCH_HEADER = 61
_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08


class PipelineError(Exception):
    """Something the person running a pipeline must fix (shown without a traceback)."""


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: str  # HOST:PORT of the leader, "" when the partition has none


@dataclass(frozen=True)
class Record:
    """One record with the fields of a Spark Kafka connector row."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _connect(bootstrap: str, timeout: float) -> BrokerClient:
    """A client connected to the first reachable broker of a comma-separated list."""
    errors: list[str] = []
    for address in (a.strip() for a in bootstrap.split(",")):
        if not address:
            continue
        try:
            return BrokerClient(address, timeout=timeout, client_id="kbroker-spark")
        except ClientError as exc:
            errors.append(str(exc))
    raise PipelineError(
        f"no broker reachable at {bootstrap}: " + "; ".join(errors or ["empty address"])
    )


def cluster_topics(bootstrap: str, timeout: float = 10.0) -> dict[str, list[PartitionInfo]]:
    """Every topic of the cluster with its partitions and their leaders."""
    client = _connect(bootstrap, timeout)
    try:
        resp = client.request(
            ApiKey.METADATA,
            _METADATA_VERSION,
            MetadataRequest(topics=None, allow_auto_topic_creation=False),
        )
    except ClientError as exc:
        raise PipelineError(f"cannot read metadata from {bootstrap}: {exc}") from None
    finally:
        client.close()
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
    out: dict[str, list[PartitionInfo]] = {}
    for t in resp.topics:
        if t.error_code != ErrorCode.NONE or t.name is None:
            continue
        out[t.name] = sorted(
            (
                PartitionInfo(t.name, p.partition_index, brokers.get(p.leader_id, ""))
                for p in t.partitions
            ),
            key=lambda p: p.partition,
        )
    return out


def is_pattern(spec: str) -> bool:
    """A topic spec is a regular expression unless it is a comma list of legal topic names."""
    return not all(_LEGAL_NAME.match(name.strip()) for name in spec.split(","))


def resolve_topics(bootstrap: str, spec: str, timeout: float = 10.0) -> list[str]:
    """The existing topics ``spec`` (a name, ``a,b,c`` or a regular expression) names."""
    topics = cluster_topics(bootstrap, timeout)
    if is_pattern(spec):
        try:
            pattern = re.compile(spec)
        except re.error as exc:
            raise PipelineError(f"bad topic pattern {spec!r}: {exc}") from None
        found = sorted(t for t in topics if pattern.fullmatch(t))
        if not found:
            raise PipelineError(f"no topic on {bootstrap} matches {spec!r}")
        return found
    names = [n.strip() for n in spec.split(",")]
    missing = [n for n in names if n not in topics]
    if missing:
        raise PipelineError(f"topic {', '.join(missing)} does not exist on {bootstrap}")
    return names


def offsets(
    bootstrap: str, topics: Sequence[str], which: int, timeout: float = 10.0
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the earliest (``EARLIEST``) or latest (``LATEST``, the high
    watermark) offset of every partition of ``topics``, asked of each leader."""
    layout = cluster_topics(bootstrap, timeout)
    by_leader: dict[str, dict[str, list[int]]] = {}
    for topic in topics:
        if topic not in layout:
            raise PipelineError(f"topic {topic} does not exist on {bootstrap}")
        for p in layout[topic]:
            if not p.leader:
                raise PipelineError(f"partition {topic}-{p.partition} has no leader")
            by_leader.setdefault(p.leader, {}).setdefault(topic, []).append(p.partition)
    out: dict[tuple[str, int], int] = {}
    T = ListOffsetsRequest.Topic
    for leader, wanted in by_leader.items():
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                T(name=t, partitions=[T.Partition(partition_index=p, timestamp=which) for p in ps])
                for t, ps in wanted.items()
            ],
        )
        client = _connect(leader, timeout)
        try:
            resp = client.request(ApiKey.LIST_OFFSETS, _LIST_OFFSETS_VERSION, req)
        except ClientError as exc:
            raise PipelineError(f"ListOffsets to {leader} failed: {exc}") from None
        finally:
            client.close()
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise PipelineError(
                        f"ListOffsets {t.name}-{p.partition_index}: {ErrorCode(p.error_code).name}"
                    )
                out[(t.name, p.partition_index)] = p.offset
    return out


def _split_batches(data: bytes) -> Iterator[bytes]:
    """Whole batches of a Fetch response's records; a partial last batch is dropped
    (the broker may cut the response inside one)."""
    view = memoryview(data)
    pos = 0
    while len(data) - pos >= _LOG_OVERHEAD:
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + _LOG_OVERHEAD + length
        if length < _BATCH_HEADER - _LOG_OVERHEAD or end > len(data):
            return
        yield bytes(view[pos:end])
        pos = end


def read_range(
    leader: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    timeout: float = 30.0,
    max_bytes: int = 4 << 20,
) -> Iterator[list[Record]]:
    """The records of ``topic``-``partition`` with ``start <= offset < end``, one list per
    Fetch response. Offsets missing from the log (compaction, aborted-and-cleaned
    data) are skipped, as the connector skips them; an offset out of range fails."""
    if start >= end:
        return
    client = _connect(leader, timeout)
    P = FetchRequest.Topic.Partition
    position = start
    try:
        while position < end:
            req = FetchRequest(
                replica_id=-1,
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=max_bytes,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.Topic(
                        topic=topic,
                        partitions=[
                            P(
                                partition=partition,
                                fetch_offset=position,
                                log_start_offset=-1,
                                partition_max_bytes=max_bytes,
                            ),
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            )
            try:
                resp = client.request(ApiKey.FETCH, _FETCH_VERSION, req)
            except ClientError as exc:
                raise PipelineError(
                    f"Fetch {topic}-{partition}@{position} from {leader}: {exc}"
                ) from None
            [t] = resp.responses
            [p] = t.partitions
            if p.error_code != ErrorCode.NONE:
                raise PipelineError(
                    f"Fetch {topic}-{partition}@{position} from {leader}: "
                    f"{ErrorCode(p.error_code).name}"
                )
            if position >= p.high_watermark:
                raise PipelineError(
                    f"{topic}-{partition} ends at {p.high_watermark}, "
                    f"before the requested offset {end}"
                )
            out: list[Record] = []
            before = position
            for batch in _split_batches(bytes(p.records or b"")):
                (attributes,) = _ATTRIBUTES.unpack_from(batch, _ATTRIBUTES_AT)
                (base_offset,) = struct.unpack_from(">q", batch, 0)
                (last_delta,) = struct.unpack_from(">i", batch, 23)
                next_position = base_offset + last_delta + 1
                if not attributes & _CONTROL:
                    ts_type = 1 if attributes & _LOG_APPEND_TIME else 0
                    try:
                        decoded = decode_records(batch)
                    except KBrokerError as exc:
                        raise PipelineError(
                            f"corrupt batch in {topic}-{partition} at {base_offset}: {exc}"
                        ) from None
                    for offset, ts, key, value, headers in decoded:
                        if position <= offset < end:
                            out.append(
                                Record(topic, partition, offset, ts, ts_type, key, value, headers)
                            )
                position = max(position, next_position)
                if position >= end:
                    break
            if position == before:
                raise PipelineError(
                    f"Fetch {topic}-{partition}@{position} from {leader} returned no whole batch"
                    f" below the high watermark {p.high_watermark}"
                )
            if out:
                yield out
    finally:
        client.close()
