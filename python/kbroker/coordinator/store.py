"""The internal topic ``__consumer_offsets`` as the coordinator's durable store.

`OffsetsStore` owns the topic's I/O: creating it (compacted, with
``offsets.topic.num.partitions`` partitions, and ``offsets.topic.replication.factor``
replicas in a cluster, one on a single node), appending keyed
records to one partition (a commit is one batch: all its offsets or none;
a transactional offset commit is a transactional batch of its producer),
and reading a partition back from its start at load time, batch by batch
(with each batch's offset, producer and transaction markers, which loading
replays). What the records mean is the coordinator's business (see
`records`); how a storage failure is answered by the group APIs is here
(`api_error`, `txn_offset_error`).

Writes are awaitable: the coordinator changes a group only once its record
is stored. `append` writes to the log at once, so writes reach it in the
order the coordinator made them, and the future it gives is done once the
write is committed.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kbroker._kbroker import build_batch, decode_records
from kbroker.config import as_int
from kbroker.coordinator.records import OFFSETS_TOPIC
from kbroker.futures import then
from kbroker.log import TopicPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.batch_reader import CONTROL, TRANSACTIONAL, read_whole_batches
from kbroker.replication.replica_manager import AppendResult
from kbroker.replication.txn import AppendOrigin

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost

log = logging.getLogger(__name__)

# producerId, at this position of a v2 batch header
_PRODUCER_ID = struct.Struct(">q")
_PRODUCER_ID_AT = 43
_MAX_DECOMPRESSED = 256 << 20
# A control record's key: version, type (0 ABORT, 1 COMMIT), as Kafka's ControlRecordType.
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_COMMIT = 1
_CONTROL_ABORT = 0
# The sequence Kafka's coordinators write in their transactional batches (a coordinator's
# append is not checked for sequence, only for the producer's epoch).
COORDINATOR_BASE_SEQUENCE = 0

Record = tuple[bytes, bytes | None]
T = TypeVar("T")

# Storage failures as the group APIs report them (Kafka's mapping).
GROUP_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
OFFSET_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


# A transactional offset commit's failures (Kafka's maybeConvertOffsetCommitError): the
# producer's own errors (a fenced epoch, a transaction in the wrong state) pass through.
TXN_OFFSET_ERRORS = {
    # A verification with the transaction coordinator that did not get through: retried
    # by every client without looking the coordinator up again.
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def api_error(code: ErrorCode, mapping: Mapping[ErrorCode, ErrorCode]) -> ErrorCode:
    """A storage failure as a group API answers it (``mapping``: GROUP_ or OFFSET_ERRORS)."""
    if code == ErrorCode.NONE:
        return code
    return mapping.get(code, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def txn_offset_error(code: ErrorCode) -> ErrorCode:
    """A failure of a transactional offset commit's write or verification, as answered."""
    return TXN_OFFSET_ERRORS.get(code, code)


@dataclass(frozen=True, slots=True)
class Stored:
    """The outcome of an append: NONE and where the batch starts, or the failure."""

    error: ErrorCode
    base_offset: int = -1


@dataclass(frozen=True, slots=True)
class TxnProducer:
    """The producer a transactional batch is written for (TxnOffsetCommit): with its
    transactional id, the partition verifies with the transaction coordinator that the
    offsets partition is in the producer's transaction before it opens it there (KIP-890)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch of the topic as loading replays it.

    ``marker`` is None for a data batch, else True for a transaction's COMMIT
    marker and False for its ABORT marker (of ``producer_id``).
    """

    base_offset: int
    producer_id: int
    transactional: bool
    marker: bool | None
    records: list[Record]


def answered(value: T) -> asyncio.Future[T]:
    """An answer known at once, as the future a write would give."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


class OffsetsStore:
    def __init__(self, broker: CoordinatorHost) -> None:
        self.broker = broker

    def partition_count(self) -> int | None:
        """Partitions of the topic, or None while it does not exist."""
        topic = self.broker.metadata_cache.topic(OFFSETS_TOPIC)
        return None if topic is None else len(topic.partitions)

    def create(self) -> int:
        """Creates the topic (first use of any group); returns its partition count."""
        config = self.broker.config
        partitions = as_int(config["offsets.topic.num.partitions"])
        replication = as_int(config["offsets.topic.replication.factor"])
        if not self.broker.in_cluster:
            replication = 1  # a single node: the only replica there can be
        # In a cluster, fewer live brokers than that is refused (INVALID_REPLICATION_FACTOR):
        # groups wait (COORDINATOR_NOT_AVAILABLE) until enough brokers are up, as in Kafka.
        self.broker.create_topic(
            OFFSETS_TOPIC, partitions, replication, self.topic_configs(), internal=True
        )
        return partitions

    def topic_configs(self) -> dict[str, str]:
        """The topic-level settings ``__consumer_offsets`` is created with."""
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"]),
        }

    # -- writes ------------------------------------------------------------------

    def append(self, index: int, records: list[Record], now_ms: int) -> asyncio.Future[ErrorCode]:
        """Appends ``records`` (key, value-or-tombstone) to partition ``index`` as one batch.

        The batch reaches the log before this returns, so writes keep the
        order they were made in; the future is done once the replicas have
        it (acks=all, at most ``offsets.commit.timeout.ms``), with NONE or
        the failure.
        """
        return then(self.append_batch(index, records, now_ms), lambda stored: stored.error)

    def append_batch(
        self,
        index: int,
        records: list[Record],
        now_ms: int,
        producer: TxnProducer | None = None,
    ) -> asyncio.Future[Stored]:
        """`append`, telling where the batch went; with ``producer``, the batch is a
        transactional batch of that producer (its epoch is checked by the partition)."""
        if not records:
            return answered(Stored(ErrorCode.NONE))
        no_headers: list[tuple[str, bytes | None]] = []
        batch: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
            (key, value, no_headers) for key, value in records
        ]
        if producer is None:
            data = build_batch(batch, 0, 0, now_ms)
        else:
            data = build_batch(
                batch,
                0,
                0,
                now_ms,
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                base_sequence=COORDINATOR_BASE_SEQUENCE,
                transactional=True,
            )
        tp = TopicPartition(OFFSETS_TOPIC, index)
        write = self.broker.replica_manager.append_records(
            {tp: data},
            -1,
            self.broker.config.get_int("offsets.commit.timeout.ms"),
            # A coordinator's write: its producer's epoch is checked, not its sequence.
            origin=AppendOrigin.COORDINATOR,
            transactional_id=None if producer is None else producer.transactional_id,
        )

        def outcome(results: Mapping[TopicPartition, AppendResult]) -> Stored:
            result = results[tp]
            if result.error not in (ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR):
                # (Storage errors are logged by the replica manager.)
                log.warning("append to %s failed: %s", tp, result.message or result.error.name)
            return Stored(result.error, result.base_offset)

        return then(write, outcome)

    # -- reads ---------------------------------------------------------------------

    def is_empty(self, index: int) -> bool:
        """Nothing to read back in partition ``index`` (or it is not on this broker)."""
        partition = self.broker.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC, index))
        return partition is None or partition.log.log_start_offset >= partition.log.log_end_offset

    def log_end_offset(self, index: int) -> int:
        """Where partition ``index``'s log ends now (0 when it is not on this broker)."""
        partition = self.broker.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC, index))
        return 0 if partition is None else partition.log.log_end_offset

    async def read_partition(self, index: int, end: int) -> AsyncIterator[list[StoredBatch]]:
        """Yields the batches of one partition before offset ``end``, oldest first, a chunk
        at a time. (Loading reads to the log end, as Kafka does: a new leader's high
        watermark may still lag behind commits its predecessor acknowledged.)"""
        partition = self.broker.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC, index))
        if partition is None:
            return
        buffer = as_int(self.broker.config["offsets.load.buffer.size"])
        for batches in read_whole_batches(partition, end, buffer):
            yield [_stored_batch(b.data, b.base_offset, b.attributes) for b in batches]


def _stored_batch(data: bytes, base_offset: int, attributes: int) -> StoredBatch:
    """One whole batch's records (keyed ones: the topic has no others), or its marker."""
    (producer_id,) = _PRODUCER_ID.unpack_from(data, _PRODUCER_ID_AT)
    transactional = bool(attributes & TRANSACTIONAL)
    decoded = decode_records(data, _MAX_DECOMPRESSED)
    if attributes & CONTROL:
        marker: bool | None = None
        for _off, _ts, key, _value, _headers in decoded:
            if key is not None and len(key) >= _CONTROL_KEY.size:
                _version, kind = _CONTROL_KEY.unpack_from(key, 0)
                if kind in (_CONTROL_COMMIT, _CONTROL_ABORT):
                    marker = kind == _CONTROL_COMMIT
        # A control batch of another kind (none exist on this topic) is left out.
        return StoredBatch(base_offset, producer_id, transactional, marker, [])
    records: list[Record] = [
        (key, value) for _off, _ts, key, value, _headers in decoded if key is not None
    ]
    return StoredBatch(base_offset, producer_id, transactional, None, records)
