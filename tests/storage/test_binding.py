"""The pyo3 layer: functions and the Log class seen from Python."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker import _kbroker
from kbroker._kbroker import (
    CorruptRecordError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    build_batch,
    crc32c,
    decode_records,
    validate_batches,
)

NOW = 1_700_000_000_000


def batch(n: int, size: int = 10, codec: int = 0, ts: int = NOW) -> bytes:
    return build_batch([(b"k%d" % i, b"v" * size, []) for i in range(n)], codec=codec, timestamp=ts)


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    # Continuing a CRC equals computing it over the whole.
    assert crc32c(b"56789", crc32c(b"1234")) == 0xE3069283
    big = os.urandom(1 << 20)
    assert crc32c(big[1000:], crc32c(big[:1000])) == crc32c(big)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_build_validate_decode(codec: int) -> None:
    records = [
        (b"key", b"value", [("h1", b"x"), ("h2", None)], NOW + 5),
        (None, b"no key", [], NOW + 1),
        (b"no value", None, [], NOW + 9),
    ]
    data = build_batch(
        records, codec=codec, timestamp=NOW, producer_id=7, producer_epoch=1, base_sequence=3
    )
    [info] = validate_batches(data, max_batch_bytes=1 << 20, inspect_compressed=True)
    assert (info.records, info.codec, info.producer_id, info.base_sequence) == (3, codec, 7, 3)
    assert info.max_timestamp == NOW + 9
    assert info.size == len(data)
    decoded = decode_records(data)
    assert [(o, t, k, v, h) for o, t, k, v, h in decoded] == [
        (0, NOW + 5, b"key", b"value", [("h1", b"x"), ("h2", None)]),
        (1, NOW + 1, None, b"no key", []),
        (2, NOW + 9, b"no value", None, []),
    ]


def test_validate_rejects_corruption_and_size() -> None:
    data = bytearray(batch(3))
    validate_batches(bytes(data), max_batch_bytes=1 << 20)
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        validate_batches(bytes(data), max_batch_bytes=1 << 20)
    with pytest.raises(CorruptRecordError):
        validate_batches(batch(3)[:-1], max_batch_bytes=1 << 20)
    with pytest.raises(_kbroker.RecordTooLargeError):
        validate_batches(batch(3, size=1000), max_batch_bytes=100)


def test_validate_require_keys() -> None:
    keyless = build_batch([(None, b"v", [])])
    with pytest.raises(_kbroker.InvalidRecordError):
        validate_batches(keyless, max_batch_bytes=1 << 20, require_keys=True)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=300))
def test_validate_never_crashes_on_garbage(data: bytes) -> None:
    with contextlib.suppress(
        CorruptRecordError, _kbroker.InvalidRecordError, _kbroker.RecordTooLargeError
    ):
        validate_batches(data, max_batch_bytes=1 << 20, inspect_compressed=True)


def open_log(path: Path, **cfg: int) -> Log:
    return Log(str(path), LogConfig(**cfg), NOW)


def test_log_append_read_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    infos = [log.append(batch(5), 0, None, NOW) for _ in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 4), (5, 9), (10, 14), (15, 19)]
    assert log.log_end_offset == 20
    sl = log.read(7, 1 << 20)
    assert sl is not None
    data = sl.read_bytes()
    # The slice starts at the batch that contains offset 7.
    first = validate_batches(data, 1 << 20)[0]
    assert first.base_offset == 5
    assert log.read(20, 1 << 20) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 1 << 20)
    log.close()
    again = open_log(tmp_path / "t-0")
    assert again.log_end_offset == 20
    assert again.append(batch(1), 0, None, NOW).first_offset == 20


def test_log_append_rejects_bad_batch_and_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    good = batch(2)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(bad), 0, None, NOW)
    assert log.log_end_offset == 0


def test_log_roll_retention_and_time_lookup(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=2000, retention_bytes=-1)
    for i in range(20):
        log.append(batch(2, size=100, ts=NOW + i * 1000), 0, None, NOW)
    assert len(log.segment_base_offsets) >= 3
    assert log.offset_for_timestamp(NOW + 5000) == (10, NOW + 5000)
    assert log.offset_for_timestamp(NOW + 10**9) is None
    assert log.max_timestamp_and_offset() == (NOW + 19000, 38)
    log.set_config(LogConfig(segment_bytes=2000, retention_ms=10_000))
    deleted = log.apply_retention(NOW + 25_000)
    assert deleted > 0
    assert log.log_start_offset > 0
    for base in log.segment_base_offsets[:-1]:
        assert base >= log.log_start_offset or base == log.segment_base_offsets[0]


def test_truncate_and_delete_records(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1500)
    for _ in range(10):
        log.append(batch(3, size=100), 0, None, NOW)
    log.truncate_to(12)
    assert log.log_end_offset == 12
    assert log.append(batch(1), 0, None, NOW).first_offset == 12
    assert log.delete_records_before(6) == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 1000)
    log.close()
    assert open_log(tmp_path / "t-0").log_start_offset == 6


def test_sendfile_to_loopback_socket(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for _ in range(50):
        log.append(batch(50, size=200), 0, None, NOW)
    sl = log.read(0, 1 << 30)
    assert sl is not None
    expected = sl.read_bytes()
    server = socket.create_server(("127.0.0.1", 0))
    received = bytearray()

    def reader() -> None:
        conn, _ = server.accept()
        with conn:
            while len(received) < len(expected):
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                received.extend(chunk)

    thread = threading.Thread(target=reader)
    thread.start()
    with socket.create_connection(server.getsockname()) as client:
        client.setblocking(False)
        sent = 0
        while sent < len(expected):
            n = sl.sendfile(client.fileno(), sent, len(expected) - sent)
            if n is None:
                import select

                select.select([], [client], [], 5)
                continue
            sent += n
    thread.join(10)
    server.close()
    assert bytes(received) == expected


def test_io_errors_keep_errno() -> None:
    with pytest.raises(OSError) as info:
        _kbroker.sendfile(-1, -1, 0, 10)
    assert info.value.errno is not None
