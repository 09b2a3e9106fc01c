"""The ``__consumer_offsets`` records of consumer groups (KIP-848), in Kafka's schemas.

Keys carry their schema version first, as the other records of the topic do;
each value is version 0 of a flexible schema:

  key v3  group epoch            (group)          ConsumerGroupMetadataValue
  key v4  subscribed topics      (group)          ConsumerGroupPartitionMetadataValue
  key v5  member metadata        (group, member)  ConsumerGroupMemberMetadataValue
  key v6  target assignment epoch (group)         ConsumerGroupTargetAssignmentMetadataValue
  key v7  member target          (group, member)  ConsumerGroupTargetAssignmentMemberValue
  key v8  member current state   (group, member)  ConsumerGroupCurrentMemberAssignmentValue

`changes` turns the difference between two states of a group into the records
that store it (a tombstone deletes a key); `ConsumerGroupReplay` reads them
back into the state they stored.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.coordinator.consumer_group import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ClassicMembership,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicInfo,
    freeze,
)
from kbroker.protocol.codec import Codec, read_uvarint, uvarint
from kbroker.protocol.errors import ProtocolDecodeError
from kbroker.protocol.schema import BYTES, INT8, INT32, STRING, UUID, Array, F, message

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]

_VERSION = struct.Struct(">h")

GROUP_EPOCH_KEY = 3
SUBSCRIPTION_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_EPOCH_KEY = 6
MEMBER_TARGET_KEY = 7
MEMBER_CURRENT_KEY = 8
KEY_VERSIONS = range(GROUP_EPOCH_KEY, MEMBER_CURRENT_KEY + 1)
_MEMBER_KEYS = (MEMBER_METADATA_KEY, MEMBER_TARGET_KEY, MEMBER_CURRENT_KEY)

GroupOnlyKey = message("GroupKey", F("group_id", STRING))
GroupMemberKey = message("GroupMemberKey", F("group_id", STRING), F("member_id", STRING))

GroupEpochValue = message("ConsumerGroupMetadataValue", F("epoch", INT32))

SubscriptionValue = message(
    "ConsumerGroupPartitionMetadataValue",
    F(
        "topics",
        Array(
            message(
                "TopicMetadata",
                F("topic_id", UUID),
                F("topic_name", STRING),
                F("num_partitions", INT32),
                F(
                    "partition_metadata",
                    Array(
                        message(
                            "PartitionMetadata", F("partition", INT32), F("racks", Array(STRING))
                        )
                    ),
                ),
            )
        ),
    ),
)

MemberMetadataValue = message(
    "ConsumerGroupMemberMetadataValue",
    F("instance_id", STRING, nullable="0+", default=None),
    F("rack_id", STRING, nullable="0+", default=None),
    F("client_id", STRING),
    F("client_host", STRING),
    F("subscribed_topic_names", Array(STRING)),
    F("subscribed_topic_regex", STRING, nullable="0+", default=None),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("server_assignor", STRING, nullable="0+", default=None),
)
# Its tagged field 0, ClassicMemberMetadata: nullable, and an empty struct by default, so
# Kafka writes it always (a consumer-protocol member's as null) with a varint marker
# first (0 null, 1 present). `_member_metadata` and `_classic_tag` handle it by hand.
ClassicMemberMetadata = message(
    "ClassicMemberMetadata",
    F("session_timeout_ms", INT32),
    F(
        "supported_protocols",
        Array(message("ClassicProtocol", F("name", STRING), F("metadata", BYTES))),
    ),
)
_CLASSIC_TAG = 0

TargetEpochValue = message(
    "ConsumerGroupTargetAssignmentMetadataValue", F("assignment_epoch", INT32)
)

_TopicPartitions = message("TopicPartitions", F("topic_id", UUID), F("partitions", Array(INT32)))

MemberTargetValue = message(
    "ConsumerGroupTargetAssignmentMemberValue", F("topic_partitions", Array(_TopicPartitions))
)

MemberCurrentValue = message(
    "ConsumerGroupCurrentMemberAssignmentValue",
    F("member_epoch", INT32),
    F("previous_member_epoch", INT32),
    F("state", INT8),
    F("assigned_partitions", Array(_TopicPartitions)),
    F("partitions_pending_revocation", Array(_TopicPartitions)),
)

_GROUP_KEY = Codec(GroupOnlyKey, 0, flexible=False)
_MEMBER_KEY = Codec(GroupMemberKey, 0, flexible=False)
_VALUES: dict[int, Codec] = {
    GROUP_EPOCH_KEY: Codec(GroupEpochValue, 0, flexible=True),
    SUBSCRIPTION_KEY: Codec(SubscriptionValue, 0, flexible=True),
    MEMBER_METADATA_KEY: Codec(MemberMetadataValue, 0, flexible=True),
    TARGET_EPOCH_KEY: Codec(TargetEpochValue, 0, flexible=True),
    MEMBER_TARGET_KEY: Codec(MemberTargetValue, 0, flexible=True),
    MEMBER_CURRENT_KEY: Codec(MemberCurrentValue, 0, flexible=True),
}
_CLASSIC = Codec(ClassicMemberMetadata, 0, flexible=True)


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """A decoded key of a consumer group record."""

    version: int
    group: str
    member_id: str | None = None


# -- encoding -----------------------------------------------------------------------------


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    if member_id is None:
        return _VERSION.pack(version) + _GROUP_KEY.encode(GroupOnlyKey(group_id))
    return _VERSION.pack(version) + _MEMBER_KEY.encode(GroupMemberKey(group_id, member_id))


def _value(version: int, value: Any) -> bytes:
    return _VERSION.pack(0) + _VALUES[version].encode(value)


def _partitions(assignment: Assignment) -> list[Any]:
    return [_TopicPartitions(t, sorted(ps)) for t, ps in sorted(assignment.items())]


def _member_metadata(m: ConsumerMember) -> bytes:
    value = _value(
        MEMBER_METADATA_KEY,
        MemberMetadataValue(
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            server_assignor=m.server_assignor,
        ),
    )
    if m.classic is None:
        payload = b"\x00"
    else:
        payload = b"\x01" + _CLASSIC.encode(
            ClassicMemberMetadata(
                session_timeout_ms=m.classic.session_timeout_ms,
                supported_protocols=[
                    ClassicMemberMetadata.ClassicProtocol(name, metadata)
                    for name, metadata in m.classic.protocols
                ],
            )
        )
    # The value ends with its tagged fields' count (0): one field instead.
    return value[:-1] + b"\x01" + uvarint(_CLASSIC_TAG) + uvarint(len(payload)) + payload


def _classic_tag(data: bytes, decoded: Any) -> ClassicMembership | None:
    """The ClassicMemberMetadata tagged field of a member metadata value (``data``, whose
    other fields are ``decoded``)."""
    pos = 2 + len(_VALUES[MEMBER_METADATA_KEY].encode(decoded)) - 1
    count, pos = read_uvarint(data, pos)
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        field = data[pos : pos + size]
        pos += size
        if tag != _CLASSIC_TAG or not field or field[0] == 0:
            continue
        value = _CLASSIC.decode(memoryview(field)[1:])
        return ClassicMembership(
            value.session_timeout_ms,
            tuple((p.name, bytes(p.metadata)) for p in value.supported_protocols),
        )
    return None


def _member_current(m: ConsumerMember) -> bytes:
    return _value(
        MEMBER_CURRENT_KEY,
        MemberCurrentValue(
            member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_member_epoch,
            state=int(m.state),
            assigned_partitions=_partitions(m.assigned),
            partitions_pending_revocation=_partitions(m.pending_revocation),
        ),
    )


def _subscription(topics: Mapping[str, TopicInfo]) -> bytes:
    return _value(
        SUBSCRIPTION_KEY,
        SubscriptionValue(
            topics=[
                SubscriptionValue.TopicMetadata(t.topic_id, t.name, t.partitions, [])
                for _, t in sorted(topics.items())
            ]
        ),
    )


def changes(old: ConsumerGroup | None, new: ConsumerGroup | None) -> list[Record]:
    """The records that turn the stored ``old`` state into ``new`` (None: no group).

    Departed members' tombstones come first (current state, target, metadata, as
    Kafka orders them); the group's own keys last when the group goes.
    """
    gid = (new or old).group_id  # type: ignore[union-attr]
    before = old or ConsumerGroup(gid)
    out: list[Record] = []
    after_members = new.members if new is not None else {}
    for member_id in before.members:
        if member_id not in after_members:
            out += [(_key(v, gid, member_id), None) for v in reversed(_MEMBER_KEYS)]
    if new is None:
        out += [(_key(v, gid), None) for v in (TARGET_EPOCH_KEY, SUBSCRIPTION_KEY, GROUP_EPOCH_KEY)]
        return out
    for member_id, m in new.members.items():
        previous = before.members.get(member_id)
        if previous is None or not previous.same_metadata(m):
            out.append((_key(MEMBER_METADATA_KEY, gid, member_id), _member_metadata(m)))
    if old is None or new.subscription != before.subscription:
        out.append((_key(SUBSCRIPTION_KEY, gid), _subscription(new.subscription)))
    if old is None or new.epoch != before.epoch:
        out.append(
            (_key(GROUP_EPOCH_KEY, gid), _value(GROUP_EPOCH_KEY, GroupEpochValue(new.epoch)))
        )
    for member_id, target in new.targets.items():
        if member_id in new.members and (
            member_id not in before.targets or dict(before.targets[member_id]) != dict(target)
        ):
            out.append(
                (
                    _key(MEMBER_TARGET_KEY, gid, member_id),
                    _value(MEMBER_TARGET_KEY, MemberTargetValue(_partitions(target))),
                )
            )
    if old is None or new.assignment_epoch != before.assignment_epoch:
        out.append(
            (
                _key(TARGET_EPOCH_KEY, gid),
                _value(TARGET_EPOCH_KEY, TargetEpochValue(new.assignment_epoch)),
            )
        )
    for member_id, m in new.members.items():
        previous = before.members.get(member_id)
        if previous is None or not previous.same_assignment(m):
            out.append((_key(MEMBER_CURRENT_KEY, gid, member_id), _member_current(m)))
    return out


def tombstones(group: ConsumerGroup) -> list[Record]:
    """Every key of the group deleted."""
    return changes(group, None)


# -- decoding ---------------------------------------------------------------------------------


def parse_consumer_key(version: int, body: memoryview) -> ConsumerKey:
    try:
        if version in _MEMBER_KEYS:
            k = _MEMBER_KEY.decode(body)
            return ConsumerKey(version, k.group_id, k.member_id)
        return ConsumerKey(version, _GROUP_KEY.decode(body).group_id)
    except ProtocolDecodeError as exc:
        raise ValueError(f"bad consumer group key v{version}: {exc}") from None


def _decode_value(version: int, data: bytes) -> Any:
    if len(data) < 2:
        raise ValueError("value shorter than its schema version")
    try:
        return _VALUES[version].decode(memoryview(data)[2:])
    except ProtocolDecodeError as exc:
        raise ValueError(f"bad value of key v{version}: {exc}") from None


def _assignment(tps: list[Any]) -> Assignment:
    return freeze({tp.topic_id: tp.partitions for tp in tps})


@dataclass
class _Replayed:
    epoch: int | None = None
    assignment_epoch: int = 0
    subscription: dict[str, TopicInfo] | None = None
    metadata: dict[str, Any] | None = None
    targets: dict[str, Assignment] | None = None
    current: dict[str, Any] | None = None


class ConsumerGroupReplay:
    """Consumer group records of one ``__consumer_offsets`` partition, oldest first."""

    def __init__(self) -> None:
        self._groups: dict[str, _Replayed] = {}

    def add(self, key: ConsumerKey, value: bytes | None) -> None:
        g = self._groups.setdefault(key.group, _Replayed())
        g.metadata = g.metadata if g.metadata is not None else {}
        g.targets = g.targets if g.targets is not None else {}
        g.current = g.current if g.current is not None else {}
        v = key.version
        if v == GROUP_EPOCH_KEY:
            if value is None:
                del self._groups[key.group]  # the group is gone
                return
            g.epoch = _decode_value(v, value).epoch
        elif v == SUBSCRIPTION_KEY:
            g.subscription = (
                None
                if value is None
                else {
                    t.topic_name: TopicInfo(t.topic_id, t.topic_name, t.num_partitions)
                    for t in _decode_value(v, value).topics
                }
            )
        elif v == TARGET_EPOCH_KEY:
            g.assignment_epoch = 0 if value is None else _decode_value(v, value).assignment_epoch
        else:
            assert key.member_id is not None
            table: dict[str, Any] = {
                MEMBER_METADATA_KEY: g.metadata,
                MEMBER_TARGET_KEY: g.targets,
                MEMBER_CURRENT_KEY: g.current,
            }[v]
            if value is None:
                table.pop(key.member_id, None)
            elif v == MEMBER_TARGET_KEY:
                table[key.member_id] = _assignment(_decode_value(v, value).topic_partitions)
            elif v == MEMBER_METADATA_KEY:
                decoded = _decode_value(v, value)
                try:
                    classic = _classic_tag(value, decoded)
                except (ProtocolDecodeError, IndexError) as exc:
                    raise ValueError(f"bad classic member metadata: {exc}") from None
                table[key.member_id] = (decoded, classic)
            else:
                table[key.member_id] = _decode_value(v, value)

    def groups(self) -> dict[str, ConsumerGroup]:
        out = {}
        for gid, g in self._groups.items():
            if g.epoch is None:
                continue  # records of a group whose epoch record was deleted later
            members = {}
            for member_id, (meta, classic) in (g.metadata or {}).items():
                current = (g.current or {}).get(member_id)
                try:
                    state = (
                        MemberState(current.state) if current is not None else MemberState.STABLE
                    )
                except ValueError:
                    state = MemberState.UNKNOWN
                members[member_id] = ConsumerMember(
                    member_id=member_id,
                    instance_id=meta.instance_id,
                    rack_id=meta.rack_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    subscribed_topic_names=tuple(meta.subscribed_topic_names),
                    subscribed_topic_regex=meta.subscribed_topic_regex,
                    rebalance_timeout_ms=meta.rebalance_timeout_ms,
                    server_assignor=meta.server_assignor,
                    classic=classic,
                    member_epoch=current.member_epoch if current is not None else 0,
                    previous_member_epoch=current.previous_member_epoch if current else 0,
                    state=state,
                    assigned=_assignment(current.assigned_partitions)
                    if current is not None
                    else EMPTY_ASSIGNMENT,
                    pending_revocation=_assignment(current.partitions_pending_revocation)
                    if current is not None
                    else EMPTY_ASSIGNMENT,
                )
            out[gid] = ConsumerGroup(
                gid,
                epoch=g.epoch,
                assignment_epoch=g.assignment_epoch,
                members=members,
                targets={m: t for m, t in (g.targets or {}).items() if m in members},
                subscription=dict(g.subscription or {}),
            )
        return out
