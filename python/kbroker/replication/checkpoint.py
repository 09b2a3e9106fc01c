"""The high-watermark checkpoint: ``replication-offset-checkpoint`` in the data directory.

Each partition's high watermark, written every
``replica.high.watermark.checkpoint.interval.ms`` and at shutdown, read at
start: a restarted replica starts from the high watermark it last knew
rather than from its log end (records above it may not be committed) or from
zero. The format is Kafka's: a version line (0), a count line, then one
``topic partition offset`` line per partition, written atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from kbroker.log import TopicPartition
from kbroker.metadata.store import write_atomically

log = logging.getLogger(__name__)

HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
VERSION = 0


def read_high_watermarks(data_dir: Path) -> dict[TopicPartition, int]:
    """The checkpointed high watermarks; empty (with a warning) when the file is damaged."""
    path = data_dir / HIGH_WATERMARK_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s unreadable (%s): high watermarks start at the log starts", path, exc)
        return {}
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1])
        entries = lines[2:]
        if count != len(entries):
            raise ValueError(f"{count} entries announced, {len(entries)} found")
        result = {}
        for line in entries:
            topic, partition, offset = line.split(" ")
            result[TopicPartition(topic, int(partition))] = int(offset)
        return result
    except (ValueError, IndexError) as exc:
        log.warning("%s damaged (%s): high watermarks start at the log starts", path, exc)
        return {}


def write_high_watermarks(data_dir: Path, hws: Mapping[TopicPartition, int]) -> None:
    """Replaces the checkpoint with ``hws`` (atomically, fsync'ed)."""
    lines = [f"{VERSION}\n", f"{len(hws)}\n"]
    lines.extend(f"{tp.topic} {tp.partition} {hw}\n" for tp, hw in sorted(hws.items()))
    write_atomically(data_dir / HIGH_WATERMARK_FILE, lines)
