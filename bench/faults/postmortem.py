"""Who wrote a duplicate: the producer id, epoch and sequence of each copy, read from the
brokers' copies of the topic that a run keeps (``nodes/bN-data``).

A value at two offsets is a duplicate either way, but the batch headers say whose doing
it was:

- ``same_sequence``: both copies carry the same producer id, epoch and sequence. The
  broker appended a retry it should have recognised: a broker bug.
- ``new_epoch``: the same producer id in a later epoch. The client gave the record a
  new sequence under a bumped epoch (librdkafka does this after an
  OUT_OF_ORDER_SEQUENCE_NUMBER for a request that was not the oldest in flight, KIP-360:
  records it had sent but not seen acknowledged go again), and no broker can tell the
  copy from a new record.
- ``new_producer``: another producer id (the harness replaced a producer after a fatal
  error and the record was sent again).
- ``resequenced``: the same id and epoch but another sequence.
- ``unknown``: a copy is in no kept batch (the data was not kept, or moved on).
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# baseOffset, length, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# firstTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence.
_HEADER = struct.Struct(">qiibIhiqqqhi")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
CLASSES = ("same_sequence", "new_epoch", "new_producer", "resequenced", "unknown")


@dataclass(frozen=True)
class Writer:
    producer_id: int
    epoch: int
    sequence: int  # of the record at the offset asked about


def batches(partition_dir: Path) -> list[tuple[int, int, int, int, int]]:
    """(base offset, last offset, producer id, epoch, base sequence) of every whole batch."""
    found = sorted(
        (int(m.group(1)), p) for p in partition_dir.iterdir() if (m := _SEGMENT.match(p.name))
    )
    out = []
    for _, path in found:
        data = path.read_bytes()
        pos = 0
        while pos + _HEADER.size <= len(data):
            base, length, _le, magic, _crc, _attrs, delta, _ft, _mt, pid, epoch, seq = (
                _HEADER.unpack_from(data, pos)
            )
            if magic != 2 or length < _HEADER.size - 12 or pos + 12 + length > len(data):
                break
            out.append((base, base + delta, pid, epoch, seq))
            pos += 12 + length
    return out


class KeptData:
    """The kept copies of a topic's partitions (``bN-data/<topic>-<p>``) under ``nodes``."""

    def __init__(self, nodes: Path, topic: str) -> None:
        self._dirs: dict[int, list[Path]] = {}
        for d in sorted(nodes.glob(f"*-data/{topic}-*")):
            self._dirs.setdefault(int(d.name.rpartition("-")[2]), []).append(d)
        self._cache: dict[Path, list[tuple[int, int, int, int, int]]] = {}

    def writer(self, partition: int, offset: int) -> Writer | None:
        """Who wrote the record at ``offset``, from the first copy that has it."""
        for d in self._dirs.get(partition, []):
            if d not in self._cache:
                self._cache[d] = batches(d)
            for base, last, pid, epoch, seq in self._cache[d]:
                if base <= offset <= last:
                    return Writer(pid, epoch, seq + (offset - base))
        return None


def classify(writers: list[Writer | None]) -> str:
    if any(w is None for w in writers):
        return "unknown"
    ws = [w for w in writers if w is not None]
    if len({w.producer_id for w in ws}) > 1:
        return "new_producer"
    if len({w.epoch for w in ws}) > 1:
        return "new_epoch"
    if len({w.sequence for w in ws}) > 1:
        return "resequenced"
    return "same_sequence"


def explain_duplicates(duplicates: list[dict[str, Any]], kept: KeptData) -> dict[str, Any]:
    """Counts of ``duplicates`` (the checker's entries) by class, with examples."""
    counts: Counter[str] = Counter()
    examples: dict[str, list[dict[str, Any]]] = {}
    for d in duplicates:
        writers = [kept.writer(int(p), int(o)) for p, o in d["positions"]]
        kind = classify(writers)
        counts[kind] += 1
        if len(examples.setdefault(kind, [])) < 10:
            examples[kind].append(
                {
                    **d,
                    "writers": [
                        None if w is None else [w.producer_id, w.epoch, w.sequence] for w in writers
                    ],
                }
            )
    return {"counts": {k: counts[k] for k in CLASSES}, "examples": examples}
