"""Hostile input: truncations, random bytes, huge declared counts, bad lengths.

Decoding may only succeed or raise ProtocolDecodeError, quickly and without
allocating from declared sizes.
"""

from __future__ import annotations

import contextlib
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kbproto_helpers import every_version, message_st

from kbroker.protocol import (
    ProtocolDecodeError,
    UnsupportedRequestError,
    api,
    decode_request,
    encode_request,
)
from kbroker.protocol.headers import encode_request_header

CASES = [pytest.param(int(s.key), v, id=f"{s.name}-v{v}") for s, v in every_version()]


def _frame_body(key: int, version: int, msg: object) -> bytes:
    return encode_request(key, version, 7, "fuzz", msg)[4:]  # strip the size prefix


def _decode_or_clean_error(frame: bytes) -> None:
    # the two outcomes the server maps to a reply or a closed connection
    with contextlib.suppress(ProtocolDecodeError, UnsupportedRequestError):
        decode_request(frame)


@pytest.mark.parametrize(("key", "version"), CASES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_truncation_is_a_clean_error(key: int, version: int, data: st.DataObject) -> None:
    spec = api(key)
    codec = spec.request_codec(version)
    msg = data.draw(message_st(codec.message, version, codec.flexible))
    frame = _frame_body(key, version, msg)
    decode_request(frame)  # the whole frame is valid
    for cut in range(len(frame)):
        with pytest.raises(ProtocolDecodeError):
            decode_request(frame[:cut])


@pytest.mark.parametrize(("key", "version"), CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tail=st.binary(max_size=64))
def test_random_bodies_never_raise_anything_else(key: int, version: int, tail: bytes) -> None:
    header = encode_request_header(key, version, 1, "x", api(key).request_header_version(version))
    _decode_or_clean_error(header + tail)


@pytest.mark.parametrize(("key", "version"), CASES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corrupted_bytes_never_raise_anything_else(
    key: int, version: int, data: st.DataObject
) -> None:
    codec = api(key).request_codec(version)
    frame = bytearray(
        _frame_body(key, version, data.draw(message_st(codec.message, version, codec.flexible)))
    )
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, frame[i] ^ 0x01]))
    _decode_or_clean_error(bytes(frame))


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_any_bytes(frame: bytes) -> None:
    _decode_or_clean_error(frame)


def bounded_decode(frame: bytes) -> None:
    """Decoding ``frame`` fails with ProtocolDecodeError, quickly and in little memory
    (measured on a second decode, after the first compiled the codec)."""
    with pytest.raises(ProtocolDecodeError):
        decode_request(frame)
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ProtocolDecodeError):
        decode_request(frame)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 0.05
    assert peak < 64 * 1024


def test_huge_classic_array_count_fails_fast() -> None:
    # Metadata v1: topics count 2^31-1 followed by almost nothing (20-byte request)
    header = encode_request_header(3, 1, 1, "c", 1)
    frame = header + struct.pack(">i", 2**31 - 1) + b"\x00" * (20 - len(header) - 4)
    assert len(frame) == 20
    bounded_decode(frame)


def test_huge_primitive_array_count_fails_fast() -> None:
    # DeleteGroups v0: groups_names count 2^31-1 of strings
    bounded_decode(
        encode_request_header(42, 0, 1, None, 1) + struct.pack(">i", 2**31 - 1) + b"\x00\x01a"
    )


def test_huge_compact_array_count_fails_fast() -> None:
    # Metadata v12 (flexible): compact array count 2^32 as a 5-byte varint
    frame = encode_request_header(3, 12, 1, "c", 2) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 4
    bounded_decode(frame)


def test_huge_string_and_bytes_lengths_fail_fast() -> None:
    bounded_decode(encode_request_header(17, 1, 1, "c", 1) + struct.pack(">h", 32767) + b"abc")
    bounded_decode(encode_request_header(36, 0, 1, "c", 1) + struct.pack(">i", 2**31 - 1) + b"abc")


def test_huge_records_length_fails_fast() -> None:
    body = struct.pack(">hhi", -1, 1, 1000)  # transactional_id null, acks, timeout
    body += (
        struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ii", 1, 0) + struct.pack(">i", 2**31 - 1)
    )
    bounded_decode(encode_request_header(0, 3, 1, "c", 1) + body)


def test_negative_lengths_other_than_minus_one_are_errors() -> None:
    # Produce v3 transactional_id is nullable: -1 is null, -2 is malformed
    body = struct.pack(">hhii", -1, 1, 1000, 0)
    decode_request(encode_request_header(0, 3, 1, "c", 1) + body)
    with pytest.raises(ProtocolDecodeError):
        decode_request(
            encode_request_header(0, 3, 1, "c", 1) + struct.pack(">hhii", -2, 1, 1000, 0)
        )
    # a non-nullable string can't be null either (SaslHandshake mechanism)
    with pytest.raises(ProtocolDecodeError):
        decode_request(encode_request_header(17, 1, 1, "c", 1) + struct.pack(">h", -1))
    # nor can a non-nullable array (Metadata v0 topics)
    with pytest.raises(ProtocolDecodeError):
        decode_request(encode_request_header(3, 0, 1, "c", 1) + struct.pack(">i", -1))
    # negative client_id length other than -1
    with pytest.raises(ProtocolDecodeError):
        decode_request(struct.pack(">hhih", 18, 0, 1, -5))


def test_overlong_varint_is_an_error() -> None:
    frame = encode_request_header(3, 12, 1, "c", 2) + b"\xff\xff\xff\xff\xff\xff\x01"
    with pytest.raises(ProtocolDecodeError):
        decode_request(frame)


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    # librdkafka 2.16 sends Metadata v9+ with a null topic list followed by
    # three stray bytes; Kafka ignores what follows the body, and so do we.
    frame = (
        encode_request_header(3, 12, 1, "c", 2) + b"\x00" + b"\x01\x00\x00" + b"\x00\x01\x00\x00"
    )
    header, body = decode_request(frame)
    assert header.correlation_id == 1 and body.topics is None


def test_bad_utf8_is_an_error() -> None:
    with pytest.raises(ProtocolDecodeError):
        decode_request(encode_request_header(17, 1, 1, "c", 1) + struct.pack(">h", 2) + b"\xff\xfe")


def test_strings_longer_than_kafka_reads_are_errors() -> None:
    # A compact string may declare more than an int16 length can; Kafka refuses any string
    # over 32767 bytes (and closes the connection), so does kbroker.
    from kbroker.protocol.messages.group import FindCoordinatorRequest

    for size, ok in ((32767, True), (32768, False), (1 << 20, False)):
        request = FindCoordinatorRequest(key="k" * size, key_type=1)
        frame = _frame_body(10, 3, request)
        if ok:
            assert len(decode_request(frame)[1].key) == size
        else:
            with pytest.raises(ProtocolDecodeError, match="longer than 32767 bytes"):
                decode_request(frame)
