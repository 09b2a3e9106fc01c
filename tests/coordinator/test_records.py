"""The ``__consumer_offsets`` record format and the group -> partition mapping."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbroker.coordinator import consumer_protocol
from kbroker.coordinator.records import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    RecordFormatError,
    group_key,
    group_value,
    java_string_hashcode,
    offset_key,
    offset_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
    partition_for,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
        ("consumer-group-1", 147483020),
        ("my-group", -1906497762),  # values from java.lang.String.hashCode()
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_partition_for_matches_kafka_abs() -> None:
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("consumer-group-1", 50) == 147483020 % 50 == 20
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12


def test_offset_key_layout_is_kafkas() -> None:
    key = offset_key("g", "t", 7)
    # version 1, then group, topic as int16-length strings and the partition.
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 7)
    assert parse_key(key) == OffsetKey("g", "t", 7)
    assert parse_key(group_key("grp")) == GroupKey("grp")
    assert group_key("grp") == struct.pack(">hh3s", 2, 3, b"grp")


def test_offset_value_layout_v3_and_v1() -> None:
    value = offset_value(CommittedOffset(42, 5, "meta", 1000))
    assert value == struct.pack(">hqih4sq", 3, 42, 5, 4, b"meta", 1000)
    assert parse_offset_value(value) == CommittedOffset(42, 5, "meta", 1000, None)
    # An explicit retention is only expressible in v1 (expire timestamp).
    with_expiry = offset_value(CommittedOffset(42, -1, "", 1000, 5000))
    assert with_expiry[:2] == b"\x00\x01"
    assert parse_offset_value(with_expiry) == CommittedOffset(42, -1, "", 1000, 5000)


def test_group_value_roundtrip() -> None:
    record = GroupRecord(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="m1",
        state_timestamp=123,
        members=[
            MemberRecord("m1", "static-1", "client", "/127.0.0.1", 30000, 10000, b"sub", b"assign"),
            MemberRecord("m2", None, "client", "/10.0.0.2", 30000, 10000, b"", b""),
        ],
    )
    data = group_value(record)
    assert data[:2] == b"\x00\x03"
    assert parse_group_value(data) == record


def test_unknown_and_truncated_records_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        parse_key(b"\x00\x09abc")
    with pytest.raises(RecordFormatError):
        parse_key(b"\x00")
    with pytest.raises(RecordFormatError):
        parse_offset_value(offset_value(CommittedOffset(1))[:-3])


@given(
    group=st.text(max_size=40),
    topic=st.text(min_size=1, max_size=40),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(-1, 2**63 - 1),
    epoch=st.integers(-1, 2**31 - 1),
    metadata=st.text(max_size=100),
)
def test_offset_records_roundtrip(
    group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str
) -> None:
    assert parse_key(offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    committed = CommittedOffset(offset, epoch, metadata, 17)
    assert parse_offset_value(offset_value(committed)) == committed
    assert 0 <= partition_for(group, 50) < 50


def test_consumer_protocol_subscription_and_assignment() -> None:
    sub = consumer_protocol.encode_subscription(["a", "b"], b"user")
    assert consumer_protocol.subscribed_topics(sub) == {"a", "b"}
    assert consumer_protocol.subscribed_topics(b"\x00") is None
    assert consumer_protocol.subscribed_topics(b"junkjunk") is None
    assignment = consumer_protocol.encode_assignment({"a": [0, 2], "b": [1]})
    assert consumer_protocol.assigned_partitions(assignment) == {"a": [0, 2], "b": [1]}
    assert consumer_protocol.assigned_partitions(b"") == {}
    # A later version with extra fields is read by its known prefix.
    v3 = b"\x00\x03" + sub[2:] + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff" + b"\xff\xff"
    assert consumer_protocol.subscribed_topics(v3) == {"a", "b"}
