"""The record batches a replica holds on disk, read straight from its segment files.

To compare replicas byte for byte: a partition's folder (``<topic>-<partition>`` in a
broker's data directory) holds segment files named by their base offset (20 digits,
``.log``), each a run of record batches v2: baseOffset int64, batchLength int32, then
batchLength bytes (partitionLeaderEpoch int32, magic int8, crc uint32, attributes
int16, lastOffsetDelta int32, ...). A batch here is all of it, from baseOffset on, so
the partition leader epoch and the CRC are compared too. Both Kafka and kbroker use
this layout; a torn tail (a crash in the middle of an append) ends the reading.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
# baseOffset, batchLength: the batch's first 12 bytes; batchLength counts what follows.
LOG_OVERHEAD = struct.Struct(">qi")
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta.
BATCH_FIELDS = struct.Struct(">ibIhi")
MAGIC_V2 = 2


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes  # the whole batch, baseOffset included

    def describe(self) -> str:
        return (
            f"batch {self.base_offset}..{self.last_offset} (leader epoch {self.leader_epoch}, "
            f"{len(self.data)} bytes)"
        )


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


def segment_files(folder: Path) -> list[Path]:
    """The partition's segment files in offset order."""
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := SEGMENT_NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def read_segment(path: Path) -> Iterator[Batch]:
    """The whole batches of one segment file, stopping at a torn or zeroed tail."""
    data = path.read_bytes()
    pos = 0
    while pos + LOG_OVERHEAD.size + BATCH_FIELDS.size <= len(data):
        base_offset, length = LOG_OVERHEAD.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD.size + length
        if length < BATCH_FIELDS.size or end > len(data):
            return
        epoch, magic, _crc, _attributes, last_delta = BATCH_FIELDS.unpack_from(
            data, pos + LOG_OVERHEAD.size
        )
        if magic != MAGIC_V2:
            raise ValueError(f"{path}: batch at byte {pos} has magic {magic}, not 2")
        yield Batch(base_offset, base_offset + last_delta, epoch, data[pos:end])
        pos = end


def read_batches(folder: Path) -> list[Batch]:
    """Every whole batch of the partition, in offset order."""
    return [b for seg in segment_files(folder) for b in read_segment(seg)]


def batches_below(data_dir: Path, topic: str, partition: int, offset: int) -> list[Batch]:
    """The batches of a replica that lie wholly below ``offset`` (the high watermark)."""
    return [
        b for b in read_batches(partition_dir(data_dir, topic, partition)) if b.last_offset < offset
    ]


def differences(
    data_dirs: Mapping[int, Path], topic: str, partition: int, high_watermark: int
) -> list[str]:
    """What differs between the replicas (broker id -> data directory) below the high
    watermark, in words; empty when every replica holds the same batches, byte for byte,
    and together they cover every offset from the first batch's up to the watermark."""
    found = {
        broker: batches_below(d, topic, partition, high_watermark)
        for broker, d in sorted(data_dirs.items())
    }
    problems: list[str] = []
    for broker, batches in found.items():
        problems += [f"broker {broker}: {p}" for p in _coverage(batches, high_watermark)]
    reference_id, reference = next(iter(found.items()))
    for broker, batches in found.items():
        if broker == reference_id:
            continue
        for i, (a, b) in enumerate(zip(reference, batches, strict=False)):
            if a.data != b.data:
                problems.append(
                    f"batch #{i}: broker {reference_id} has {a.describe()}, "
                    f"broker {broker} has {b.describe()}"
                    + (", same offsets, other bytes" if a.base_offset == b.base_offset else "")
                )
                break
        if len(reference) != len(batches):
            problems.append(
                f"broker {reference_id} holds {len(reference)} batches below "
                f"{high_watermark}, broker {broker} {len(batches)}"
            )
    return problems


def _coverage(batches: Iterable[Batch], high_watermark: int) -> list[str]:
    problems = []
    expected: int | None = None
    last = -1
    for b in batches:
        if expected is not None and b.base_offset != expected:
            problems.append(f"gap or overlap: {b.describe()} follows offset {expected - 1}")
        expected = b.last_offset + 1
        last = b.last_offset
    if high_watermark > 0 and last != high_watermark - 1:
        problems.append(f"batches end at offset {last}, the high watermark is {high_watermark}")
    return problems
