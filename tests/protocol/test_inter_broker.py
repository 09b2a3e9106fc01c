"""The inter-broker messages (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
AlterPartition, and Fetch v17's follower fields) beyond the generic per-version properties
of test_roundtrip.py and test_robustness.py, which cover them through APIS:

- tagged fields a later Kafka adds are skipped, at every struct level of every flexible
  version (a sender's copy of the declaration with one more tag at each level);
- known field values land at fixed byte positions (hand-assembled frames);
- huge declared counts in the new requests fail fast, without allocating from them.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kbproto_helpers import message_st
from tests.protocol.test_robustness import bounded_decode

from kbroker.protocol import ApiKey, ProtocolDecodeError, api, decode_request, encode_request
from kbroker.protocol.codec import Codec
from kbroker.protocol.headers import encode_request_header
from kbroker.protocol.messages.core import FetchRequest
from kbroker.protocol.messages.inter_broker import (
    ControlledShutdownRequest,
    LeaderAndIsrRequest,
    UpdateMetadataRequest,
)
from kbroker.protocol.schema import BYTES, Array, F, Field, Message, message

INTER_BROKER = (
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.ALTER_PARTITION,
)

FLEXIBLE_CASES = [
    pytest.param(int(key), v, kind, id=f"{api(key).name}-v{v}-{kind}")
    for key in (*INTER_BROKER, ApiKey.FETCH)
    for v in range(api(key).min_version, api(key).max_version + 1)
    if api(key).flexible(v)
    for kind in ("request", "response")
]

UNKNOWN_TAG = 77
UNKNOWN_VALUE = b"from-a-newer-kafka"


def _is_struct(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, Message)


def _newer(cls: Any, cache: dict[Any, Any]) -> Any:
    """A copy of a declaration with one more tagged field at every struct level."""
    if cls in cache:
        return cache[cls]
    fields = []
    for f in cls._schema.fields:
        t = f.type
        if isinstance(t, Array) and _is_struct(t.element):
            t = Array(_newer(t.element, cache))
        elif _is_struct(t):
            t = _newer(t, cache)
        fields.append(Field(f.name, t, f.versions, f.nullable, f.tag, f.default))
    fields.append(F("unknown_to_us", BYTES, "0+", tag=UNKNOWN_TAG))
    cache[cls] = newer = message(cls.__name__, *fields)
    return newer


def _as_newer(obj: Any, newer: Any) -> Any:
    """`obj` as an instance of its newer copy, every level carrying the unknown tag."""
    kwargs: dict[str, Any] = {"unknown_to_us": UNKNOWN_VALUE}
    for f in newer._schema.fields[:-1]:
        v = getattr(obj, f.name)
        t = f.type
        if isinstance(t, Array) and _is_struct(t.element) and v is not None:
            v = [_as_newer(x, t.element) for x in v]
        elif _is_struct(t) and v is not None:
            v = _as_newer(v, t)
        kwargs[f.name] = v
    return newer(**kwargs)


@pytest.mark.parametrize(("key", "version", "kind"), FLEXIBLE_CASES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_unknown_tagged_fields_are_skipped(
    key: int, version: int, kind: str, data: st.DataObject
) -> None:
    spec = api(key)
    codec = spec.request_codec(version) if kind == "request" else spec.response_codec(version)
    msg = data.draw(message_st(codec.message, version, True))
    newer_cls = _newer(codec.message, {})
    wire = Codec(newer_cls, version, True).encode(_as_newer(msg, newer_cls))
    assert UNKNOWN_VALUE in wire
    assert len(wire) > len(codec.encode(msg))
    assert codec.decode(wire) == msg


# -- hand-assembled bytes: each value where the protocol puts it ----------------------------


def test_leader_and_isr_v7_layout() -> None:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    body = (
        struct.pack(">i?iqb", 1, False, 3, 0x100000022, 1)  # controller, kraft, epochs, type
        + b"\x02"  # one topic state (compact array: count + 1)
        + b"\x02t"  # compact string "t"
        + topic_id.bytes
        + b"\x02"  # one partition state
        + struct.pack(">iiii", 0, 3, 2, 5)  # index, controller epoch, leader, leader epoch
        + b"\x03" + struct.pack(">ii", 2, 1)  # isr [2, 1]
        + struct.pack(">i", 7)  # partition epoch
        + b"\x03" + struct.pack(">ii", 2, 1)  # replicas
        + b"\x01\x01"  # adding, removing: empty
        + struct.pack(">?b", True, 0)  # is_new, leader recovery state
        + b"\x00"  # partition state tags
        + b"\x00"  # topic state tags
        + b"\x02" + struct.pack(">i", 2) + b"\x0a127.0.0.1" + struct.pack(">i", 9092) + b"\x00"
        + b"\x00"  # request tags
    )  # fmt: skip
    header = encode_request_header(4, 7, 11, "controller", 2)
    hdr, req = decode_request(header + body)
    assert (hdr.api_key, hdr.api_version, hdr.client_id) == (4, 7, "controller")
    assert (req.controller_id, req.controller_epoch, req.broker_epoch, req.type) == (
        1,
        3,
        0x100000022,
        1,
    )
    [topic] = req.topic_states
    assert (topic.topic_name, topic.topic_id) == ("t", topic_id)
    [p] = topic.partition_states
    assert (p.partition_index, p.leader, p.leader_epoch, p.isr, p.partition_epoch) == (
        0,
        2,
        5,
        [2, 1],
        7,
    )
    assert (p.replicas, p.adding_replicas, p.is_new) == ([2, 1], [], True)
    [live] = req.live_leaders
    assert (live.broker_id, live.host_name, live.port) == (2, "127.0.0.1", 9092)
    assert encode_request(4, 7, 11, "controller", req)[4:] == header + body


def test_update_metadata_v8_type_is_tag_zero() -> None:
    req = UpdateMetadataRequest(controller_id=1, controller_epoch=1, broker_epoch=5, type=2)
    wire = api(6).request_codec(8).encode(req)
    # controller id, kraft flag, controller epoch, broker epoch, no topics, no brokers,
    # then one tagged field: tag 0, size 1, value 2
    assert wire == struct.pack(">i?iq", 1, False, 1, 5) + b"\x01\x01" + b"\x01\x00\x01\x02"
    assert api(6).request_codec(8).decode(wire).type == 2
    # the default type (0) is not sent
    req.type = 0
    assert api(6).request_codec(8).encode(req).endswith(b"\x01\x01\x00")


def test_update_metadata_v0_has_one_host_per_broker() -> None:
    broker = UpdateMetadataRequest.Broker(id=2, v0_host="h", v0_port=9)
    req = UpdateMetadataRequest(controller_id=1, controller_epoch=1, live_brokers=[broker])
    wire = api(6).request_codec(0).encode(req)
    assert (
        wire
        == struct.pack(">iii", 1, 1, 0) + struct.pack(">ii", 1, 2) + b"\x00\x01h\x00\x00\x00\x09"
    )


def test_controlled_shutdown_versions() -> None:
    req = ControlledShutdownRequest(broker_id=2, broker_epoch=40)
    assert api(7).request_codec(1).encode(req) == struct.pack(">i", 2)
    assert api(7).request_codec(2).encode(req) == struct.pack(">iq", 2, 40)
    assert api(7).request_codec(3).encode(req) == struct.pack(">iq", 2, 40) + b"\x00"


def test_fetch_v17_replica_directory_id_is_partition_tag_zero() -> None:
    directory = uuid.UUID(int=5)
    part = FetchRequest.Topic.Partition(partition=0, fetch_offset=0, replica_directory_id=directory)
    codec = api(1).request_codec(17)
    wire = codec.encode(
        FetchRequest(
            replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=9),
            topics=[FetchRequest.Topic(topic_id=uuid.UUID(int=1), partitions=[part])],
        )
    )
    assert b"\x01\x00\x10" + directory.bytes in wire  # one tag: 0, 16 bytes, the uuid
    decoded = codec.decode(wire)
    assert decoded.topics[0].partitions[0].replica_directory_id == directory
    assert (decoded.replica_state.replica_id, decoded.replica_state.replica_epoch) == (2, 9)
    # v16 has no such field: the same object encodes without it
    assert directory.bytes not in api(1).request_codec(16).encode(decoded)


# -- hostile sizes ----------------------------------------------------------------------


def test_huge_counts_fail_fast() -> None:
    # LeaderAndIsr v1 (classic): 2^31-1 ungrouped partition states
    bounded_decode(encode_request_header(4, 1, 1, "c", 1) + struct.pack(">iii", 1, 1, 2**31 - 1))
    # LeaderAndIsr v7 (compact): topic states counted 2^32 - 1
    head = struct.pack(">i?iqb", 1, False, 1, 1, 0)
    bounded_decode(encode_request_header(4, 7, 1, "c", 2) + head + b"\xff\xff\xff\xff\x0f")
    # UpdateMetadata v5: 2^31-1 live brokers after no topics
    bounded_decode(
        encode_request_header(6, 5, 1, "c", 1) + struct.pack(">iiqii", 1, 1, 1, 0, 2**31 - 1)
    )
    # StopReplica v3: a partition-state count far past the bytes that follow
    body = struct.pack(">iiq", 1, 1, 1) + b"\x02\x02t" + b"\xfe\xff\xff\xff\x07"
    bounded_decode(encode_request_header(5, 3, 1, "c", 2) + body)
    # AlterPartition v3: new_isr_with_epochs counted 2^31
    body = struct.pack(">iq", 2, 1) + b"\x02" + bytes(16) + b"\x02" + struct.pack(">ii", 0, 0)
    bounded_decode(encode_request_header(56, 3, 1, "c", 2) + body + b"\x80\x80\x80\x80\x08")


def test_truncated_leader_and_isr_request_names_the_message() -> None:
    req = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=1,
        topic_states=[LeaderAndIsrRequest.TopicState(topic_name="t", partition_states=[])],
    )
    frame = encode_request(4, 7, 1, "c", req)[4:]
    with pytest.raises(ProtocolDecodeError, match="LeaderAndIsrRequest v7"):
        decode_request(frame[:-3])
