"""Frame-level behaviour with hand-assembled golden bytes (struct.pack).

Covers request/response headers (v0/v1/v2 and the ApiVersions exception),
decode_request / encode_response / encode_response_segments, the error-35
ApiVersions reply, the APIS table and the error codes.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from kbroker.protocol import (
    APIS,
    ApiKey,
    ErrorCode,
    KafkaError,
    RecordsPlaceholder,
    UnknownApiKeyError,
    UnsupportedVersionError,
    advertised_versions,
    api,
    api_versions_response,
    decode_request,
    decode_response,
    encode_api_versions_unsupported,
    encode_request,
    encode_response,
    encode_response_segments,
)
from kbroker.protocol.messages.core import (
    FetchResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    ProduceRequest,
)


def s16(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def cstr(s: str) -> bytes:  # compact string, short enough for a 1-byte varint
    return bytes([len(s) + 1]) + s.encode()


# --------------------------------------------------------------- requests


def test_api_versions_v3_request_with_header_v2() -> None:
    frame = (
        struct.pack(">hhi", 18, 3, 1)
        + s16("rdkafka")
        + b"\x00"
        + cstr("librdkafka")
        + cstr("2.16.0")
        + b"\x00"
    )
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 1)
    assert header.client_id == "rdkafka" and header.header_version == 2
    assert body.client_software_name == "librdkafka"
    assert body.client_software_version == "2.16.0"
    assert encode_request(18, 3, 1, "rdkafka", body) == struct.pack(">i", len(frame)) + frame


def test_api_versions_v0_request_header_v1_null_client_id() -> None:
    header, body = decode_request(struct.pack(">hhih", 18, 0, 9, -1))
    assert header.client_id is None and header.header_version == 1
    assert body.client_software_name == ""  # absent at v0: default


def test_produce_v3_request() -> None:
    records = b"\x00" * 61 + b"batch"
    frame = (
        struct.pack(">hhi", 0, 3, 42)
        + s16("producer")
        + struct.pack(">hhi", -1, -1, 30000)
        + struct.pack(">i", 1)
        + s16("t")
        + struct.pack(">iii", 1, 0, len(records))
        + records
    )
    header, req = decode_request(frame)
    assert header.correlation_id == 42
    assert req.transactional_id is None and req.acks == -1 and req.timeout_ms == 30000
    part = req.topic_data[0].partition_data[0]
    assert req.topic_data[0].name == "t" and part.index == 0
    assert isinstance(part.records, memoryview) and bytes(part.records) == records
    rebuilt = ProduceRequest(
        None, -1, 30000, [ProduceRequest.Topic("t", [ProduceRequest.Topic.Partition(0, records)])]
    )
    assert encode_request(0, 3, 42, "producer", rebuilt)[4:] == frame


def test_metadata_v0_and_v12_requests() -> None:
    frame = struct.pack(">hhi", 3, 0, 1) + s16("c") + struct.pack(">i", 1) + s16("t")
    _, req = decode_request(frame)
    assert [t.name for t in req.topics] == ["t"] and req.allow_auto_topic_creation is True
    tid = uuid.UUID(int=7)
    frame12 = (
        struct.pack(">hhi", 3, 12, 1)
        + s16("c")
        + b"\x00"
        + b"\x02"
        + tid.bytes
        + b"\x00"
        + b"\x00"  # one topic by id, null name, no tags
        + b"\x00\x01"
        + b"\x00"
    )  # auto create false, topic ops true, no tags
    _, req12 = decode_request(frame12)
    assert req12.topics == [MetadataRequest.Topic(topic_id=tid, name=None)]
    assert (
        req12.allow_auto_topic_creation is False
        and req12.include_topic_authorized_operations is True
    )
    assert encode_request(3, 12, 1, "c", req12)[4:] == frame12


def test_controlled_shutdown_v0_has_no_client_id() -> None:
    # header v0: api key 7, version 0, correlation id 5, then broker_id 2 at once
    frame = bytes.fromhex("0007 0000 00000005 00000002")
    header, body = decode_request(frame)
    assert (header.header_version, header.client_id, header.correlation_id) == (0, None, 5)
    assert (body.broker_id, body.broker_epoch) == (2, -1)
    assert encode_request(7, 0, 5, "ignored", body) == b"\x00\x00\x00\x0c" + frame
    # v1 has the usual header v1 with a client id
    header, body = decode_request(bytes.fromhex("0007 0001 00000005 0001 78 00000002"))
    assert (header.header_version, header.client_id, body.broker_id) == (1, "x", 2)


def test_unknown_key_and_version_carry_the_header() -> None:
    with pytest.raises(UnknownApiKeyError) as e1:
        decode_request(struct.pack(">hhi", 999, 0, 5) + s16("c"))
    assert e1.value.header.correlation_id == 5 and e1.value.header.client_id == "c"
    with pytest.raises(UnsupportedVersionError) as e2:
        decode_request(struct.pack(">hhi", 18, 77, 6) + s16("c") + b"\x00\x00\x00")
    assert (e2.value.header.api_key, e2.value.header.api_version) == (18, 77)
    with pytest.raises(UnsupportedVersionError):
        decode_request(struct.pack(">hhi", 1, 3, 6) + s16("c"))  # Fetch below 4


# --------------------------------------------------------------- responses


def test_api_versions_response_v3_uses_header_v0() -> None:
    body = api_versions_response([ApiKey.METADATA, ApiKey.API_VERSIONS])
    frame = encode_response(7, 18, 3, body)
    expected = (
        struct.pack(">i", 7)
        + struct.pack(">h", 0)
        + b"\x03"
        + struct.pack(">hhh", 3, 0, 12)
        + b"\x00"
        + struct.pack(">hhh", 18, 0, 4)
        + b"\x00"
        + struct.pack(">i", 0)
        + b"\x00"
    )
    assert frame == struct.pack(">i", len(expected)) + expected


def test_api_versions_unsupported_reply_is_v0_error_35() -> None:
    frame = encode_api_versions_unsupported(11)
    expected = struct.pack(">ihihhh", 11, 35, 1, 18, 0, 4)
    assert frame == struct.pack(">i", len(expected)) + expected


def test_flexible_response_header_has_tag_byte() -> None:
    from kbroker.protocol.messages.core import MetadataResponse

    frame = encode_response(3, 3, 9, MetadataResponse())
    assert frame[4:9] == struct.pack(">i", 3) + b"\x00"
    corr, body = decode_response(3, 9, frame[4:])
    assert corr == 3 and body == MetadataResponse()
    assert encode_response(3, 3, 8, MetadataResponse())[4:8] == struct.pack(">i", 3)


def _fetch_v12(records: object) -> object:
    part = FetchResponse.Topic.Partition(
        partition_index=0,
        error_code=0,
        high_watermark=10,
        log_start_offset=0,
        aborted_transactions=None,
        records=records,
        current_leader=LeaderIdAndEpoch(2, 5),
    )
    return FetchResponse(responses=[FetchResponse.Topic(topic="t", partitions=[part])])


FETCH_V12_BODY_HEAD = (
    struct.pack(">ihi", 0, 0, 0)
    + b"\x02"
    + cstr("t")
    + b"\x02"
    + struct.pack(">ihqqq", 0, 0, 10, -1, 0)
    + b"\x00"
    + struct.pack(">i", -1)
)
# partition tags: one field, tag 1, 9 bytes (the struct and its own empty tag section);
# then the topic's and the response's empty tag sections
FETCH_V12_BODY_TAIL = b"\x01" + b"\x01\x09" + struct.pack(">ii", 2, 5) + b"\x00" + b"\x00" + b"\x00"


def test_fetch_v12_response_golden() -> None:
    frame = encode_response(77, 1, 12, _fetch_v12(b"abc"))
    body = FETCH_V12_BODY_HEAD + b"\x04abc" + FETCH_V12_BODY_TAIL
    expected = struct.pack(">i", 77) + b"\x00" + body
    assert frame == struct.pack(">i", len(expected)) + expected
    corr, decoded = decode_response(1, 12, frame[4:])
    p = decoded.responses[0].partitions[0]
    assert corr == 77 and p.current_leader.leader_epoch == 5 and bytes(p.records) == b"abc"
    assert p.diverging_epoch is None and p.aborted_transactions is None


def test_fetch_response_segments_leave_records_out() -> None:
    placeholder = RecordsPlaceholder(1000, source=("segment.log", 4096))
    segs = encode_response_segments(77, 1, 12, _fetch_v12(placeholder))
    assert len(segs) == 3 and segs[1] is placeholder
    head = (
        struct.pack(">i", 77) + b"\x00" + FETCH_V12_BODY_HEAD + bytes([0xE9, 0x07])
    )  # varint 1001
    total = len(head) + 1000 + len(FETCH_V12_BODY_TAIL)
    assert segs[0] == struct.pack(">i", total) + head
    assert segs[2] == FETCH_V12_BODY_TAIL
    # same bytes as the plain encoding once the placeholder is filled in
    data = bytes(range(250)) * 4
    plain = encode_response(77, 1, 12, _fetch_v12(data))
    assert segs[0] + data + segs[2] == plain


def test_plain_encoding_refuses_placeholders() -> None:
    from kbroker.protocol import ProtocolEncodeError

    with pytest.raises(ProtocolEncodeError):
        encode_response(1, 1, 12, _fetch_v12(RecordsPlaceholder(3)))


def test_encoder_rejects_null_in_non_nullable_field() -> None:
    from kbroker.protocol import ProtocolEncodeError

    with pytest.raises(ProtocolEncodeError):
        api(17).request_codec(1).encode(api(17).request(mechanism=None))
    with pytest.raises(ProtocolEncodeError):
        api(17).response_codec(1).encode(api(17).response(error_code=70000))


# --------------------------------------------------------------- APIS and errors


EXPECTED_RANGES = {
    0: (0, 11),
    1: (4, 17),
    2: (1, 8),
    3: (0, 12),
    4: (0, 7),
    5: (0, 4),
    6: (0, 8),
    7: (0, 3),
    8: (2, 9),
    9: (1, 9),
    10: (0, 4),
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 6),
    16: (0, 5),
    17: (0, 1),
    18: (0, 4),
    19: (2, 7),
    20: (1, 6),
    21: (0, 2),
    22: (0, 5),
    23: (2, 4),
    24: (0, 5),
    25: (0, 4),
    26: (0, 4),
    27: (1, 1),
    28: (0, 4),
    29: (1, 3),
    30: (1, 3),
    31: (1, 3),
    32: (1, 4),
    33: (0, 2),
    34: (1, 2),
    35: (1, 4),
    36: (0, 2),
    37: (0, 3),
    38: (1, 3),
    39: (1, 2),
    40: (1, 2),
    41: (1, 3),
    42: (0, 2),
    43: (0, 2),
    44: (0, 1),
    45: (0, 0),
    46: (0, 0),
    47: (0, 0),
    48: (0, 1),
    49: (0, 1),
    50: (0, 0),
    51: (0, 0),
    56: (0, 3),
    57: (0, 1),
    60: (0, 1),
    61: (0, 0),
    65: (0, 0),
    66: (0, 1),
    67: (0, 0),
    68: (0, 1),
    69: (0, 1),
    # ListConfigResources: Kafka 4.1's (kafka-configs asks it before describing a group);
    # not v0, ListClientMetricsResources, which Kafka 3.9 in ZooKeeper mode does not serve.
    74: (1, 1),
}


def test_apis_table_ranges() -> None:
    assert {int(s.key): (s.min_version, s.max_version) for s in APIS} == EXPECTED_RANGES
    assert len({s.key for s in APIS}) == len(APIS)


def test_advertised_is_apis_intersect_handlers() -> None:
    assert advertised_versions([18, 3, 0, 12345]) == [(0, 0, 11), (3, 0, 12), (18, 0, 4)]
    body = api_versions_response([0, 1])
    assert [(a.api_key, a.min_version, a.max_version) for a in body.api_keys] == [
        (0, 0, 11),
        (1, 4, 17),
    ]


def test_kafka_python_reads_the_table_as_a_real_release() -> None:
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    table = {k: (lo, hi) for k, lo, hi in advertised_versions(s.key for s in APIS)}
    # Fetch v17 (what a Kafka 3.9 follower sends) makes it read as 3.9.
    assert infer_broker_version_from_api_versions(table) == (3, 9)


def test_inter_broker_ranges_are_kafka_3_9s() -> None:
    """LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, AlterPartition and
    AllocateProducerIds have the ranges of Kafka 3.9 as kafka-python records them (the real
    broker's own answer is checked in tests/cluster/test_inter_broker_wire.py)."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    kafka_3_9 = BROKER_API_VERSIONS[(3, 9)]
    for key in (1, 4, 5, 6, 7, 56):
        assert api(key).max_version == kafka_3_9[key][1], key
    for key in (4, 5, 6, 7, 56, 67):
        assert (api(key).min_version, api(key).max_version) == kafka_3_9[key], key


def test_header_versions_follow_the_flexible_rule() -> None:
    fetch, av, sasl = api(1), api(18), api(17)
    assert [fetch.request_header_version(v) for v in (11, 12)] == [1, 2]
    assert [fetch.response_header_version(v) for v in (11, 12)] == [0, 1]
    assert [av.request_header_version(v) for v in (2, 3)] == [1, 2]
    assert [av.response_header_version(v) for v in (2, 3, 4)] == [0, 0, 0]
    assert not sasl.flexible(1)
    # Inter-broker APIs: flexible from LeaderAndIsr v4, StopReplica v2, UpdateMetadata v6,
    # ControlledShutdown v3 (whose v0 has the client-id-less header v0), AlterPartition v0.
    for key, flex in [(4, 4), (5, 2), (6, 6), (7, 3), (56, 0)]:
        spec = api(key)
        for v in range(spec.min_version, spec.max_version + 1):
            expected = 0 if (key, v) == (7, 0) else 2 if v >= flex else 1
            assert spec.request_header_version(v) == expected, (key, v)
            assert spec.response_header_version(v) == (1 if v >= flex else 0), (key, v)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("NONE", 0),
        ("OFFSET_OUT_OF_RANGE", 1),
        ("CORRUPT_MESSAGE", 2),
        ("UNKNOWN_TOPIC_OR_PARTITION", 3),
        ("INVALID_FETCH_SIZE", 4),
        ("LEADER_NOT_AVAILABLE", 5),
        ("NOT_LEADER_OR_FOLLOWER", 6),
        ("REQUEST_TIMED_OUT", 7),
        ("MESSAGE_TOO_LARGE", 10),
        ("COORDINATOR_LOAD_IN_PROGRESS", 14),
        ("COORDINATOR_NOT_AVAILABLE", 15),
        ("NOT_COORDINATOR", 16),
        ("INVALID_TOPIC_EXCEPTION", 17),
        ("RECORD_LIST_TOO_LARGE", 18),
        ("NOT_ENOUGH_REPLICAS", 19),
        ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20),
        ("INVALID_REQUIRED_ACKS", 21),
        ("ILLEGAL_GENERATION", 22),
        ("INCONSISTENT_GROUP_PROTOCOL", 23),
        ("INVALID_GROUP_ID", 24),
        ("UNKNOWN_MEMBER_ID", 25),
        ("INVALID_SESSION_TIMEOUT", 26),
        ("REBALANCE_IN_PROGRESS", 27),
        ("INVALID_COMMIT_OFFSET_SIZE", 28),
        ("UNSUPPORTED_VERSION", 35),
        ("TOPIC_ALREADY_EXISTS", 36),
        ("INVALID_PARTITIONS", 37),
        ("INVALID_REPLICATION_FACTOR", 38),
        ("INVALID_CONFIG", 40),
        ("INVALID_REQUEST", 42),
        ("POLICY_VIOLATION", 44),
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45),
        ("DUPLICATE_SEQUENCE_NUMBER", 46),
        ("INVALID_PRODUCER_EPOCH", 47),
        ("UNKNOWN_PRODUCER_ID", 59),
        ("NON_EMPTY_GROUP", 68),
        ("GROUP_ID_NOT_FOUND", 69),
        ("FENCED_LEADER_EPOCH", 74),
        ("UNKNOWN_LEADER_EPOCH", 75),
        ("OFFSET_NOT_AVAILABLE", 78),
        ("MEMBER_ID_REQUIRED", 79),
        ("FENCED_INSTANCE_ID", 82),
        ("GROUP_SUBSCRIBED_TO_TOPIC", 86),
        ("INVALID_RECORD", 87),
        ("UNSTABLE_OFFSET_COMMIT", 88),
        ("UNKNOWN_TOPIC_ID", 100),
        ("INCONSISTENT_TOPIC_ID", 103),
        ("UNKNOWN_SERVER_ERROR", -1),
    ],
)
def test_error_code_numbers(name: str, code: int) -> None:
    assert ErrorCode[name] == code


def test_error_codes_match_kafka_python() -> None:
    import inspect

    import kafka.errors as kerr

    theirs = {
        c.errno
        for _, c in inspect.getmembers(kerr, inspect.isclass)
        if issubclass(c, kerr.BrokerResponseError) and isinstance(getattr(c, "errno", None), int)
    }
    # Codes of Kafka 4.0 that kafka-python 3.0 does not know yet.
    newer = {ErrorCode.INVALID_REGULAR_EXPRESSION}
    assert {int(c) for c in ErrorCode if c not in newer} <= theirs


def test_kafka_error() -> None:
    e = KafkaError.for_code(6, "moved")
    assert e.code is ErrorCode.NOT_LEADER_OR_FOLLOWER and e.retriable and "moved" in str(e)
    assert not KafkaError.for_code(ErrorCode.TOPIC_ALREADY_EXISTS).retriable
    assert KafkaError.for_code(31999).code is ErrorCode.UNKNOWN_SERVER_ERROR
    with pytest.raises(KafkaError):
        raise KafkaError(ErrorCode.INVALID_REQUEST)
