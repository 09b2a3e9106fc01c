"""The "consumer" embedded protocol: what group members put in their opaque bytes.

Members of protocol type ``consumer`` carry a subscription in JoinGroup
metadata and receive an assignment in SyncGroup. The broker never computes
assignments (clients do), but it reads subscriptions to know which topics a
group uses (offset expiry, OffsetDelete, partition-count changes) and tools
read assignments to show who owns what. Unreadable bytes give None: callers
then assume the group may use any topic, as Kafka does.
"""

from __future__ import annotations

import struct
from typing import Any

from kbroker.protocol.codec import Codec
from kbroker.protocol.errors import ProtocolDecodeError
from kbroker.protocol.schema import BYTES, INT32, STRING, Array, F, message

PROTOCOL_TYPE = "consumer"

_TopicPartitions = message(
    "TopicPartition",
    F("topic", STRING),
    F("partitions", Array(INT32)),
)

ConsumerSubscription = message(
    "ConsumerSubscription",
    F("topics", Array(STRING)),
    F("user_data", BYTES, nullable="0+", default=None),
    F("owned_partitions", Array(_TopicPartitions), "1+"),
    F("generation_id", INT32, "2+", default=-1),
    F("rack_id", STRING, "3+", nullable="3+", default=None),
)

ConsumerAssignment = message(
    "ConsumerAssignment",
    F("assigned_partitions", Array(_TopicPartitions)),
    F("user_data", BYTES, nullable="0+", default=None),
)

_SUBSCRIPTION = {v: Codec(ConsumerSubscription, v, False) for v in range(4)}
_ASSIGNMENT = {0: Codec(ConsumerAssignment, 0, False)}
_VERSION = struct.Struct(">h")


def _decode(codecs: dict[int, Codec], data: bytes) -> object | None:
    if len(data) < 2:
        return None
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        return None
    # Later versions append fields: read the ones known, ignore the rest.
    codec = codecs[min(version, max(codecs))]
    try:
        msg, _ = codec.decode_from(memoryview(data), 2)
    except ProtocolDecodeError:
        return None
    return msg


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a consumer subscription, or None when the bytes are not one."""
    msg = _decode(_SUBSCRIPTION, metadata)
    return None if msg is None else set(msg.topics)  # type: ignore[attr-defined]


def assigned_partitions(assignment: bytes) -> dict[str, list[int]] | None:
    """topic -> partitions of a consumer assignment, or None when unreadable."""
    if not assignment:
        return {}
    msg = _decode(_ASSIGNMENT, assignment)
    if msg is None:
        return None
    out: dict[str, list[int]] = {}
    for tp in msg.assigned_partitions:  # type: ignore[attr-defined]
        out.setdefault(tp.topic, []).extend(tp.partitions)
    return out


def decode_subscription(metadata: bytes) -> tuple[int, Any] | None:
    """(version, subscription) of consumer subscription bytes, or None when not one."""
    msg = _decode(_SUBSCRIPTION, metadata)
    if msg is None:
        return None
    return _VERSION.unpack_from(metadata, 0)[0], msg


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """A v0 subscription (used by tests and tools that join groups themselves)."""
    return _VERSION.pack(0) + _SUBSCRIPTION[0].encode(
        ConsumerSubscription(topics=topics, user_data=user_data)
    )


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """An assignment with the version header ``version`` (every version has this layout)."""
    body = ConsumerAssignment(
        assigned_partitions=[_TopicPartitions(t, p) for t, p in sorted(partitions.items())],
        user_data=None,
    )
    return _VERSION.pack(max(0, min(version, 3))) + _ASSIGNMENT[0].encode(body)
