"""What ``kbroker group list|describe|delete`` ask a broker, as plain data.

Each function takes a connected `BrokerClient` and returns dicts and lists
ready to print or dump as JSON; the click commands in `kbroker.cli` only
format them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from kbroker.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kbroker.tools.client import BrokerClient, ClientError
from kbroker.tools.cluster import Cluster
from kbroker.tools.offsets import LATEST, TP, list_offsets

# Answers of a coordinator that is loading its groups or is not there yet: asked again.
_NOT_READY = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)


def _error(code: int) -> str | None:
    return None if code == ErrorCode.NONE else ErrorCode(code).name


def list_groups(
    cluster: Cluster, states: Iterable[str] = (), unreachable: dict[int, str] | None = None
) -> list[dict[str, str]]:
    """Every group with its state, protocol type and type (classic or consumer: from
    ListGroups v5 on; before, classic), asked of every broker (each lists the groups it
    coordinates). A broker that cannot be reached is noted in ``unreachable`` (id -> why)
    and its groups are missing; without ``unreachable`` that is a ClientError."""
    brokers = sorted(b.node_id for b in cluster.metadata([]).brokers)
    found: dict[str, dict[str, str]] = {}
    for node in brokers:
        try:
            groups = _list_groups_of(cluster.node(node), states)
        except ClientError as exc:
            if unreachable is None or not cluster.lost(node):
                raise
            unreachable[node] = str(exc)
            continue
        found.update((g["group"], g) for g in groups)
    return [found[g] for g in sorted(found)]


def _list_groups_of(client: BrokerClient, states: Iterable[str]) -> list[dict[str, str]]:
    version = max(4, client.version(ApiKey.LIST_GROUPS))
    resp = client.request(
        ApiKey.LIST_GROUPS, version, ListGroupsRequest(states_filter=list(states), types_filter=[])
    )
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(f"ListGroups failed: {ErrorCode(resp.error_code).name}")
    return [
        {
            "group": g.group_id,
            "state": g.group_state,
            "protocol_type": g.protocol_type,
            "type": (g.group_type if version >= 5 else "") or "classic",
        }
        for g in resp.groups
    ]


def consumer_group(coordinator: BrokerClient, group: str) -> Any | None:
    """The group as ConsumerGroupDescribe describes it, or None when it is not a consumer
    group of KIP-848 (or the broker does not have the API)."""
    try:
        version = coordinator.version(ApiKey.CONSUMER_GROUP_DESCRIBE)
    except ClientError:
        return None
    deadline = time.monotonic() + coordinator.timeout
    while True:
        resp = coordinator.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            version,
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
        )
        [d] = resp.groups
        if d.error_code not in _NOT_READY or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # A ZooKeeper-mode Kafka advertises the API but has no such groups: UNSUPPORTED_VERSION.
    if d.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
        return None
    if d.error_code != ErrorCode.NONE:
        raise ClientError(
            f"ConsumerGroupDescribe of {group!r} failed: {ErrorCode(d.error_code).name}"
        )
    return d


def committed_offsets(client: BrokerClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """(topic, partition) -> (offset, metadata) for everything ``group`` committed."""
    req = OffsetFetchRequest(groups=[OffsetFetchRequest.Group(group_id=group, topics=None)])
    resp = client.request(ApiKey.OFFSET_FETCH, 8, req)
    [g] = resp.groups
    if g.error_code != ErrorCode.NONE:
        raise ClientError(f"OffsetFetch of {group!r} failed: {ErrorCode(g.error_code).name}")
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata)
        for t in g.topics
        for p in t.partitions
        if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
    }


def log_end_offsets(
    cluster: Cluster, partitions: Iterable[TP], unreachable: dict[int, str] | None = None
) -> dict[TP, int]:
    """The end offset of each of ``partitions`` that exists and has a leader (asked of the
    leader); the others are left out, and so are those whose leader cannot be reached,
    which is noted in ``unreachable`` (id -> why) when given, else a ClientError."""
    wanted = set(partitions)
    if not wanted:
        return {}
    resp = cluster.metadata(sorted({t for t, _ in wanted}))
    leaders = {
        (t.name, p.partition_index): p.leader_id
        for t in resp.topics
        if t.error_code == ErrorCode.NONE
        for p in t.partitions
        if (t.name, p.partition_index) in wanted and p.leader_id >= 0
    }
    found = list_offsets(cluster, leaders, LATEST, leaders, unreachable)
    return {tp: r["offset"] for tp, r in found.items() if r["offset"] is not None}


def describe_group(cluster: Cluster, group: str) -> dict[str, Any]:
    client = cluster.bootstrap
    coordinator = client.for_group(group)
    try:
        modern = consumer_group(coordinator, group)
        if modern is not None:
            state, protocol_type, protocol = modern.group_state, PROTOCOL_TYPE, modern.assignor_name
            owners, members = _consumer_members(modern)
        else:
            state, protocol_type, protocol, owners, members = _classic_group(coordinator, group)
        committed = committed_offsets(coordinator, group)
    finally:
        if coordinator is not client:
            coordinator.close()
    unreachable: dict[int, str] = {}
    ends = log_end_offsets(cluster, set(committed) | set(owners), unreachable)
    offsets = []
    for tp in sorted(set(committed) | set(owners)):
        current = committed.get(tp, (-1, ""))[0]
        end = ends.get(tp)
        offsets.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current if current >= 0 else None,
                "log_end_offset": end,
                "lag": end - current if end is not None and current >= 0 else None,
                "member_id": owners.get(tp),
            }
        )
    return {
        "group": group,
        "type": "consumer" if modern is not None else "classic",
        "state": state,
        "protocol_type": protocol_type,
        "protocol": protocol,
        "members": members,
        "offsets": offsets,
        "notes": [
            f"broker {node} could not be reached, the partitions it leads have no end offset "
            f"or lag: {why}"
            for node, why in sorted(unreachable.items())
        ],
    }


def _consumer_members(d: Any) -> tuple[dict[tuple[str, int], str], list[dict[str, Any]]]:
    owners: dict[tuple[str, int], str] = {}
    members = []
    for m in d.members:
        assignment: dict[str, list[int]] = {}
        for tp in m.assignment.topic_partitions:
            assignment[tp.topic_name] = sorted(tp.partitions)
            for p in tp.partitions:
                owners[(tp.topic_name, p)] = m.member_id
        members.append(
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "member_epoch": m.member_epoch,
                "assignment": dict(sorted(assignment.items())),
            }
        )
    return owners, members


def _classic_group(
    coordinator: BrokerClient, group: str
) -> tuple[str, str, str, dict[tuple[str, int], str], list[dict[str, Any]]]:
    resp = coordinator.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[group]))
    [d] = resp.groups
    if d.error_code != ErrorCode.NONE:
        raise ClientError(f"DescribeGroups of {group!r} failed: {ErrorCode(d.error_code).name}")
    owners: dict[tuple[str, int], str] = {}
    members = []
    for m in d.members:
        assignment = (
            assigned_partitions(m.member_assignment) if d.protocol_type == PROTOCOL_TYPE else None
        )
        for topic, parts in (assignment or {}).items():
            for p in parts:
                owners[(topic, p)] = m.member_id
        members.append(
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": {t: sorted(ps) for t, ps in sorted((assignment or {}).items())},
            }
        )
    return d.group_state, d.protocol_type, d.protocol_data, owners, members


def delete_groups(cluster: Cluster, groups: list[str]) -> dict[str, str | None]:
    """group -> None when deleted, else the error name (or why its coordinator, which
    deletes it, could not be reached)."""
    out: dict[str, str | None] = {}
    for group in groups:
        try:
            coordinator = cluster.bootstrap.for_group(group)
        except ClientError as exc:
            out[group] = str(exc)
            continue
        try:
            resp = coordinator.request(
                ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[group])
            )
        finally:
            if coordinator is not cluster.bootstrap:
                coordinator.close()
        out.update((r.group_id, _error(r.error_code)) for r in resp.results)
    return out


def commit_offsets(
    client: BrokerClient, group: str, offsets: Mapping[tuple[str, int], int], metadata: str = ""
) -> dict[tuple[str, int], str | None]:
    """Commits as a consumer outside any generation; (topic, partition) -> error name or None."""
    by_topic: dict[str, list[Any]] = {}
    P = OffsetCommitRequest.Topic.Partition
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            P(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata=metadata,
            )
        )
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[OffsetCommitRequest.Topic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    resp = client.request(ApiKey.OFFSET_COMMIT, 8, req)
    return {
        (t.name, p.partition_index): _error(p.error_code) for t in resp.topics for p in t.partitions
    }
