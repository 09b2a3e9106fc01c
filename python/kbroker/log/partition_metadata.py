"""``partition.metadata``: the file by which a partition directory names its topic.

Kafka writes it in every partition directory (``version: 0`` and
``topic_id: <base64 id>``) so that a directory identifies the topic it
belongs to even when the cluster metadata is lost or the name is reused by
a newer topic. kbroker writes the same file, in the same format.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

PARTITION_METADATA_FILE = "partition.metadata"


class PartitionMetadataError(ValueError):
    """The file exists but does not hold a topic id."""


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a topic id: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte id")
    return uuid.UUID(bytes=raw)


def write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID) -> None:
    """Writes the file atomically (temp file and rename; no fsync: it is rebuilt when lost)."""
    path = partition_dir / PARTITION_METADATA_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n", encoding="utf-8")
    os.replace(tmp, path)


def read_partition_metadata(partition_dir: Path) -> uuid.UUID | None:
    """The topic id the directory records; None when it has no file."""
    path = partition_dir / PARTITION_METADATA_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        fields = {}
        for line in raw.decode("utf-8").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields.get("version") != "0":
            raise ValueError(f"unknown version {fields.get('version')!r}")
        return decode_topic_id(fields["topic_id"])
    except (UnicodeDecodeError, ValueError, KeyError) as exc:
        raise PartitionMetadataError(f"{path}: not a valid partition.metadata ({exc})") from None
