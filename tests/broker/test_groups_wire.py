"""The group APIs at the byte level: every version, error codes and bad input.

A raw socket speaks each version of FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups,
LeaveGroup, DeleteGroups and OffsetDelete, encoded with kbroker's own codec.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from kbroker.coordinator.consumer_protocol import encode_subscription
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from tests.helpers import BrokerProcess, Wire, frame, still_serving, wire_create_topic

E = ErrorCode
SETTINGS = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=100",
    "group.member.metadata.max.bytes=4096",
    "offsets.topic.num.partitions=5",
)
SUB = encode_subscription(["wt"])


@pytest.fixture
def gbroker(broker_factory: Any) -> BrokerProcess:
    b: BrokerProcess = broker_factory(*SETTINGS)
    w = Wire(b.bootstrap)
    try:
        wire_create_topic(w, "wt", 2)
    finally:
        w.close()
    return b


def join(
    w: Wire,
    version: int,
    group: str,
    member_id: str = "",
    instance: str | None = None,
    session: int = 10000,
    protocols: list[tuple[str, bytes]] | None = None,
) -> Any:
    P = JoinGroupRequest.Protocol
    req = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session,
        rebalance_timeout_ms=10000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[
            P(name=n, metadata=m)
            for n, m in (protocols if protocols is not None else [("range", SUB)])
        ],
        reason=None,
    )
    return w.request(ApiKey.JOIN_GROUP, version, req)


def find(w: Wire, version: int, key: str, key_type: int = 0) -> tuple[int, int, int]:
    """(error, node, port) of one key."""
    req = FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])
    resp = w.request(ApiKey.FIND_COORDINATOR, version, req)
    one = resp.coordinators[0] if version >= 4 else resp
    return one.error_code, one.node_id, one.port


def test_every_version_of_every_group_api(gbroker: BrokerProcess) -> None:
    w = Wire(gbroker.bootstrap)
    try:
        for v in range(10):
            group = f"raw-{v}"
            assert find(w, min(v, 4), group) == (E.NONE, 0, gbroker.port)
            joined = join(w, v, group)
            if v >= 4:
                # KIP-394: first the member id, then the real join with it.
                assert joined.error_code == E.MEMBER_ID_REQUIRED and joined.member_id
                joined = join(w, v, group, joined.member_id)
            assert joined.error_code == E.NONE, v
            me = joined.member_id
            assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, me, "range")
            assert [(m.member_id, m.metadata) for m in joined.members] == [(me, SUB)]
            if v >= 7:
                assert joined.protocol_type == "consumer"

            sv = min(v, 5)
            A = SyncGroupRequest.Assignment
            synced = w.request(
                ApiKey.SYNC_GROUP,
                sv,
                SyncGroupRequest(
                    group_id=group,
                    generation_id=1,
                    member_id=me,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[A(member_id=me, assignment=b"mine")],
                ),
            )
            assert (synced.error_code, synced.assignment) == (E.NONE, b"mine")
            if sv >= 5:
                assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")

            hb = w.request(
                ApiKey.HEARTBEAT,
                min(v, 4),
                HeartbeatRequest(
                    group_id=group, generation_id=1, member_id=me, group_instance_id=None
                ),
            )
            assert hb.error_code == E.NONE

            cv = min(max(v, 2), 9)
            CP = OffsetCommitRequest.Topic.Partition
            committed = w.request(
                ApiKey.OFFSET_COMMIT,
                cv,
                OffsetCommitRequest(
                    group_id=group,
                    generation_id_or_member_epoch=1,
                    member_id=me,
                    group_instance_id=None,
                    retention_time_ms=-1,
                    topics=[
                        OffsetCommitRequest.Topic(
                            name="wt",
                            partitions=[
                                CP(
                                    partition_index=0,
                                    committed_offset=100 + v,
                                    committed_leader_epoch=7,
                                    committed_metadata=f"meta-{v}",
                                )
                            ],
                        )
                    ],
                ),
            )
            assert committed.topics[0].partitions[0].error_code == E.NONE

            fv = min(max(v, 1), 9)
            FT = OffsetFetchRequest.Group.Topic
            topics = [FT(name="wt", partition_indexes=[0, 1])]
            req = OffsetFetchRequest(
                group_id=group,
                topics=topics,
                require_stable=True,
                groups=[OffsetFetchRequest.Group(group_id=group, topics=topics)],
            )
            fetched = w.request(ApiKey.OFFSET_FETCH, fv, req)
            parts = (fetched.groups[0] if fv >= 8 else fetched).topics[0].partitions
            p0, p1 = sorted(parts, key=lambda p: p.partition_index)
            assert (p0.committed_offset, p0.metadata, p0.error_code) == (
                100 + v,
                f"meta-{v}",
                E.NONE,
            )
            assert (p1.committed_offset, p1.metadata, p1.error_code) == (-1, "", E.NONE)
            if fv >= 5:
                assert p0.committed_leader_epoch == (7 if cv >= 6 else -1)

            dv = min(v, 5)
            described = w.request(
                ApiKey.DESCRIBE_GROUPS,
                dv,
                DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
            ).groups[0]
            assert (
                described.error_code,
                described.group_state,
                described.protocol_type,
                described.protocol_data,
            ) == (E.NONE, "Stable", "consumer", "range")
            [m] = described.members
            assert (m.member_id, m.client_id, m.client_host) == (me, "wire-test", "/127.0.0.1")
            assert (m.member_metadata, m.member_assignment) == (SUB, b"mine")

            lv = min(v, 4)
            listed = w.request(ApiKey.LIST_GROUPS, lv, ListGroupsRequest(states_filter=["stable"]))
            assert listed.error_code == E.NONE
            assert group in {g.group_id for g in listed.groups}
            if lv >= 4:
                assert {g.group_state for g in listed.groups} == {"Stable"}

            leave_v = min(v, 5)
            LM = LeaveGroupRequest.Member
            left = w.request(
                ApiKey.LEAVE_GROUP,
                leave_v,
                LeaveGroupRequest(
                    group_id=group,
                    member_id=me,
                    members=[LM(member_id=me, group_instance_id=None, reason="done")],
                ),
            )
            assert left.error_code == E.NONE
            if leave_v >= 3:
                assert [(x.member_id, x.error_code) for x in left.members] == [(me, E.NONE)]

            deleted = w.request(
                ApiKey.DELETE_GROUPS, min(v, 2), DeleteGroupsRequest(groups_names=[group])
            )
            assert [(r.group_id, r.error_code) for r in deleted.results] == [(group, E.NONE)]
    finally:
        w.close()


def test_offset_fetch_all_and_several_groups_and_offset_delete(gbroker: BrokerProcess) -> None:
    w = Wire(gbroker.bootstrap)
    try:
        CP = OffsetCommitRequest.Topic.Partition
        for group, offset in (("simple-a", 5), ("simple-b", 6)):
            r = w.request(
                ApiKey.OFFSET_COMMIT,
                8,
                OffsetCommitRequest(
                    group_id=group,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=[
                        OffsetCommitRequest.Topic(
                            name="wt",
                            partitions=[
                                CP(
                                    partition_index=1,
                                    committed_offset=offset,
                                    committed_leader_epoch=-1,
                                    committed_metadata=None,
                                )
                            ],
                        )
                    ],
                ),
            )
            assert r.topics[0].partitions[0].error_code == E.NONE
        # v2-7: a null topic list asks for everything the group committed.
        all_a = w.request(
            ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="simple-a", topics=None)
        )
        assert [
            (t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
            for t in all_a.topics
        ] == [("wt", [(1, 5)])]
        G = OffsetFetchRequest.Group
        several = w.request(
            ApiKey.OFFSET_FETCH,
            9,
            OffsetFetchRequest(
                groups=[
                    G(group_id="simple-a", topics=None),
                    G(group_id="simple-b", topics=None),
                    G(group_id="none", topics=None),
                ]
            ),
        )
        assert [
            (g.group_id, g.error_code, [p.committed_offset for t in g.topics for p in t.partitions])
            for g in several.groups
        ] == [("simple-a", 0, [5]), ("simple-b", 0, [6]), ("none", 0, [])]
        OD = OffsetDeleteRequest.Topic
        dropped = w.request(
            ApiKey.OFFSET_DELETE,
            0,
            OffsetDeleteRequest(
                group_id="simple-a",
                topics=[OD(name="wt", partitions=[OD.Partition(partition_index=1)])],
            ),
        )
        assert dropped.error_code == E.NONE
        assert dropped.topics[0].partitions[0].error_code == E.NONE
        gone = w.request(
            ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="simple-a", topics=None)
        )
        assert gone.topics == []
        unknown = w.request(
            ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="never", topics=[])
        )
        assert unknown.error_code == E.GROUP_ID_NOT_FOUND
    finally:
        w.close()


def test_bad_group_requests_get_error_codes(gbroker: BrokerProcess) -> None:
    w = Wire(gbroker.bootstrap)
    try:
        assert join(w, 5, "").error_code == E.INVALID_GROUP_ID
        assert join(w, 5, "g", session=10).error_code == E.INVALID_SESSION_TIMEOUT
        assert join(w, 5, "g", session=10**9).error_code == E.INVALID_SESSION_TIMEOUT
        assert join(w, 5, "g", protocols=[]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        oversized = join(w, 5, "g", protocols=[("range", b"\x00" * 5000)])
        assert oversized.error_code == E.INVALID_REQUEST
        assert join(w, 5, "g", member_id="invented").error_code == E.UNKNOWN_MEMBER_ID
        joined = join(w, 3, "g")
        assert joined.error_code == E.NONE
        other = join(w, 3, "g", protocols=[("roundrobin", SUB)])
        assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL

        def heartbeat(group: str, member: str, generation: int) -> int:
            return int(
                w.request(
                    ApiKey.HEARTBEAT,
                    4,
                    HeartbeatRequest(
                        group_id=group,
                        generation_id=generation,
                        member_id=member,
                        group_instance_id=None,
                    ),
                ).error_code
            )

        assert heartbeat("no-such-group", "m", 1) == E.UNKNOWN_MEMBER_ID
        assert heartbeat("g", "stranger", 1) == E.UNKNOWN_MEMBER_ID
        assert heartbeat("g", joined.member_id, 99) == E.ILLEGAL_GENERATION

        def sync(member: str, generation: int) -> Any:
            return w.request(
                ApiKey.SYNC_GROUP,
                5,
                SyncGroupRequest(
                    group_id="g",
                    generation_id=generation,
                    member_id=member,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[],
                ),
            )

        assert sync("stranger", 1).error_code == E.UNKNOWN_MEMBER_ID
        assert sync(joined.member_id, 7).error_code == E.ILLEGAL_GENERATION
        # The leader may hand out nothing: everyone gets a well-formed empty assignment.
        empty = sync(joined.member_id, 1)
        assert (empty.error_code, empty.assignment) == (E.NONE, b"")

        LM = LeaveGroupRequest.Member
        left = w.request(
            ApiKey.LEAVE_GROUP,
            5,
            LeaveGroupRequest(
                group_id="g",
                members=[
                    LM(member_id="stranger", group_instance_id=None),
                    LM(member_id="", group_instance_id="no-instance"),
                ],
            ),
        )
        assert [m.error_code for m in left.members] == [E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
        old_leave = w.request(
            ApiKey.LEAVE_GROUP, 0, LeaveGroupRequest(group_id="g", member_id="stranger")
        )
        assert old_leave.error_code == E.UNKNOWN_MEMBER_ID

        CP = OffsetCommitRequest.Topic.Partition

        def commit(group: str, generation: int, member: str, topic: str, metadata: str) -> int:
            r = w.request(
                ApiKey.OFFSET_COMMIT,
                8,
                OffsetCommitRequest(
                    group_id=group,
                    generation_id_or_member_epoch=generation,
                    member_id=member,
                    group_instance_id=None,
                    topics=[
                        OffsetCommitRequest.Topic(
                            name=topic,
                            partitions=[
                                CP(
                                    partition_index=0,
                                    committed_offset=1,
                                    committed_leader_epoch=-1,
                                    committed_metadata=metadata,
                                )
                            ],
                        )
                    ],
                ),
            )
            return int(r.topics[0].partitions[0].error_code)

        assert commit("fresh", 3, "someone", "wt", "") == E.ILLEGAL_GENERATION
        assert commit("fresh", -1, "", "no-such-topic", "") == E.UNKNOWN_TOPIC_OR_PARTITION
        assert commit("fresh", -1, "", "wt", "m" * 5000) == E.OFFSET_METADATA_TOO_LARGE
        assert commit("g", 1, "stranger", "wt", "") == E.UNKNOWN_MEMBER_ID
        assert commit("g", 5, joined.member_id, "wt", "") == E.ILLEGAL_GENERATION

        described = w.request(
            ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["no-such-group"])
        ).groups[0]
        assert (described.error_code, described.group_state, described.members) == (
            E.NONE,
            "Dead",
            [],
        )
        deleted = w.request(
            ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["no-such-group", "g"])
        )
        assert [r.error_code for r in deleted.results] == [E.GROUP_ID_NOT_FOUND, E.NON_EMPTY_GROUP]

        # A transactional id's coordinator (key type 1) is this broker too.
        assert find(w, 3, "txn-id", key_type=1) == (E.NONE, 0, gbroker.port)
        assert find(w, 4, "x", key_type=9)[0] == E.INVALID_REQUEST
    finally:
        w.close()


# JoinGroup v5 header (api 11, version 5, correlation 1, client id "x").
_JOIN_V5 = struct.pack(">hhih", 11, 5, 1, 1) + b"x"


@pytest.mark.parametrize(
    "body",
    [
        # Truncated in the middle of the group id.
        _JOIN_V5 + struct.pack(">h", 50) + b"abc",
        # A protocol array claiming two billion entries in a tiny request.
        _JOIN_V5
        + struct.pack(">h1siih", 1, b"g", 10000, 10000, 0)
        + struct.pack(">hh8s", -1, 8, b"consumer")
        + struct.pack(">i", 2**31 - 1),
        # Metadata bytes longer than the frame.
        _JOIN_V5
        + struct.pack(">h1siih", 1, b"g", 10000, 10000, 0)
        + struct.pack(">hh8s", -1, 8, b"consumer")
        + struct.pack(">ih5si", 1, 5, b"range", 10**8),
    ],
)
def test_malformed_group_requests_close_the_connection_only(
    gbroker: BrokerProcess, body: bytes
) -> None:
    w = Wire(gbroker.bootstrap)
    try:
        w.send_raw(frame(body))
        assert w.is_closed()
    finally:
        w.close()
    still_serving(gbroker)
