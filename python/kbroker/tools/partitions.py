"""``kbroker partition elect-leaders`` and ``kbroker partition reassign
generate|execute|verify|cancel``, as plain data.

The reassignment plan is Kafka's JSON (``kafka-reassign-partitions.sh``):
``{"version": 1, "partitions": [{"topic", "partition", "replicas"}]}``, so plans move
between the two tools. A broker without ElectLeaders or AlterPartitionReassignments /
ListPartitionReassignments ends in a `ClientError` naming the API (checked with
ApiVersions before anything is sent).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error, controller
from kbroker.tools.offsets import TP

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def _by_topic(partitions: Sequence[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(set(partitions)):
        out.setdefault(topic, []).append(p)
    return out


def topic_partitions(
    cluster: Cluster, specs: Sequence[tuple[str, list[int] | None]]
) -> dict[TP, list[int]]:
    """(topic, partition) -> current replicas for the partitions ``specs`` name (all
    partitions of a topic given without any); ClientError for unknown ones."""
    resp = cluster.metadata(list(dict.fromkeys(t for t, _ in specs)))
    known: dict[str, dict[int, list[int]]] = {}
    for t in resp.topics:
        if t.error_code != ErrorCode.NONE:
            raise ClientError(broker_error(f"topic {t.name!r}", t.error_code))
        known[t.name] = {p.partition_index: list(p.replica_nodes) for p in t.partitions}
    out: dict[TP, list[int]] = {}
    for topic, partitions in specs:
        for p in sorted(known[topic]) if partitions is None else partitions:
            if p not in known[topic]:
                raise ClientError(f"topic {topic!r} has no partition {p}")
            out[(topic, p)] = known[topic][p]
    return out


def elect_leaders(
    cluster: Cluster, specs: Sequence[tuple[str, list[int] | None]] | None, election: str
) -> list[dict[str, Any]]:
    """Elect the preferred (or, ``unclean``, any live) replica leader of the partitions of
    ``specs`` (None: every partition). Per partition None, or the error name
    (ELECTION_NOT_NEEDED: the preferred replica leads already)."""
    client = controller(cluster)
    version = client.version(ApiKey.ELECT_LEADERS)
    kind = ELECTION_TYPES[election]
    if kind and version < 1:
        raise ClientError(f"the broker at {client.address} can only elect preferred leaders")
    wanted = None if specs is None else _by_topic(list(topic_partitions(cluster, specs)))
    T = ElectLeadersRequest.TopicPartitions
    req = ElectLeadersRequest(
        election_type=kind,
        topic_partitions=None
        if wanted is None
        else [T(topic=t, partitions=ps) for t, ps in wanted.items()],
        timeout_ms=int(cluster.timeout * 1000),
    )
    resp = client.request(ApiKey.ELECT_LEADERS, version, req)
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(broker_error("ElectLeaders", resp.error_code))
    return _result_rows(
        (r.topic, p.partition_id, p.error_code, p.error_message)
        for r in resp.replica_election_results
        for p in r.partition_result
    )


def _result_rows(results: Iterable[tuple[str, int, int, str | None]]) -> list[dict[str, Any]]:
    """Per-partition results (topic, partition, error code, message) as sorted table rows."""
    rows = [
        {
            "topic": topic,
            "partition": partition,
            "error": None if code == ErrorCode.NONE else error_name(code),
            "message": message,
        }
        for topic, partition, code, message in results
    ]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def generate(
    cluster: Cluster, topics: Sequence[str], brokers: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """A plan spreading the replicas of ``topics`` over ``brokers`` round-robin (keeping
    each partition's replication factor): {"current": plan, "proposed": plan}."""
    if not brokers:
        raise ClientError("name the brokers to move to (--brokers 1,2,3)")
    live = {b.node_id for b in cluster.metadata([]).brokers}
    if missing := sorted(set(brokers) - live):
        raise ClientError(f"broker {missing[0]} is not in the cluster (brokers: {sorted(live)})")
    current = topic_partitions(cluster, [(t, None) for t in topics])
    targets = sorted(set(brokers))
    proposed: dict[TP, list[int]] = {}
    for i, (tp, replicas) in enumerate(sorted(current.items())):
        factor = len(replicas)
        if factor > len(targets):
            raise ClientError(
                f"{tp[0]}-{tp[1]} has {factor} replicas but only {len(targets)} brokers are named"
            )
        proposed[tp] = [targets[(i + k) % len(targets)] for k in range(factor)]
    return {"current": to_plan(current), "proposed": to_plan(proposed)}


def to_plan(assignment: Mapping[TP, Sequence[int]]) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": list(r)}
            for (t, p), r in sorted(assignment.items())
        ],
    }


def read_plan(path: Path) -> dict[TP, list[int]]:
    """A reassignment JSON file -> (topic, partition) -> target replicas."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ClientError(f"{path} is not JSON: {exc}") from None
    out: dict[TP, list[int]] = {}
    try:
        for entry in data["partitions"]:
            topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
            if not (
                isinstance(topic, str)
                and isinstance(partition, int)
                and partition >= 0
                and isinstance(replicas, list)
                and replicas
                and all(isinstance(r, int) and r >= 0 for r in replicas)
                and len(set(replicas)) == len(replicas)
            ):
                raise ValueError(entry)
            out[(topic, partition)] = replicas
    except (KeyError, TypeError, ValueError):
        raise ClientError(
            f'{path} is not a reassignment plan: expected {{"version": 1, "partitions": '
            f'[{{"topic": ..., "partition": N, "replicas": [BROKER, ...]}}, ...]}}'
        ) from None
    if not out:
        raise ClientError(f"{path} names no partition")
    return out


def _alter(cluster: Cluster, targets: Mapping[TP, list[int] | None]) -> list[dict[str, Any]]:
    client = controller(cluster)
    version = client.version(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    T = AlterPartitionReassignmentsRequest.Topic
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), replicas in sorted(targets.items()):
        by_topic.setdefault(topic, []).append(T.Partition(partition_index=p, replicas=replicas))
    req = AlterPartitionReassignmentsRequest(
        timeout_ms=int(cluster.timeout * 1000),
        topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    resp = client.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, req)
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(
            broker_error("AlterPartitionReassignments", resp.error_code, resp.error_message)
        )
    return _result_rows(
        (t.name, p.partition_index, p.error_code, p.error_message)
        for t in resp.responses
        for p in t.partitions
    )


def execute(cluster: Cluster, plan: Mapping[TP, list[int]]) -> list[dict[str, Any]]:
    """Start moving the partitions of ``plan`` to their target replicas."""
    cluster.bootstrap.version(ApiKey.ALTER_PARTITION_REASSIGNMENTS)  # fail before anything
    topic_partitions(cluster, [(t, [p]) for t, p in plan])
    return _alter(cluster, plan)


def cancel(cluster: Cluster, partitions: Sequence[TP]) -> list[dict[str, Any]]:
    """Stop the reassignments of ``partitions`` (NO_REASSIGNMENT_IN_PROGRESS where none runs)."""
    return _alter(cluster, dict.fromkeys(partitions))


def ongoing(cluster: Cluster, partitions: Sequence[TP]) -> dict[TP, dict[str, list[int]]]:
    """The reassignments in progress among ``partitions``: replicas, adding, removing."""
    client = controller(cluster)
    version = client.version(ApiKey.LIST_PARTITION_REASSIGNMENTS)
    T = ListPartitionReassignmentsRequest.Topic
    req = ListPartitionReassignmentsRequest(
        timeout_ms=int(cluster.timeout * 1000),
        topics=[T(name=t, partition_indexes=ps) for t, ps in _by_topic(partitions).items()],
    )
    resp = client.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, version, req)
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(
            broker_error("ListPartitionReassignments", resp.error_code, resp.error_message)
        )
    return {
        (t.name, p.partition_index): {
            "replicas": list(p.replicas),
            "adding": list(p.adding_replicas),
            "removing": list(p.removing_replicas),
        }
        for t in resp.topics
        for p in t.partitions
    }


def verify(cluster: Cluster, plan: Mapping[TP, list[int]]) -> list[dict[str, Any]]:
    """Per partition of ``plan``: "complete" (its replicas are the target), "in progress"
    or "not started" (neither moving nor there), with the current replicas."""
    moving = ongoing(cluster, list(plan))
    current = topic_partitions(cluster, [(t, [p]) for t, p in plan])
    rows = []
    for tp, target in sorted(plan.items()):
        if tp in moving:
            status = "in progress"
        elif sorted(current[tp]) == sorted(target):
            status = "complete"
        else:
            status = "not started"
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "target": target,
                "replicas": current[tp],
                "adding": moving.get(tp, {}).get("adding", []),
                "removing": moving.get(tp, {}).get("removing", []),
                "status": status,
            }
        )
    return rows
