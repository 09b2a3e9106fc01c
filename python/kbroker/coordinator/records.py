"""The records of ``__consumer_offsets``: keys, values and which partition a group uses.

Owns the on-disk form of committed offsets and group metadata. The layout
is Kafka's own (a big-endian int16 schema version, then the fields), so the
tools that read that topic understand kbroker's records:

  key v0/v1  offset commit   (group, topic, partition)   value: OffsetCommitValue v0-v4
  key v2     group metadata  (group)                     value: GroupMetadataValue v0-v4
  key v3-v8  the consumer groups of KIP-848 (consumer_records)

kbroker writes offset keys v1 with values v3 (v1 when the commit carries an
expiry time: OffsetCommit v2-4's retention) and group keys v2 with values v3.
A record with a null value (a tombstone) deletes its key; compaction keeps only
the newest record per key.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from kbroker.coordinator.consumer_records import KEY_VERSIONS, ConsumerKey, parse_consumer_key
from kbroker.protocol.codec import Codec
from kbroker.protocol.errors import ProtocolDecodeError
from kbroker.protocol.schema import BYTES, INT32, INT64, STRING, Array, F, message

OFFSETS_TOPIC = "__consumer_offsets"

_VERSION = struct.Struct(">h")

# -- schemas -------------------------------------------------------------------

OffsetCommitKey = message(
    "OffsetCommitKey",
    F("group", STRING),
    F("topic", STRING),
    F("partition", INT32),
)

OffsetCommitValue = message(
    "OffsetCommitValue",
    F("offset", INT64),
    F("leader_epoch", INT32, "3+", default=-1),
    F("metadata", STRING),
    F("commit_timestamp", INT64),
    F("expire_timestamp", INT64, "1", default=-1),
)

GroupMetadataKey = message(
    "GroupMetadataKey",
    F("group", STRING),
)

GroupMetadataValue = message(
    "GroupMetadataValue",
    F("protocol_type", STRING),
    F("generation", INT32),
    F("protocol", STRING, nullable="0+", default=None),
    F("leader", STRING, nullable="0+", default=None),
    F("current_state_timestamp", INT64, "2+", default=-1),
    F(
        "members",
        Array(
            message(
                "MemberMetadata",
                F("member_id", STRING),
                F("group_instance_id", STRING, "3+", nullable="3+", default=None),
                F("client_id", STRING),
                F("client_host", STRING),
                F("rebalance_timeout", INT32, "1+", default=-1),
                F("session_timeout", INT32),
                F("subscription", BYTES),
                F("assignment", BYTES),
            )
        ),
    ),
)

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3
_MAX_VALUE_VERSION = 4  # first flexible version of both values


def _codec(cls: Any, version: int) -> Codec:
    return Codec(cls, version, flexible=version >= _MAX_VALUE_VERSION)


_OFFSET_KEY = {v: _codec(OffsetCommitKey, 0) for v in (0, 1)}
_GROUP_KEY = _codec(GroupMetadataKey, 0)
_OFFSET_VALUE = {v: _codec(OffsetCommitValue, v) for v in range(_MAX_VALUE_VERSION + 1)}
_GROUP_VALUE = {v: _codec(GroupMetadataValue, v) for v in range(_MAX_VALUE_VERSION + 1)}


# -- the partition of a group --------------------------------------------------------


def java_string_hashcode(text: str) -> int:
    """``String.hashCode()`` of Java: over UTF-16 code units, wrapping at 32 bits."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, the same one Kafka uses."""
    h = java_string_hashcode(group_id)
    # Kafka's abs() maps Integer.MIN_VALUE to 0.
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- decoded forms ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(slots=True)
class CommittedOffset:
    """One committed offset as the coordinator keeps it.

    ``record_offset`` is where its record starts in ``__consumer_offsets`` (-1
    while it is being written): of two commits of a partition, the later
    record wins, whatever order their writes or transactions complete in
    (Kafka's CommitRecordMetadataAndOffset). It is not part of the record.
    """

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None
    record_offset: int = -1

    def older_than(self, other: CommittedOffset) -> bool:
        """Stored before ``other`` (whose record offset is known)."""
        return self.record_offset < other.record_offset


@dataclass(slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupRecord:
    """A group's durable state: what a group metadata record holds."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


class RecordFormatError(ValueError):
    """A ``__consumer_offsets`` record kbroker cannot read."""


# -- encoding -----------------------------------------------------------------------------


def offset_key(group: str, topic: str, partition: int) -> bytes:
    body = _OFFSET_KEY[OFFSET_KEY_VERSION].encode(OffsetCommitKey(group, topic, partition))
    return _VERSION.pack(OFFSET_KEY_VERSION) + body


def group_key(group: str) -> bytes:
    return _VERSION.pack(GROUP_KEY_VERSION) + _GROUP_KEY.encode(GroupMetadataKey(group))


def offset_value(committed: CommittedOffset) -> bytes:
    version = OFFSET_VALUE_VERSION
    expire = -1
    if committed.expire_timestamp is not None:
        # Only v1 carries an explicit expiry (OffsetCommit v2-v4 retention_time_ms).
        version, expire = 1, committed.expire_timestamp
    value = OffsetCommitValue(
        offset=committed.offset,
        leader_epoch=committed.leader_epoch,
        metadata=committed.metadata,
        commit_timestamp=committed.commit_timestamp,
        expire_timestamp=expire,
    )
    return _VERSION.pack(version) + _OFFSET_VALUE[version].encode(value)


def group_value(record: GroupRecord) -> bytes:
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.subscription,
            assignment=m.assignment,
        )
        for m in record.members
    ]
    value = GroupMetadataValue(
        protocol_type=record.protocol_type,
        generation=record.generation,
        protocol=record.protocol,
        leader=record.leader,
        current_state_timestamp=record.state_timestamp,
        members=members,
    )
    return _VERSION.pack(GROUP_VALUE_VERSION) + _GROUP_VALUE[GROUP_VALUE_VERSION].encode(value)


# -- decoding -----------------------------------------------------------------------------


def _split(data: bytes) -> tuple[int, memoryview]:
    if len(data) < 2:
        raise RecordFormatError("record shorter than its schema version")
    (version,) = _VERSION.unpack_from(data, 0)
    return version, memoryview(data)[2:]


def parse_key(data: bytes) -> OffsetKey | GroupKey | ConsumerKey:
    version, body = _split(data)
    if version in KEY_VERSIONS:
        try:
            return parse_consumer_key(version, body)
        except ValueError as exc:
            raise RecordFormatError(str(exc)) from None
    try:
        if version in (0, 1):
            k = _OFFSET_KEY[version].decode(body)
            return OffsetKey(k.group, k.topic, k.partition)
        if version == 2:
            return GroupKey(_GROUP_KEY.decode(body).group)
    except ProtocolDecodeError as exc:
        raise RecordFormatError(f"bad key v{version}: {exc}") from None
    raise RecordFormatError(f"unknown key version {version}")


def _decode_value(codecs: dict[int, Codec], data: bytes, what: str) -> tuple[int, Any]:
    version, body = _split(data)
    # Newer versions than kbroker knows only add tagged fields (KIP-915):
    # read them with the newest known layout.
    codec = codecs.get(version) or (
        codecs[_MAX_VALUE_VERSION] if version > _MAX_VALUE_VERSION else None
    )
    if codec is None:
        raise RecordFormatError(f"unknown {what} value version {version}")
    try:
        return version, codec.decode(body)
    except ProtocolDecodeError as exc:
        raise RecordFormatError(f"bad {what} value v{version}: {exc}") from None


def parse_offset_value(data: bytes) -> CommittedOffset:
    version, v = _decode_value(_OFFSET_VALUE, data, "offset commit")
    expire = v.expire_timestamp if version == 1 and v.expire_timestamp >= 0 else None
    return CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, expire)


def parse_group_value(data: bytes) -> GroupRecord:
    _, v = _decode_value(_GROUP_VALUE, data, "group metadata")
    return GroupRecord(
        protocol_type=v.protocol_type,
        generation=v.generation,
        protocol=v.protocol,
        leader=v.leader,
        state_timestamp=v.current_state_timestamp,
        members=[
            MemberRecord(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                bytes(m.subscription),
                bytes(m.assignment),
            )
            for m in v.members
        ],
    )
