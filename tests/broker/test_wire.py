"""The broker at the byte level: error codes, ordering, and bad input.

These speak the protocol through raw sockets (encoding with kbroker's own
codec), to send what real clients never would.
"""

from __future__ import annotations

import contextlib
import struct
import time
from typing import Any

import pytest

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode, decode_response, encode_request
from kbroker.protocol.messages.core import (
    ApiVersionsRequest,
    MetadataRequest,
)
from tests.helpers import (
    BrokerProcess,
    Wire,
    fetch_req,
    metadata,
    produce_req,
    still_serving,
    wire_produce,
)


@pytest.fixture
def wire(broker: BrokerProcess) -> Any:
    w = Wire(broker.bootstrap)
    yield w
    w.close()


def test_api_versions_advertises_produce_from_zero(wire: Wire) -> None:
    resp = wire.request(
        ApiKey.API_VERSIONS,
        3,
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[ApiKey.PRODUCE] == (0, 11)
    assert ranges[ApiKey.FETCH] == (4, 17)
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)
    assert ranges[ApiKey.METADATA] == (0, 12)


def test_unknown_api_versions_version_gets_error_35_in_v0_layout(wire: Wire) -> None:
    # ApiVersions v99: header v2 layout as a new client would send it.
    body = b"\x00\x12\x00\x63" + struct.pack(">i", 7) + b"\x00\x01x" + b"\x00" + b"\x02t\x021\x00"
    wire.send_raw(struct.pack(">i", len(body)) + body)
    frame = wire.read_frame()
    corr, error, count = struct.unpack_from(">ihi", frame)
    assert (corr, error, count) == (7, ErrorCode.UNSUPPORTED_VERSION, 1)
    key, lo, hi = struct.unpack_from(">hhh", frame, 10)
    assert (key, lo, hi) == (18, 0, 4)


def test_pipelined_requests_answered_in_order(wire: Wire) -> None:
    frames = b"".join(
        encode_request(
            ApiKey.METADATA,
            9,
            corr,
            "p",
            MetadataRequest(topics=[], allow_auto_topic_creation=False),
        )
        for corr in range(1, 51)
    )
    wire.send_raw(frames)
    corrs = [decode_response(ApiKey.METADATA, 9, wire.read_frame())[0] for _ in range(50)]
    assert corrs == list(range(1, 51))


def test_produce_v2_is_refused_with_unsupported_version(wire: Wire) -> None:
    batch = build_batch([(None, b"v", [])])
    assert wire_produce(wire, "old-format", batch, version=2)[0] == ErrorCode.UNSUPPORTED_VERSION


def test_corrupt_and_invalid_batches_append_nothing(wire: Wire) -> None:
    metadata(wire, ["bad-batches"])
    good = build_batch([(b"k", b"v", [])])
    flipped = bytearray(good)
    flipped[-2] ^= 0x40
    assert wire_produce(wire, "bad-batches", bytes(flipped))[0] == ErrorCode.CORRUPT_MESSAGE
    assert wire_produce(wire, "bad-batches", good[:-3])[0] == ErrorCode.CORRUPT_MESSAGE
    assert wire_produce(wire, "bad-batches", good + bytes(flipped))[0] == ErrorCode.CORRUPT_MESSAGE
    garbage = b"\x00" * 8 + struct.pack(">i", 2**31 - 1) + b"\x00" * 60
    assert wire_produce(wire, "bad-batches", garbage)[0] == ErrorCode.CORRUPT_MESSAGE
    assert wire_produce(wire, "bad-batches", b"")[0] == ErrorCode.INVALID_RECORD
    # None of it was appended: the next good batch lands at offset 0.
    resp = wire.request(ApiKey.PRODUCE, 9, produce_req("bad-batches", good))
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)


def test_unknown_topic_and_out_of_range_fetch(wire: Wire) -> None:
    metadata(wire, ["fetch-range"])
    assert wire_produce(wire, "no-such-topic-" + "x" * 5, build_batch([(None, b"v", [])]))[0] in (
        ErrorCode.NONE,  # auto-created by Metadata? no: Produce never creates
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    )
    req = fetch_req("fetch-range", offset=42, min_bytes=1)
    resp = wire.request(ApiKey.FETCH, 11, req)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", -5) + b"xxxx",  # negative length
        struct.pack(">i", 2**31 - 1) + b"\x00" * 16,  # beyond socket.request.max.bytes
        struct.pack(">i", 4) + b"\x00\x03\x00\x01",  # shorter than a request header
        struct.pack(">i", 12)
        + struct.pack(">hhih", 999, 0, 1, -1)
        + b"\x00\x00",  # unknown api key
        struct.pack(">i", 12)
        + struct.pack(">hhih", 3, 999, 1, -1)
        + b"\x00\x00",  # unknown version
        # Metadata v1 whose topic array claims 2^31-1 entries in a tiny frame.
        struct.pack(">i", 14) + struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 2**31 - 1),
        # client_id length beyond the frame.
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 1, 1, 3000),
    ],
    ids=[
        "negative",
        "oversized",
        "short",
        "unknown-key",
        "unknown-version",
        "huge-array",
        "bad-client-id",
    ],
)
def test_bad_frames_close_only_that_connection(broker: BrokerProcess, frame: bytes) -> None:
    bystander = Wire(broker.bootstrap)
    bad = Wire(broker.bootstrap)
    try:
        bad.send_raw(frame)
        assert bad.is_closed()
        assert metadata(bystander, []).brokers[0].port == broker.port
        still_serving(broker)
    finally:
        bad.close()
        bystander.close()
    assert broker.proc is not None and broker.proc.poll() is None


def test_truncated_and_abandoned_requests(broker_factory: Any) -> None:
    broker = broker_factory("connections.max.idle.ms=1500")
    stalled = Wire(broker.bootstrap)
    stalled.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x09")  # 8 of 100 bytes, then silence
    abandoned = Wire(broker.bootstrap)
    abandoned.send_raw(struct.pack(">i", 100) + b"\x00\x03")
    abandoned.close()
    still_serving(broker)
    # The stalled connection is closed once idle for connections.max.idle.ms.
    start = time.monotonic()
    assert stalled.is_closed(timeout=10)
    assert time.monotonic() - start < 9
    stalled.close()
    still_serving(broker)


def test_random_garbage_never_kills_the_broker(broker: BrokerProcess) -> None:
    import random

    rng = random.Random(1234)
    for _ in range(200):
        w = Wire(broker.bootstrap, timeout=5)
        try:
            size = rng.randrange(0, 200)
            body = bytes(rng.randrange(256) for _ in range(size))
            w.send_raw(struct.pack(">i", len(body)) + body)
            w.sock.settimeout(2)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                w.sock.recv(1 << 16)
        finally:
            w.close()
    still_serving(broker)


def test_metadata_never_auto_creates_internal_topics_with_defaults(wire: Wire) -> None:
    resp = metadata(wire, ["__consumer_offsets", "__transaction_state"])
    by_name = {t.name: t for t in resp.topics}
    offsets = by_name["__consumer_offsets"]
    # Made by the group coordinator with its own settings, not as a plain topic.
    assert offsets.error_code == 0 and offsets.is_internal
    assert len(offsets.partitions) == 50
    assert by_name["__transaction_state"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
