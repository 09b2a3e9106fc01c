"""ConsumerGroupHeartbeat, ConsumerGroupDescribe and ListGroups v5 on the wire, on Apache
Kafka 4.1.1 (KRaft: the consumer group protocol of KIP-848 needs it) and on kbroker.

Raw requests, so that each answer can be compared field by field: a join and its
assignment, the errors of a bad request (their codes, and the messages Kafka gives), a
fenced epoch, an unknown member, a leave, and a classic group in the way: both run with
``group.consumer.migration.policy=disabled``, so that it stays in the way (by default,
``bidirectional``, the group is converted: tests/compat/test_group_migration.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.core import MetadataRequest
from kbroker.protocol.messages.group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
)
from tests.compat.systems import KAFKA4_SYSTEMS, single_node
from tests.helpers import Wire

pytestmark = pytest.mark.timeout(180)

NONE = 0
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
INVALID_REGULAR_EXPRESSION = 128

PARTITIONS = 3


@pytest.fixture(scope="module", params=KAFKA4_SYSTEMS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = {
        "group.initial.rebalance.delay.ms": "0",
        "group.consumer.migration.policy": "disabled",
    }
    root = tmp_path_factory.mktemp(request.param)
    with single_node(request.param, None, root, settings) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def topic(node: str) -> tuple[str, uuid.UUID]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": node})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    with Wire(node) as w:
        deadline = time.monotonic() + 30
        while True:
            asked = MetadataRequest(
                topics=[MetadataRequest.Topic(name=name)], allow_auto_topic_creation=False
            )
            found = [t for t in w.request(ApiKey.METADATA, 12, asked).topics if t.name == name]
            if found and found[0].error_code == NONE and len(found[0].partitions) == PARTITIONS:
                return name, found[0].topic_id
            assert time.monotonic() < deadline
            time.sleep(0.2)


def _coordinator(bootstrap: str, group: str) -> Wire:
    """A connection to the group's coordinator (the single node, once it is ready)."""
    w = Wire(bootstrap)
    deadline = time.monotonic() + 30
    while True:
        r = w.request(
            ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group])
        )
        if r.coordinators[0].error_code == NONE:
            return w
        assert time.monotonic() < deadline, r
        time.sleep(0.2)


def _heartbeat(w: Wire, group: str, member: str, epoch: int, **fields: object) -> object:
    body = ConsumerGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch)
    for name, value in fields.items():
        setattr(body, name, value)
    deadline = time.monotonic() + 30
    while True:
        r = w.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)
        if r.error_code not in (14, 15, 16):  # the coordinator is loading or not there yet
            return r
        assert time.monotonic() < deadline, r
        time.sleep(0.2)


def _join(w: Wire, group: str, member: str, topic: str, **fields: object) -> object:
    return _heartbeat(
        w,
        group,
        member,
        0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
        **fields,
    )


def test_a_join_gets_every_partition_and_the_heartbeat_interval(
    node: str, topic: tuple[str, uuid.UUID]
) -> None:
    group, member = f"g-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with _coordinator(node, group) as w:
        r = _join(w, group, member, topic[0])
        assert (r.error_code, r.member_id, r.heartbeat_interval_ms) == (NONE, member, 5000)
        assert r.member_epoch >= 1
        assert [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions] == [
            (topic[1], list(range(PARTITIONS)))
        ]
        # The next heartbeat, with nothing changed: no assignment repeated.
        again = _heartbeat(w, group, member, r.member_epoch)
        assert (again.error_code, again.member_epoch, again.assignment) == (
            NONE,
            r.member_epoch,
            None,
        )
        # A newer epoch than the coordinator's: fenced.
        fenced = _heartbeat(w, group, member, r.member_epoch + 1)
        assert fenced.error_code == FENCED_MEMBER_EPOCH
        # ConsumerGroupDescribe and ListGroups v5 see it.
        d = w.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
        ).groups[0]
        assert (d.error_code, d.group_state, d.assignor_name) == (NONE, "Stable", "uniform")
        assert (d.group_epoch, d.assignment_epoch) == (r.member_epoch, r.member_epoch)
        [m] = d.members
        assert (m.member_id, m.member_epoch, m.subscribed_topic_names) == (
            member,
            r.member_epoch,
            [topic[0]],
        )
        assert [(tp.topic_name, sorted(tp.partitions)) for tp in m.assignment.topic_partitions] == [
            (topic[0], list(range(PARTITIONS)))
        ]
        listed = w.request(
            ApiKey.LIST_GROUPS, 5, ListGroupsRequest(states_filter=[], types_filter=["consumer"])
        ).groups
        assert [
            (g.protocol_type, g.group_state, g.group_type) for g in listed if g.group_id == group
        ] == [("consumer", "Stable", "consumer")]
        assert not [
            g
            for g in w.request(
                ApiKey.LIST_GROUPS, 5, ListGroupsRequest(states_filter=[], types_filter=["classic"])
            ).groups
            if g.group_id == group
        ]
        # DescribeGroups (up to v5) does not describe it: Dead, no error.
        classic = w.request(
            ApiKey.DESCRIBE_GROUPS,
            5,
            DescribeGroupsRequest(groups=[group], include_authorized_operations=False),
        ).groups[0]
        assert (classic.error_code, classic.group_state, classic.members) == (NONE, "Dead", [])
        # Leaving: epoch -1 back, and the group is empty.
        left = _heartbeat(w, group, member, -1)
        assert (left.error_code, left.member_id, left.member_epoch) == (NONE, member, -1)
        d = w.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
        ).groups[0]
        assert (d.error_code, d.group_state, d.members) == (NONE, "Empty", [])
        # The member that left is not one any more.
        gone = _heartbeat(w, group, member, r.member_epoch)
        assert (gone.error_code, gone.error_message) == (
            UNKNOWN_MEMBER_ID,
            f"Member {member} is not a member of group {group}.",
        )


@pytest.mark.parametrize(
    ("fields", "epoch", "error", "message"),
    [
        (
            {"server_assignor": "sticky"},
            0,
            UNSUPPORTED_ASSIGNOR,
            "ServerAssignor sticky is not supported",
        ),
        (
            {"topic_partitions": None},
            0,
            INVALID_REQUEST,
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            {"rebalance_timeout_ms": -1},
            0,
            INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        ({}, 7, GROUP_ID_NOT_FOUND, "Consumer group g-"),
        ({}, -3, INVALID_REQUEST, "MemberEpoch is invalid."),
        ({"subscribed_topic_regex": "(unclosed"}, 0, INVALID_REGULAR_EXPRESSION, None),
    ],
)
def test_a_bad_heartbeat_gets_kafkas_error(
    node: str,
    topic: tuple[str, uuid.UUID],
    fields: dict[str, object],
    epoch: int,
    error: int,
    message: str | None,
) -> None:
    group, member = f"g-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with _coordinator(node, group) as w:
        base: dict[str, object] = {
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [topic[0]],
            "topic_partitions": [],
        }
        r = _heartbeat(w, group, member, epoch, **{**base, **fields})
        assert r.error_code == error, r
        if message is not None:
            assert r.error_message.startswith(message), r.error_message


def test_an_empty_member_id_is_refused_from_v1(node: str, topic: tuple[str, uuid.UUID]) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    with _coordinator(node, group) as w:
        r = _join(w, group, "", topic[0])
        assert r.error_code == INVALID_REQUEST


def test_a_group_of_the_other_protocol_is_not_a_consumer_group(
    node: str, topic: tuple[str, uuid.UUID]
) -> None:
    """A classic consumer is a member: a consumer protocol member is refused, and
    ConsumerGroupDescribe says it is not a consumer group."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    classic = Consumer(
        {
            "bootstrap.servers": node,
            "group.id": group,
            "group.protocol": "classic",
            "session.timeout.ms": 10000,
        }
    )
    try:
        classic.subscribe([topic[0]])
        deadline = time.monotonic() + 30
        while not classic.assignment():
            classic.poll(0.2)
            assert time.monotonic() < deadline, "the classic consumer never got partitions"
        with _coordinator(node, group) as w:
            r = _join(w, group, str(uuid.uuid4()), topic[0])
            assert (r.error_code, r.error_message) == (
                GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {group} to consumer group because online "
                "upgrade is disabled.",
            )
            d = w.request(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                0,
                ConsumerGroupDescribeRequest(
                    group_ids=[group], include_authorized_operations=False
                ),
            ).groups[0]
            assert d.error_code == GROUP_ID_NOT_FOUND
    finally:
        classic.close()


def test_a_groups_heartbeat_interval_config_is_what_members_are_told(
    node: str, topic: tuple[str, uuid.UUID]
) -> None:
    group, member = f"g-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    admin = AdminClient({"bootstrap.servers": node})
    entry = ConfigEntry(
        "consumer.heartbeat.interval.ms", "7000", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    with _coordinator(node, group) as w:
        r = _join(w, group, member, topic[0])
        assert (r.error_code, r.heartbeat_interval_ms) == (NONE, 7000)
        _heartbeat(w, group, member, -1)


def test_a_static_member_restarts_into_its_own_place(
    node: str, topic: tuple[str, uuid.UUID]
) -> None:
    """A static member leaving with epoch -2 keeps its partitions; its instance id is its
    own (UNRELEASED_INSTANCE_ID to another member meanwhile, FENCED_INSTANCE_ID to a wrong
    member id), and the restarted instance, with a new member id, gets them back."""
    group, first, second = f"g-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()), str(uuid.uuid4())
    with _coordinator(node, group) as w:
        r = _join(w, group, first, topic[0], instance_id="i-1")
        assert r.error_code == NONE
        owned = [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions]
        taken = _join(w, group, second, topic[0], instance_id="i-1")
        assert taken.error_code == UNRELEASED_INSTANCE_ID, taken
        wrong = _heartbeat(w, group, second, r.member_epoch, instance_id="i-1")
        assert wrong.error_code == FENCED_INSTANCE_ID, wrong
        left = _heartbeat(w, group, first, -2, instance_id="i-1")
        assert (left.error_code, left.member_epoch) == (NONE, -2)
        back = _join(w, group, second, topic[0], instance_id="i-1")
        assert (back.error_code, back.member_id) == (NONE, second)
        assert [
            (tp.topic_id, sorted(tp.partitions)) for tp in back.assignment.topic_partitions
        ] == owned
        _heartbeat(w, group, second, -1, instance_id="i-1")
