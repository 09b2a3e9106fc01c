"""A classic-protocol consumer group member for ``kbroker consume --group``.

It joins with the ``range`` assignor (and, when it leads, assigns every
member's subscriptions as Kafka's RangeAssignor does), heartbeats, commits
offsets with its generation and leaves the group when done. It talks to the
coordinator over its own connection, so a fetch in progress elsewhere never
mixes with a group request. An error that means "rejoin" (a rebalance, a
new generation, a forgotten member) sets ``generation`` to -1; the caller
then calls `join` again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kbroker.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    assigned_partitions,
    encode_assignment,
    encode_subscription,
    subscribed_topics,
)
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster
from kbroker.tools.groups import committed_offsets

ASSIGNOR = "range"
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
HEARTBEAT_INTERVAL = 3.0
JOIN_ATTEMPTS = 10
REJOIN = {
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
}
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.REBALANCE_IN_PROGRESS,
}
OFFSET_COMMIT_MAX_VERSION = 8  # v9 is for the KIP-848 protocol's member epochs


def range_assignment(
    subscriptions: Mapping[str, set[str]], partition_counts: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, its subscribers in member-id order get
    consecutive ranges, the first ones one partition more when it does not divide."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        first = 0
        for i, member in enumerate(members):
            n = share + (1 if i < extra else 0)
            if n:
                out[member][topic] = list(range(first, first + n))
            first += n
    return out


class GroupMember:
    def __init__(self, cluster: Cluster, group: str, topic: str) -> None:
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.member_id = ""
        self.generation = -1
        self.partitions: list[int] = []
        timeout = max(cluster.timeout, REBALANCE_TIMEOUT_MS / 1000 + 5)
        self.client = cluster.bootstrap.for_group(group, timeout, own=True)
        self._last_heartbeat = 0.0

    def _version(self, api: ApiKey, highest: int | None = None) -> int:
        version = self.client.version(api)
        return version if highest is None else min(version, highest)

    def join(self) -> None:
        """Join (or rejoin) the group and learn this member's partitions of the topic."""
        for _ in range(JOIN_ATTEMPTS):
            if self._try_join():
                return
            time.sleep(0.2)
        raise ClientError(f"could not join group {self.group!r} in {JOIN_ATTEMPTS} attempts")

    def _try_join(self) -> bool:
        version = self._version(ApiKey.JOIN_GROUP)
        req = JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequest.Protocol(name=ASSIGNOR, metadata=encode_subscription([self.topic]))
            ],
            reason=None,
        )
        joined = self.client.request(ApiKey.JOIN_GROUP, version, req)
        if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            return False
        if joined.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.member_id = ""
            return False
        if joined.error_code in RETRIABLE:
            return False
        if joined.error_code != ErrorCode.NONE:
            raise ClientError(
                f"joining group {self.group!r} failed: {error_name(joined.error_code)}"
            )
        self.member_id = joined.member_id
        assignments = []
        if joined.leader == joined.member_id:
            assignments = self._assign(joined.members)
        synced = self.client.request(
            ApiKey.SYNC_GROUP,
            self._version(ApiKey.SYNC_GROUP),
            SyncGroupRequest(
                group_id=self.group,
                generation_id=joined.generation_id,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=ASSIGNOR,
                assignments=assignments,
            ),
        )
        if synced.error_code in REJOIN or synced.error_code in RETRIABLE:
            return False
        if synced.error_code != ErrorCode.NONE:
            raise ClientError(
                f"syncing group {self.group!r} failed: {error_name(synced.error_code)}"
            )
        mine = assigned_partitions(synced.assignment)
        if mine is None:
            raise ClientError(f"group {self.group!r} sent an unreadable assignment")
        self.partitions = sorted(mine.get(self.topic, []))
        self.generation = joined.generation_id
        self._last_heartbeat = time.monotonic()
        return True

    def _assign(self, members: list[Any]) -> list[Any]:
        subscriptions = {m.member_id: subscribed_topics(m.metadata) or set() for m in members}
        topics = sorted(set().union(*subscriptions.values()))
        counts = {
            t.name: len(t.partitions)
            for t in self.cluster.metadata(topics).topics
            if t.error_code == ErrorCode.NONE
        }
        return [
            SyncGroupRequest.Assignment(member_id=m, assignment=encode_assignment(parts))
            for m, parts in range_assignment(subscriptions, counts).items()
        ]

    def committed(self) -> dict[int, int]:
        """partition -> the group's committed offset, for this topic."""
        return {
            p: offset
            for (topic, p), (offset, _) in committed_offsets(self.client, self.group).items()
            if topic == self.topic
        }

    def commit(self, offsets: Mapping[int, int]) -> None:
        if not offsets or self.generation < 0:
            return
        P = OffsetCommitRequest.Topic.Partition
        req = OffsetCommitRequest(
            group_id=self.group,
            generation_id_or_member_epoch=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.Topic(
                    name=self.topic,
                    partitions=[
                        P(partition_index=p, committed_offset=o, committed_metadata="")
                        for p, o in sorted(offsets.items())
                    ],
                )
            ],
        )
        resp = self.client.request(
            ApiKey.OFFSET_COMMIT,
            self._version(ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_MAX_VERSION),
            req,
        )
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code in REJOIN:
                    self.generation = -1
                elif p.error_code != ErrorCode.NONE:
                    raise ClientError(
                        f"committing {t.name}-{p.partition_index} for group {self.group!r} "
                        f"failed: {error_name(p.error_code)}"
                    )

    def heartbeat(self) -> None:
        """Heartbeat when one is due; a rebalance marks the member for rejoining."""
        if self.generation < 0 or time.monotonic() - self._last_heartbeat < HEARTBEAT_INTERVAL:
            return
        resp = self.client.request(
            ApiKey.HEARTBEAT,
            self._version(ApiKey.HEARTBEAT),
            HeartbeatRequest(
                group_id=self.group,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=None,
            ),
        )
        self._last_heartbeat = time.monotonic()
        if resp.error_code in REJOIN:
            self.generation = -1
        elif resp.error_code != ErrorCode.NONE:
            raise ClientError(
                f"heartbeat to group {self.group!r} failed: {error_name(resp.error_code)}"
            )

    def close(self, offsets: Mapping[int, int], quiet: bool = False) -> None:
        """Commit ``offsets`` and leave the group; ``quiet``: best effort, no errors (when
        interrupted the connection may be mid-request; the session then simply expires)."""
        try:
            self.commit(offsets)
            if self.member_id:
                M = LeaveGroupRequest.Member
                req = LeaveGroupRequest(
                    group_id=self.group,
                    member_id=self.member_id,
                    members=[M(member_id=self.member_id, group_instance_id=None, reason=None)],
                )
                self.client.request(ApiKey.LEAVE_GROUP, self._version(ApiKey.LEAVE_GROUP), req)
        except ClientError:
            if not quiet:
                raise
        finally:
            self.client.close()
