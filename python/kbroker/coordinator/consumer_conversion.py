"""Groups changing protocol while they have members (``group.consumer.migration.policy``).

`from_classic` is the consumer group a classic group becomes when a member of the
consumer group protocol joins it: each classic member becomes a classic member of the
consumer group, in an epoch equal to the classic generation, owning (and targeted at)
what the classic assignment gave it. `to_classic` is the classic group record a consumer
group becomes when its last consumer-protocol member leaves: its classic members with
their protocols and, as their assignment, their target. `assignment_bytes` is a member's
partitions in the embedded consumer protocol's assignment format (what SyncGroup
answers). Pure functions: the coordinator stores and installs what they return.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kbroker.coordinator import consumer_protocol
from kbroker.coordinator.consumer_group import (
    Assignment,
    ClassicMembership,
    ConsumerGroup,
    ConsumerMember,
    freeze,
)
from kbroker.coordinator.group import Group
from kbroker.coordinator.records import GroupRecord, MemberRecord


class ConversionError(ValueError):
    """Why a classic group cannot become a consumer group (Kafka's words)."""


def from_classic(group: Group, topic_id: Callable[[str], uuid.UUID | None]) -> ConsumerGroup:
    gid = group.group_id
    if group.protocol_type != consumer_protocol.PROTOCOL_TYPE:
        raise ConversionError(
            f"Cannot upgrade classic group {gid} to consumer group because the group does "
            "not use the consumer embedded protocol."
        )
    epoch = group.generation_id
    converted = ConsumerGroup(gid, epoch=epoch, assignment_epoch=epoch)
    for m in group.members.values():
        candidates = [m.metadata(group.protocol_name)] if group.protocol_name else []
        candidates += [data for _, data in m.protocols[:1]]
        decoded = next(
            (d for d in map(consumer_protocol.decode_subscription, candidates) if d), None
        )
        if decoded is None:
            raise ConversionError(
                f"Cannot upgrade classic group {gid} to consumer group because the embedded "
                "consumer protocol is malformed."
            )
        owned: dict[uuid.UUID, set[int]] = {}
        for name, partitions in (consumer_protocol.assigned_partitions(m.assignment) or {}).items():
            found = topic_id(name)
            if found is not None:
                owned.setdefault(found, set()).update(partitions)
        member = ConsumerMember(
            m.member_id,
            instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=tuple(decoded[1].topics),
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            classic=ClassicMembership(m.session_timeout_ms, tuple(m.protocols)),
            member_epoch=epoch,
            previous_member_epoch=epoch,
            assigned=freeze(owned),
        )
        converted.members[m.member_id] = member
        converted.targets[m.member_id] = member.assigned
    return converted


def assignment_bytes(
    member: ConsumerMember, assignment: Assignment, topic_name: Callable[[uuid.UUID], str | None]
) -> bytes:
    """``assignment`` in the consumer protocol's format, in the version the classic member
    subscribed with."""
    assert member.classic is not None
    decoded = consumer_protocol.decode_subscription(member.classic.protocols[0][1])
    by_name: dict[str, list[int]] = {}
    for topic_id, partitions in assignment.items():
        name = topic_name(topic_id)
        if name is not None:
            by_name[name] = sorted(partitions)
    return consumer_protocol.encode_assignment(by_name, decoded[0] if decoded else 0)


def to_classic(
    group: ConsumerGroup, topic_name: Callable[[uuid.UUID], str | None], now_ms: int
) -> GroupRecord:
    """The classic group ``group`` (only classic members left) becomes: Stable in the
    group's epoch, on the first protocol every member has, each member assigned its target
    (the classic coordinator rebalances it at once)."""
    members = [m for m in group.members.values() if m.classic is not None]
    common = set.intersection(*({n for n, _ in m.classic.protocols} for m in members if m.classic))
    first = members[0]
    assert first.classic is not None
    protocol = next((n for n, _ in first.classic.protocols if n in common), None)
    return GroupRecord(
        protocol_type=consumer_protocol.PROTOCOL_TYPE,
        generation=group.epoch,
        protocol=protocol,
        leader=first.member_id,
        state_timestamp=now_ms,
        members=[
            MemberRecord(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.classic.session_timeout_ms,
                dict(m.classic.protocols).get(protocol or "", b""),
                assignment_bytes(m, group.targets.get(m.member_id, {}), topic_name),
            )
            for m in members
            if m.classic is not None
        ],
    )
