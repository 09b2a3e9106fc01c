"""compression.type: the codec a topic's batches are stored with.

As in Kafka, ``producer`` keeps each batch as the producer compressed it;
``uncompressed``, ``gzip``, ``snappy``, ``lz4`` or ``zstd`` store every batch
with that codec, recompressing (in Rust, the GIL released) only the batches
that came with another one.
"""

from __future__ import annotations

from collections.abc import Sequence

from kbroker._kbroker import BatchInfo, recompress_batches

# compression.type -> the codec id of a batch's attributes
CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Decompressed size bound of one batch while recompressing (as validation's).
MAX_DECOMPRESSED_BYTES = 256 << 20


def recompress_for_topic(
    data: bytes | memoryview,
    infos: Sequence[BatchInfo],
    compression_type: str,
    max_batch_bytes: int,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> bytes | memoryview:
    """The bytes to store for validated batches ``data`` (``infos`` from validate_batches)
    on a topic with this ``compression.type``.

    ``data`` itself, never copied, for ``producer`` or when every batch is in
    the topic's codec already; otherwise new bytes, each batch in the topic's
    codec with a new CRC (offsets, timestamps, producer fields and the
    records unchanged). RecordTooLargeError when a rewritten batch is larger
    than ``max_batch_bytes`` (max.message.bytes), CorruptRecordError when a
    batch cannot be decompressed within ``max_decompressed_bytes``.
    """
    if compression_type == "producer":
        return data
    codec = CODECS[compression_type]
    if all(info.codec == codec for info in infos):
        return data
    return recompress_batches(data, codec, max_decompressed_bytes, max_batch_bytes)
