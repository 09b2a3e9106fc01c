"""What ``kbroker topic create|list|describe|alter|delete`` ask a cluster, as plain data.

Each function takes a connected `Cluster` and returns dicts and lists ready
to print or dump as JSON (the field names are the documented ``--json``
output); the click commands in `kbroker.cli` only format them. Per-topic
failures come back as readable strings; a failure of the whole request raises
`ClientError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
)
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error, controller
from kbroker.tools.offsets import EARLIEST, LATEST, list_offsets

TOPIC_RESOURCE = 2
MIN_ISR = "min.insync.replicas"
FILTERS = ("under_replicated", "under_min_isr", "at_min_isr", "unavailable")


def parse_assignment(text: str) -> list[list[int]]:
    """Kafka's ``--replica-assignment``: ``1:2,2:3`` is partition 0 on brokers 1 and 2,
    partition 1 on 2 and 3."""
    try:
        assignment = [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise ValueError(
            f"expected BROKER:BROKER,... per partition (e.g. 1:2,2:3), got {text!r}"
        ) from None
    for i, replicas in enumerate(assignment):
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"partition {i} lists a broker twice in {text!r}")
    if len({len(r) for r in assignment}) > 1:
        raise ValueError(f"every partition needs the same number of replicas in {text!r}")
    return assignment


def _visible(topics: Iterable[Any], internal: bool) -> list[Any]:
    return [t for t in topics if t.error_code == ErrorCode.NONE and (internal or not t.is_internal)]


def list_topics(
    cluster: Cluster, pattern: str | None = None, internal: bool = False
) -> list[dict[str, Any]]:
    """Topics whose whole name matches ``pattern`` (a regular expression), by name."""
    regex = re.compile(pattern) if pattern else None
    rows = []
    for t in _visible(cluster.metadata(None).topics, internal):
        if regex is not None and not regex.fullmatch(t.name):
            continue
        rows.append(
            {
                "topic": t.name,
                "topic_id": None if t.topic_id == ZERO_UUID else str(t.topic_id),
                "partitions": len(t.partitions),
                "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
                "internal": t.is_internal,
            }
        )
    return sorted(rows, key=lambda r: r["topic"])


def _min_isr(cluster: Cluster, topics: Sequence[str]) -> dict[str, int]:
    if not topics:
        return {}
    client = cluster.bootstrap
    R = DescribeConfigsRequest.Resource
    req = DescribeConfigsRequest(
        resources=[
            R(resource_type=TOPIC_RESOURCE, resource_name=t, configuration_keys=[MIN_ISR])
            for t in topics
        ]
    )
    resp = client.request(ApiKey.DESCRIBE_CONFIGS, client.version(ApiKey.DESCRIBE_CONFIGS), req)
    out = {}
    for r in resp.results:
        for c in r.configs:
            if r.error_code == ErrorCode.NONE and c.name == MIN_ISR and c.value is not None:
                out[r.resource_name] = int(c.value)
    return out


def _sizes(
    cluster: Cluster,
    leaders: Mapping[tuple[str, int], int],
    notes: list[str],
    unreachable: dict[int, str],
) -> dict[tuple[str, int], int]:
    """Size in bytes of each partition's leader replica, from DescribeLogDirs; a leader
    that cannot be reached is noted in ``unreachable`` (id -> why) and skipped."""
    by_node: dict[int, dict[str, list[int]]] = {}
    for (topic, partition), node in leaders.items():
        by_node.setdefault(node, {}).setdefault(topic, []).append(partition)
    sizes: dict[tuple[str, int], int] = {}
    for node, topics in sorted(by_node.items()):
        if node in unreachable:
            continue
        try:
            _sizes_from(cluster, node, topics, leaders, notes, sizes)
        except ClientError as exc:
            if not cluster.lost(node):
                raise
            unreachable[node] = str(exc)
    return sizes


def _sizes_from(
    cluster: Cluster,
    node: int,
    topics: Mapping[str, list[int]],
    leaders: Mapping[tuple[str, int], int],
    notes: list[str],
    sizes: dict[tuple[str, int], int],
) -> None:
    """`_sizes` for the partitions ``node`` leads."""
    client = cluster.node(node)
    if not client.supports(ApiKey.DESCRIBE_LOG_DIRS):
        notes.append(f"size unknown: broker {node} does not support DescribeLogDirs (Kafka API 35)")
        return
    T = DescribeLogDirsRequest.Topic
    req = DescribeLogDirsRequest(
        topics=[T(topic=t, partitions=sorted(ps)) for t, ps in topics.items()]
    )
    resp = client.request(ApiKey.DESCRIBE_LOG_DIRS, client.version(ApiKey.DESCRIBE_LOG_DIRS), req)
    for result in resp.results:
        if result.error_code != ErrorCode.NONE:
            notes.append(
                broker_error(f"log dir {result.log_dir} of broker {node}", result.error_code)
            )
            continue
        for t in result.topics:
            for p in t.partitions:
                if not p.is_future_key and leaders.get((t.name, p.partition_index)) == node:
                    sizes[(t.name, p.partition_index)] = p.partition_size


def describe_topics(
    cluster: Cluster,
    names: Sequence[str] = (),
    internal: bool = False,
    filters: Iterable[str] = (),
) -> dict[str, Any]:
    """Per partition: leader, replicas, ISR, offline replicas, log start/end offsets, size.
    A leader that cannot be reached is listed in "unreachable_brokers" (and a note says
    why); its partitions' offsets and sizes are None.

    ``names`` empty: every topic (internal ones with ``internal``). ``filters``
    (any of FILTERS) keep only partitions matching at least one of them, and
    topics with such a partition. Returns {"topics": [...], "notes": [...]}, the
    notes saying what could not be found out (e.g. an API the broker lacks).
    """
    wanted = set(filters)
    if unknown := wanted - set(FILTERS):
        raise ClientError(f"unknown filter {sorted(unknown)[0]!r}")
    resp = cluster.metadata(list(dict.fromkeys(names)) if names else None)
    if names:
        for t in resp.topics:
            if t.error_code != ErrorCode.NONE:
                raise ClientError(broker_error(f"topic {t.name!r}", t.error_code))
    topics = _visible(resp.topics, internal or bool(names))
    live = {b.node_id for b in resp.brokers}
    notes: list[str] = []
    min_isr = _min_isr(cluster, [t.name for t in topics])
    leaders = {
        (t.name, p.partition_index): p.leader_id
        for t in topics
        for p in t.partitions
        if p.leader_id in live
    }
    # A leader that cannot be reached (killed, before the controller moved its partitions)
    # leaves its partitions' offsets and sizes unknown; the rest is shown.
    unreachable: dict[int, str] = {}
    earliest = list_offsets(cluster, leaders, EARLIEST, leaders, unreachable)
    latest = list_offsets(cluster, leaders, LATEST, leaders, unreachable)
    sizes = _sizes(cluster, leaders, notes, unreachable)
    out = []
    for t in sorted(topics, key=lambda t: t.name):
        floor = min_isr.get(t.name)
        partitions = []
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            tp = (t.name, p.partition_index)
            row = {
                "partition": p.partition_index,
                "leader": p.leader_id if p.leader_id >= 0 else None,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replica_nodes),
                "isr": list(p.isr_nodes),
                "offline_replicas": list(p.offline_replicas),
                "log_start_offset": earliest.get(tp, {}).get("offset"),
                "log_end_offset": latest.get(tp, {}).get("offset"),
                "size_bytes": sizes.get(tp),
                "error": None if p.error_code == ErrorCode.NONE else error_name(p.error_code),
            }
            matches = {
                "under_replicated": len(p.isr_nodes) < len(p.replica_nodes),
                "under_min_isr": floor is not None and len(p.isr_nodes) < floor,
                "at_min_isr": floor is not None and len(p.isr_nodes) == floor,
                "unavailable": p.leader_id not in live,
            }
            if not wanted or any(matches[f] for f in wanted):
                partitions.append(row)
        if wanted and not partitions:
            continue
        out.append(
            {
                "topic": t.name,
                "topic_id": None if t.topic_id == ZERO_UUID else str(t.topic_id),
                "internal": t.is_internal,
                "partition_count": len(t.partitions),
                "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
                "min_insync_replicas": floor,
                "partitions": partitions,
            }
        )
    for node, why in sorted(unreachable.items()):
        led = sorted(f"{t}-{p}" for (t, p), n in leaders.items() if n == node)
        notes.append(
            f"broker {node} could not be reached ({why}): the offsets and size of the "
            f"partitions it leads ({', '.join(led)}) are unknown"
        )
    for tp in sorted(set(leaders) - set().union(earliest, latest)):
        if leaders[tp] not in unreachable:
            notes.append(f"no offsets for {tp[0]}-{tp[1]}")
    return {
        "topics": out,
        "notes": list(dict.fromkeys(notes)),
        "unreachable_brokers": sorted(unreachable),
    }


def create_topics(
    cluster: Cluster,
    names: Sequence[str],
    partitions: int | None = None,
    replication_factor: int | None = None,
    assignment: Sequence[Sequence[int]] | None = None,
    configs: Mapping[str, str] | None = None,
    if_not_exists: bool = False,
    validate_only: bool = False,
) -> dict[str, dict[str, Any]]:
    """topic -> {"error": None or a readable line, "partitions", "replication_factor",
    "exists": bool}; a topic that exists is no error with ``if_not_exists``."""
    client = controller(cluster)
    T = CreateTopicsRequest.Topic
    req = CreateTopicsRequest(
        topics=[
            T(
                name=name,
                num_partitions=-1 if assignment else (partitions or -1),
                replication_factor=-1 if assignment else (replication_factor or -1),
                assignments=[
                    T.Assignment(partition_index=i, broker_ids=list(replicas))
                    for i, replicas in enumerate(assignment or ())
                ],
                configs=[T.Config(name=k, value=v) for k, v in (configs or {}).items()],
            )
            for name in dict.fromkeys(names)
        ],
        timeout_ms=int(cluster.timeout * 1000),
        validate_only=validate_only,
    )
    resp = client.request(ApiKey.CREATE_TOPICS, client.version(ApiKey.CREATE_TOPICS), req)
    out = {}
    for t in resp.topics:
        exists = t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        ok = t.error_code == ErrorCode.NONE or (exists and if_not_exists)
        out[t.name] = {
            "error": None
            if ok
            else broker_error(f"topic {t.name!r}", t.error_code, t.error_message),
            "exists": exists,
            "partitions": t.num_partitions if t.error_code == ErrorCode.NONE else None,
            "replication_factor": t.replication_factor if t.error_code == ErrorCode.NONE else None,
        }
    return out


def add_partitions(
    cluster: Cluster,
    name: str,
    count: int,
    assignment: Sequence[Sequence[int]] | None = None,
    validate_only: bool = False,
) -> str | None:
    """Grow ``name`` to ``count`` partitions (``assignment``: replicas of the new ones);
    None when done, else the error line."""
    client = controller(cluster)
    T = CreatePartitionsRequest.Topic
    req = CreatePartitionsRequest(
        topics=[
            T(
                name=name,
                count=count,
                assignments=None
                if assignment is None
                else [T.Assignment(broker_ids=list(r)) for r in assignment],
            )
        ],
        timeout_ms=int(cluster.timeout * 1000),
        validate_only=validate_only,
    )
    resp = client.request(ApiKey.CREATE_PARTITIONS, client.version(ApiKey.CREATE_PARTITIONS), req)
    [r] = resp.results
    if r.error_code == ErrorCode.NONE:
        return None
    return broker_error(f"topic {name!r}", r.error_code, r.error_message)


def delete_topics(
    cluster: Cluster, names: Sequence[str], if_exists: bool = False
) -> dict[str, str | None]:
    """topic -> None when deleted (or absent with ``if_exists``), else the error line."""
    client = controller(cluster)
    version = client.version(ApiKey.DELETE_TOPICS)
    unique = list(dict.fromkeys(names))
    if version >= 6:
        req = DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.Topic(name=n, topic_id=ZERO_UUID) for n in unique],
            timeout_ms=int(cluster.timeout * 1000),
        )
    else:
        req = DeleteTopicsRequest(topic_names=unique, timeout_ms=int(cluster.timeout * 1000))
    resp = client.request(ApiKey.DELETE_TOPICS, version, req)
    out: dict[str, str | None] = {}
    for r in resp.responses:
        absent = r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and if_exists
        out[r.name] = (
            None
            if r.error_code == ErrorCode.NONE or absent
            else broker_error(f"topic {r.name!r}", r.error_code, r.error_message)
        )
    return out
