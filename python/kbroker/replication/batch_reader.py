"""Reading a partition's whole batches from its log start, as the coordinators load
their internal topics (``__consumer_offsets``, ``__transaction_state``).

`read_whole_batches` yields a chunk of batches at a time, each as its base offset,
attributes and bytes, up to an end offset; a start moved by retention or cleaning
meanwhile is followed, and a chunk in which not even one batch can be read stops the
read (logged), since going on would skip what it holds.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import NamedTuple

from kbroker._kbroker import OffsetOutOfRangeError
from kbroker.replication.partition import Partition

log = logging.getLogger(__name__)

# A batch v2 header as far as the last offset delta: base offset, length, partition
# leader epoch, magic, CRC, attributes, last offset delta.
_BATCH_HEAD = struct.Struct(">qiibIhi")
_BATCH_HEADER_SIZE = 61
_LOG_OVERHEAD = 12  # base offset and length, in front of each batch

CONTROL = 0x20
TRANSACTIONAL = 0x10


class WholeBatch(NamedTuple):
    base_offset: int
    attributes: int
    data: bytes  # the whole batch, from its base offset on


def read_whole_batches(
    partition: Partition, end: int, buffer_bytes: int
) -> Iterator[list[WholeBatch]]:
    """The batches of ``partition`` below ``end``, oldest first, about ``buffer_bytes``
    at a time (at least one batch per chunk)."""
    offset = partition.log.log_start_offset
    while offset < end:
        try:
            chunk = partition.read(offset, buffer_bytes, True, end)
        except OffsetOutOfRangeError:
            # Retention or cleaning moved the start: carry on from there.
            start = partition.log.log_start_offset
            if start <= offset:
                raise
            offset = start
            continue
        if chunk is None:
            return
        data = chunk.read_bytes()
        batches: list[WholeBatch] = []
        pos = 0
        while len(data) - pos >= _BATCH_HEADER_SIZE:
            base, length, _epoch, _magic, _crc, attributes, last_delta = _BATCH_HEAD.unpack_from(
                data, pos
            )
            total = length + _LOG_OVERHEAD
            if pos + total > len(data):
                break
            batches.append(WholeBatch(base, attributes, data[pos : pos + total]))
            offset = base + last_delta + 1
            pos += total
        if pos == 0:
            log.error("cannot read %s at offset %d: stopping the load", partition.tp, offset)
            return
        yield batches
