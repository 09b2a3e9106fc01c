"""The answer to a batch whose records break a rule of their topic, in Kafka's words.

The storage core names each refused record (``RecordErrorsError``: its index in the
batch, and for a timestamp out of range its offset and timestamp); this module turns
them into what a Produce v8+ answer carries: the error code (INVALID_TIMESTAMP when any
timestamp is refused, else INVALID_RECORD), one ``(batch index, message)`` per refused
record, and the partition's error message, worded as Kafka 3.9 words them so that
clients and people reading their logs see the same text from either broker. The whole
batch is refused: nothing of it is appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kbroker.errors import ErrorCode
from kbroker.log import TopicPartition

# (batch index, offset, timestamp): offset and timestamp are None for a missing key.
RefusedRecord = tuple[int, int | None, int | None]

_INVALID_TIMESTAMP = "One or more records have been rejected due to invalid timestamp"
_SHOWN = 3


@dataclass(frozen=True, slots=True)
class RecordErrors:
    error: ErrorCode
    message: str
    records: tuple[tuple[int, str], ...]


def _java_long(value: int) -> int:
    """``value`` wrapped to a signed 64-bit integer, as Kafka's arithmetic on longs
    (the window's bounds it prints overflow when a bound is unlimited)."""
    return (value + 2**63) % 2**64 - 2**63


def record_errors(
    tp: TopicPartition,
    refused: Sequence[RefusedRecord],
    window: tuple[int, int, int] | None,
) -> RecordErrors:
    """The answer for ``refused`` records of a batch appended to ``tp``; ``window`` is the
    (now, before max ms, after max ms) the timestamps were checked against."""
    records: list[tuple[int, str]] = []
    any_timestamp = False
    for index, offset, timestamp in refused:
        if offset is None or timestamp is None or window is None:
            text = (
                "Compacted topic cannot accept message without key in topic partition "
                f"{tp.topic}-{tp.partition}"
            )
        else:
            any_timestamp = True
            now, before, after = window
            text = (
                f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                f"The timestamp should be within [{_java_long(now - before)}, "
                f"{_java_long(now + after)}]"
            )
        records.append((index, text))
    if any_timestamp:
        return RecordErrors(ErrorCode.INVALID_TIMESTAMP, _INVALID_TIMESTAMP, tuple(records))
    shown = ", ".join(
        f"RecordError(batchIndex={index}, message='{text}')" for index, text in records[:_SHOWN]
    )
    message = (
        f"One or more records have been rejected due to {len(records)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]"
    )
    return RecordErrors(ErrorCode.INVALID_RECORD, message, tuple(records))
