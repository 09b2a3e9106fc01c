"""Dump a segment file batch by batch, as kafka-dump-log does."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from pathlib import Path

from kbroker._kbroker import KBrokerError, check_stored_batches, decode_records

_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_LOG_OVERHEAD = 12
_HEADER = 61


def dump_segment(path: Path, print_data: bool, max_decompressed: int) -> Iterator[tuple[str, bool]]:
    """Yields (line, ok): one line per batch (and per record with print_data).

    Stops at the first invalid batch with ok=False, naming the position: what
    recovery would cut off there.
    """
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            position = 0
            while position < size:
                if size - position < _HEADER:
                    yield f"position: {position} torn batch header ({size - position} bytes)", False
                    return
                (length,) = struct.unpack_from(">i", data, position + 8)
                total = length + _LOG_OVERHEAD
                if length < _HEADER - _LOG_OVERHEAD or position + total > size:
                    yield f"position: {position} invalid batch length {length}", False
                    return
                raw = data[position : position + total]
                try:
                    [info] = check_stored_batches(raw, max_decompressed)
                except KBrokerError as exc:
                    yield f"position: {position} invalid batch: {exc}", False
                    return
                last = info.base_offset + info.last_offset_delta
                yield (
                    (
                        f"baseOffset: {info.base_offset} lastOffset: {last}"
                        f" count: {info.records} position: {position} size: {info.size}"
                        f" maxTimestamp: {info.max_timestamp}"
                        f" producerId: {info.producer_id} producerEpoch: {info.producer_epoch}"
                        f" baseSequence: {info.base_sequence}"
                        f" isTransactional: {info.is_transactional}"
                        f" isControl: {info.is_control} compresscodec: {_CODECS[info.codec]}"
                        " crc: valid"
                    ),
                    True,
                )
                if print_data:
                    for offset, ts, key, value, headers in decode_records(raw, max_decompressed):
                        rendered = ",".join(f"{k}:{v!r}" for k, v in headers)
                        yield (
                            (
                                f"| offset: {offset} timestamp: {ts}"
                                f" key: {key!r} value: {value!r} headers: [{rendered}]"
                            ),
                            True,
                        )
                position += total
