"""``kbroker offsets`` and ``kbroker delete-records``: ListOffsets and DeleteRecords,
each sent to the leaders of the partitions, as plain data."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DeleteRecordsRequest
from kbroker.protocol.messages.core import ListOffsetsRequest
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error

# ListOffsets' special timestamps.
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
NAMED_TIMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP}

TP = tuple[str, int]


def parse_time(text: str) -> int:
    """``earliest``, ``latest``, ``max-timestamp``, epoch milliseconds, or an ISO 8601
    date/time (UTC unless it names a zone) -> the ListOffsets timestamp."""
    spec = text.strip().lower()
    if spec in NAMED_TIMES:
        return NAMED_TIMES[spec]
    if re.fullmatch(r"\d+", spec):
        return int(spec)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"expected earliest, latest, max-timestamp, epoch milliseconds or an ISO date/time, "
            f"got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` (every partition) or ``TOPIC:P,P,...``."""
    topic, sep, parts = spec.rpartition(":")
    if not sep:
        return spec, None
    try:
        partitions = sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise ValueError(f"expected TOPIC or TOPIC:PARTITION,..., got {spec!r}") from None
    if not topic or any(p < 0 for p in partitions):
        raise ValueError(f"expected TOPIC or TOPIC:PARTITION,..., got {spec!r}")
    return topic, partitions


def partition_leaders(
    cluster: Cluster, specs: Sequence[tuple[str, list[int] | None]], leaderless: bool = False
) -> dict[TP, int]:
    """(topic, partition) -> leader id for the partitions ``specs`` name; ClientError for an
    unknown topic or partition, or a partition without a leader (-1 with ``leaderless``)."""
    topics = list(dict.fromkeys(t for t, _ in specs))
    resp = cluster.metadata(topics)
    known: dict[str, dict[int, int]] = {}
    for t in resp.topics:
        if t.error_code != ErrorCode.NONE:
            raise ClientError(broker_error(f"topic {t.name!r}", t.error_code))
        known[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
    out: dict[TP, int] = {}
    for topic, partitions in specs:
        for p in sorted(known[topic]) if partitions is None else partitions:
            if p not in known[topic]:
                raise ClientError(
                    f"topic {topic!r} has no partition {p} (it has {len(known[topic])})"
                )
            if known[topic][p] < 0 and not leaderless:
                raise ClientError(f"{topic}-{p} has no leader (LEADER_NOT_AVAILABLE)")
            out[(topic, p)] = known[topic][p]
    return out


def _by_leader(leaders: Mapping[TP, int], wanted: Iterable[TP]) -> dict[int, dict[str, list[int]]]:
    grouped: dict[int, dict[str, list[int]]] = {}
    for topic, partition in sorted(wanted):
        grouped.setdefault(leaders[(topic, partition)], {}).setdefault(topic, []).append(partition)
    return grouped


def list_offsets(
    cluster: Cluster,
    partitions: Iterable[TP],
    timestamp: int,
    leaders: Mapping[TP, int],
    unreachable: dict[int, str] | None = None,
) -> dict[TP, dict[str, Any]]:
    """(topic, partition) -> {"offset", "timestamp", "error"} for ``timestamp`` (EARLIEST,
    LATEST, MAX_TIMESTAMP or epoch ms); offset None when no record is that late. With
    ``unreachable``, a leader that cannot be reached is noted there (id -> why) and its
    partitions left out, instead of a ClientError; a leader noted already is not tried."""
    out: dict[TP, dict[str, Any]] = {}
    for node, topics in _by_leader(leaders, partitions).items():
        if unreachable is not None and node in unreachable:
            continue
        try:
            out.update(_list_offsets_of(cluster, node, topics, timestamp))
        except ClientError as exc:
            if unreachable is None or not cluster.lost(node):
                raise
            unreachable[node] = str(exc)
    return out


def _list_offsets_of(
    cluster: Cluster, node: int, topics: Mapping[str, list[int]], timestamp: int
) -> dict[TP, dict[str, Any]]:
    out: dict[TP, dict[str, Any]] = {}
    client = cluster.node(node)
    version = client.version(ApiKey.LIST_OFFSETS)
    if timestamp == MAX_TIMESTAMP and version < 7:
        raise ClientError(f"broker {node} cannot look up max-timestamp (ListOffsets < v7)")
    T = ListOffsetsRequest.Topic
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            T(
                name=t,
                partitions=[T.Partition(partition_index=p, timestamp=timestamp) for p in ps],
            )
            for t, ps in topics.items()
        ],
    )
    resp = client.request(ApiKey.LIST_OFFSETS, version, req)
    for t in resp.topics:
        for p in t.partitions:
            ok = p.error_code == ErrorCode.NONE
            out[(t.name, p.partition_index)] = {
                "offset": p.offset if ok and p.offset >= 0 else None,
                "timestamp": p.timestamp if ok and p.timestamp >= 0 else None,
                "error": None if ok else error_name(p.error_code),
            }
    return out


# The error of a partition whose leader could not be reached (the connection failed).
UNREACHABLE = error_name(ErrorCode.BROKER_NOT_AVAILABLE)
NO_LEADER = error_name(ErrorCode.LEADER_NOT_AVAILABLE)


def offsets(
    cluster: Cluster,
    specs: Sequence[tuple[str, list[int] | None]],
    at: int | None = None,
    unreachable: dict[int, str] | None = None,
) -> list[dict[str, Any]]:
    """Per partition the earliest and latest offsets and, with ``at``, the first offset
    whose timestamp is at or after it (its timestamp too). A partition without a leader has
    the error LEADER_NOT_AVAILABLE; one whose leader cannot be reached BROKER_NOT_AVAILABLE,
    and the leader is noted in ``unreachable`` (id -> why); the others are answered."""
    unreachable = {} if unreachable is None else unreachable
    leaders = partition_leaders(cluster, specs, leaderless=True)
    led = {tp: node for tp, node in leaders.items() if node >= 0}
    earliest = list_offsets(cluster, led, EARLIEST, led, unreachable)
    latest = list_offsets(cluster, led, LATEST, led, unreachable)
    found = list_offsets(cluster, led, at, led, unreachable) if at is not None else {}
    nothing: dict[str, Any] = {"offset": None, "timestamp": None, "error": None}
    rows = []
    for tp in sorted(leaders):
        row: dict[str, Any] = {
            "topic": tp[0],
            "partition": tp[1],
            "leader": leaders[tp] if leaders[tp] >= 0 else None,
            "earliest": earliest.get(tp, nothing)["offset"],
            "latest": latest.get(tp, nothing)["offset"],
        }
        if at is not None:
            row["offset"] = found.get(tp, nothing)["offset"]
            row["timestamp"] = found.get(tp, nothing)["timestamp"]
        if leaders[tp] < 0:
            row["error"] = NO_LEADER
        elif leaders[tp] in unreachable:
            row["error"] = UNREACHABLE
        else:
            row["error"] = (
                earliest[tp]["error"] or latest[tp]["error"] or found.get(tp, {}).get("error")
            )
        rows.append(row)
    return rows


def delete_records(
    cluster: Cluster,
    specs: Sequence[tuple[str, list[int] | None]],
    before: int,
    unreachable: dict[int, str] | None = None,
) -> list[dict[str, Any]]:
    """Delete the records before offset ``before`` (-1: the high watermark, i.e. all) in
    the partitions ``specs`` name; per partition the new log start offset or the error
    (LEADER_NOT_AVAILABLE without a leader; BROKER_NOT_AVAILABLE when the leader cannot be
    reached, which is then noted in ``unreachable``, id -> why)."""
    if before < -1:
        raise ClientError(f"offset must be -1 (the end) or at least 0, got {before}")
    unreachable = {} if unreachable is None else unreachable
    leaders = partition_leaders(cluster, specs, leaderless=True)
    rows = [
        {"topic": t, "partition": p, "log_start_offset": None, "error": NO_LEADER}
        for (t, p), node in leaders.items()
        if node < 0
    ]
    led = {tp: node for tp, node in leaders.items() if node >= 0}
    for node, topics in _by_leader(led, led).items():
        T = DeleteRecordsRequest.Topic
        req = DeleteRecordsRequest(
            topics=[
                T(name=t, partitions=[T.Partition(partition_index=p, offset=before) for p in ps])
                for t, ps in topics.items()
            ],
            # Below the socket's timeout, so that a leader still waiting for its followers
            # answers REQUEST_TIMED_OUT before the connection gives up.
            timeout_ms=int(min(cluster.timeout * 0.9, cluster.timeout - 0.5) * 1000),
        )
        try:
            client = cluster.node(node)
            resp = client.request(ApiKey.DELETE_RECORDS, client.version(ApiKey.DELETE_RECORDS), req)
        except ClientError as exc:
            if not cluster.lost(node):
                raise
            unreachable[node] = str(exc)
            rows += [
                {"topic": t, "partition": p, "log_start_offset": None, "error": UNREACHABLE}
                for t, ps in topics.items()
                for p in ps
            ]
            continue
        for t in resp.topics:
            for p in t.partitions:
                ok = p.error_code == ErrorCode.NONE
                rows.append(
                    {
                        "topic": t.name,
                        "partition": p.partition_index,
                        "log_start_offset": p.low_watermark if ok else None,
                        "error": None if ok else error_name(p.error_code),
                    }
                )
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))
