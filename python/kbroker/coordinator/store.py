"""The internal topic ``__consumer_offsets`` as the coordinator's durable store.

`OffsetsStore` owns the topic's I/O: creating it (compacted, with
``offsets.topic.num.partitions`` partitions, and ``offsets.topic.replication.factor``
replicas in a cluster, one on a single node), appending keyed
records to one partition (a commit is one batch: all its offsets or none),
and reading a partition back from its start at load time. What the records
mean is the coordinator's business (see `records`); how a storage failure
is answered by the group APIs is here (`api_error`).

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
from typing import TYPE_CHECKING, TypeVar

from kbroker._kbroker import OffsetOutOfRangeError, build_batch, decode_records
from kbroker.config import as_int
from kbroker.coordinator.records import OFFSETS_TOPIC
from kbroker.futures import then
from kbroker.log import TopicPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.replica_manager import AppendResult

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost

log = logging.getLogger(__name__)

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
_BATCH_HEAD = struct.Struct(">qiibIhi")
_BATCH_HEADER_SIZE = 61
_LOG_OVERHEAD = 12
_CONTROL = 0x20
_MAX_DECOMPRESSED = 256 << 20

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


def api_error(code: ErrorCode, mapping: Mapping[ErrorCode, ErrorCode]) -> ErrorCode:
    """A storage failure as a group API answers it (``mapping``: GROUP_ or OFFSET_ERRORS)."""
    if code == ErrorCode.NONE:
        return code
    return mapping.get(code, ErrorCode.COORDINATOR_NOT_AVAILABLE)


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
        if not records:
            return answered(ErrorCode.NONE)
        no_headers: list[tuple[str, bytes | None]] = []
        batch: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
            (key, value, no_headers) for key, value in records
        ]
        tp = TopicPartition(OFFSETS_TOPIC, index)
        write = self.broker.replica_manager.append_records(
            {tp: build_batch(batch, 0, 0, now_ms)},
            -1,
            self.broker.config.get_int("offsets.commit.timeout.ms"),
        )

        def outcome(results: Mapping[TopicPartition, AppendResult]) -> ErrorCode:
            result = results[tp]
            if result.error not in (ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR):
                # (Storage errors are logged by the replica manager.)
                log.warning("append to %s failed: %s", tp, result.message or result.error.name)
            return result.error

        return then(write, outcome)

    # -- reads ---------------------------------------------------------------------

    def is_empty(self, index: int) -> bool:
        """Nothing to read back in partition ``index`` (or it is not on this broker)."""
        partition = self.broker.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC, index))
        return partition is None or partition.log.log_start_offset >= partition.log.log_end_offset

    async def read_partition(self, index: int) -> AsyncIterator[list[Record]]:
        """Yields the keyed records of one partition, oldest first, a chunk at a time."""
        partition = self.broker.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC, index))
        if partition is None:
            return
        buffer = as_int(self.broker.config["offsets.load.buffer.size"])
        offset = partition.log.log_start_offset
        # To the log end, as Kafka loads: a new leader's high watermark may still lag
        # behind commits its predecessor acknowledged.
        end = partition.log.log_end_offset
        while offset < end:
            try:
                chunk = partition.read(offset, buffer, True, end)
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
            records: list[Record] = []
            pos = 0
            while len(data) - pos >= _BATCH_HEADER_SIZE:
                base, length, _epoch, _magic, _crc, attributes, last_delta = (
                    _BATCH_HEAD.unpack_from(data, pos)
                )
                total = length + _LOG_OVERHEAD
                if pos + total > len(data):
                    break
                if not attributes & _CONTROL:
                    for _off, _ts, key, value, _headers in decode_records(
                        data[pos : pos + total], _MAX_DECOMPRESSED
                    ):
                        if key is not None:
                            records.append((key, value))
                offset = base + last_delta + 1
                pos += total
            if pos == 0:
                log.error(
                    "cannot read %s-%d at offset %d: stopping the load",
                    OFFSETS_TOPIC,
                    index,
                    offset,
                )
                return
            yield records
