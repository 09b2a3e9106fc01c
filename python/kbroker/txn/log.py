"""The records of ``__transaction_state``: keys, values, and which partition an id uses.

Owns the on-disk form of a transactional id's state, Kafka's own
(TransactionLogKey / TransactionLogValue: a big-endian int16 schema version,
then the fields), so that a Kafka broker reads what kbroker wrote and the
reverse:

  key   v0  (transactional id)
  value v0  (producer id, epoch, timeout, state id, partitions by topic,
             last update and start timestamps); v1 is the same, flexible

kbroker writes key v0 and value v0, as Kafka 3.9 does (it writes v1 only once
the transaction.version feature is 1 or more, which no 3.9 cluster has), and
reads both values; a newer value version only adds tagged fields (KIP-915)
and is read with the v1 layout. The partitions are null in the Empty state.
A null value (a tombstone) is an expired id. The previous producer id and
epoch are not stored: a loaded id has none.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from kbroker.coordinator.records import partition_for
from kbroker.log import TopicPartition
from kbroker.protocol.codec import Codec
from kbroker.protocol.errors import ProtocolDecodeError
from kbroker.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, F, message
from kbroker.txn.state import TransactionMetadata, TxnState, TxnTransit

TRANSACTION_STATE_TOPIC = "__transaction_state"

_VERSION = struct.Struct(">h")

TransactionLogKey = message("TransactionLogKey", F("transactional_id", STRING))

TransactionLogValue = message(
    "TransactionLogValue",
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("transaction_timeout_ms", INT32),
    F("transaction_status", INT8),
    F(
        "transaction_partitions",
        Array(
            message(
                "PartitionsSchema",
                F("topic", STRING),
                F("partition_ids", Array(INT32)),
            )
        ),
        nullable="0+",
    ),
    F("transaction_last_update_timestamp_ms", INT64),
    F("transaction_start_timestamp_ms", INT64),
)

KEY_VERSION = 0
VALUE_VERSION = 0
_FLEXIBLE_VALUE_VERSION = 1

_KEY = Codec(TransactionLogKey, 0, flexible=False)
_VALUES = {
    0: Codec(TransactionLogValue, 0, flexible=False),
    1: Codec(TransactionLogValue, 1, flexible=True),
}


class TxnRecordError(ValueError):
    """A ``__transaction_state`` record kbroker cannot read."""


def partition_of(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of an id: Kafka's ``abs(hashCode) % n``."""
    return partition_for(transactional_id, partitions)


# -- encoding -------------------------------------------------------------------------


def key_bytes(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + _KEY.encode(TransactionLogKey(transactional_id))


def value_bytes(transit: TxnTransit) -> bytes:
    """The value recording ``transit`` (Kafka's valueToBytes, at version 0)."""
    if transit.state == TxnState.EMPTY and transit.partitions:
        raise ValueError(f"an Empty transaction with partitions: {transit}")
    partitions: list[Any] | None = None
    if transit.state != TxnState.EMPTY:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in sorted(transit.partitions):
            by_topic[tp.topic].append(tp.partition)
        partitions = [
            TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=ids)
            for topic, ids in by_topic.items()
        ]
    value = TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=int(transit.state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp,
    )
    return _VERSION.pack(VALUE_VERSION) + _VALUES[VALUE_VERSION].encode(value)


# -- decoding -------------------------------------------------------------------------


def _split(data: bytes | memoryview) -> tuple[int, memoryview]:
    if len(data) < 2:
        raise TxnRecordError("record shorter than its schema version")
    (version,) = _VERSION.unpack_from(data, 0)
    return version, memoryview(data)[2:]


@dataclass(frozen=True, slots=True)
class TxnKey:
    transactional_id: str


def parse_key(data: bytes | memoryview) -> TxnKey:
    """The key of a record; TxnRecordError for another version (Kafka skips those)."""
    version, body = _split(data)
    if version != KEY_VERSION:
        raise TxnRecordError(f"unknown key version {version}")
    try:
        return TxnKey(_KEY.decode(body).transactional_id)
    except ProtocolDecodeError as exc:
        raise TxnRecordError(f"bad key: {exc}") from None


def parse_value(transactional_id: str, data: bytes | memoryview) -> TransactionMetadata:
    """The metadata a (non-null) value records, as loaded (no previous producer)."""
    version, body = _split(data)
    if version < 0:
        raise TxnRecordError(f"unknown value version {version}")
    codec = _VALUES.get(version) or _VALUES[_FLEXIBLE_VALUE_VERSION]
    try:
        v = codec.decode(body)
    except ProtocolDecodeError as exc:
        raise TxnRecordError(f"bad value v{version}: {exc}") from None
    try:
        state = TxnState(v.transaction_status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction state {v.transaction_status}") from None
    metadata = TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        txn_timeout_ms=v.transaction_timeout_ms,
        state=state,
        txn_start_timestamp=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp=v.transaction_last_update_timestamp_ms,
    )
    if state != TxnState.EMPTY and v.transaction_partitions is not None:
        for topic in v.transaction_partitions:
            metadata.partitions.update(TopicPartition(topic.topic, p) for p in topic.partition_ids)
    return metadata
