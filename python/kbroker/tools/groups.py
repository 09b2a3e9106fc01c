"""What ``kbroker group list|describe|delete`` ask a broker, as plain data.

Each function takes a connected `BrokerClient` and returns dicts and lists
ready to print or dump as JSON; the click commands in `kbroker.cli` only
format them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kbroker.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kbroker.tools.client import BrokerClient, ClientError
from kbroker.tools.cluster import Cluster
from kbroker.tools.offsets import LATEST, TP, list_offsets


def _error(code: int) -> str | None:
    return None if code == ErrorCode.NONE else ErrorCode(code).name


def list_groups(client: BrokerClient, states: Iterable[str] = ()) -> list[dict[str, str]]:
    resp = client.request(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=list(states)))
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(f"ListGroups failed: {ErrorCode(resp.error_code).name}")
    return [
        {"group": g.group_id, "state": g.group_state, "protocol_type": g.protocol_type}
        for g in sorted(resp.groups, key=lambda g: g.group_id)
    ]


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


def log_end_offsets(cluster: Cluster, partitions: Iterable[TP]) -> dict[TP, int]:
    """The end offset of each of ``partitions`` that exists and has a leader (asked of the
    leader); the others are left out."""
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
    found = list_offsets(cluster, leaders, LATEST, leaders)
    return {tp: r["offset"] for tp, r in found.items() if r["offset"] is not None}


def describe_group(cluster: Cluster, group: str) -> dict[str, Any]:
    client = cluster.bootstrap
    coordinator = client.for_group(group)
    try:
        resp = coordinator.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[group]))
        [d] = resp.groups
        if d.error_code != ErrorCode.NONE:
            raise ClientError(f"DescribeGroups of {group!r} failed: {ErrorCode(d.error_code).name}")
        owners: dict[tuple[str, int], str] = {}
        members = []
        for m in d.members:
            assignment = (
                assigned_partitions(m.member_assignment)
                if d.protocol_type == PROTOCOL_TYPE
                else None
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
        committed = committed_offsets(coordinator, group)
    finally:
        if coordinator is not client:
            coordinator.close()
    ends = log_end_offsets(cluster, set(committed) | set(owners))
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
        "state": d.group_state,
        "protocol_type": d.protocol_type,
        "protocol": d.protocol_data,
        "members": members,
        "offsets": offsets,
    }


def delete_groups(client: BrokerClient, groups: list[str]) -> dict[str, str | None]:
    """group -> None when deleted, else the error name."""
    resp = client.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=groups))
    return {r.group_id: _error(r.error_code) for r in resp.results}


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
