"""The internal topic ``__transaction_state`` as the transaction coordinator's durable store.

`TxnLogStore` owns the topic's I/O: creating it (compacted, uncompressed,
unclean election off, ``transaction.state.log.num.partitions`` partitions,
``transaction.state.log.replication.factor`` replicas and
``transaction.state.log.min.isr`` in a cluster, one replica and a min.isr of
one on a single node), appending one transactional id's record with acks=all,
and reading a partition back from its start when it is loaded. What the
records mean is `kbroker.txn.log`'s; what the coordinator makes of a failed
write is the state manager's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from kbroker._kbroker import build_batch, decode_records
from kbroker.config import as_int
from kbroker.futures import then
from kbroker.log import TopicPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.batch_reader import CONTROL, read_whole_batches
from kbroker.replication.replica_manager import AppendResult
from kbroker.replication.txn import AppendOrigin
from kbroker.txn.log import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from kbroker.txn.host import TxnHost

log = logging.getLogger(__name__)

_MAX_DECOMPRESSED = 256 << 20

Record = tuple[bytes, bytes | None]


class TxnLogStore:
    def __init__(self, host: TxnHost) -> None:
        self.host = host

    def partition_count(self) -> int | None:
        """Partitions of the topic, or None while it does not exist."""
        topic = self.host.metadata_cache.topic(TRANSACTION_STATE_TOPIC)
        return None if topic is None else len(topic.partitions)

    def create(self) -> int:
        """Creates the topic (the first transactional request); returns its partition count.

        Raises TopicError; in a cluster always (LEADER_NOT_AVAILABLE: being created by
        the controller), or INVALID_REPLICATION_FACTOR while fewer brokers are alive than
        it needs."""
        config = self.host.config
        partitions = as_int(config["transaction.state.log.num.partitions"])
        replication = as_int(config["transaction.state.log.replication.factor"])
        if not self.host.in_cluster:
            replication = 1  # a single node: the only replica there can be
        self.host.create_topic(
            TRANSACTION_STATE_TOPIC, partitions, replication, self.topic_configs(), internal=True
        )
        return partitions

    def topic_configs(self) -> dict[str, str]:
        """The topic-level settings ``__transaction_state`` is created with (Kafka's)."""
        config = self.host.config
        min_isr = as_int(config["transaction.state.log.min.isr"])
        if not self.host.in_cluster:
            # One replica: a larger min.isr would refuse every write.
            min_isr = 1
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(min_isr),
            "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
        }

    # -- writes ------------------------------------------------------------------

    def append(
        self, index: int, key: bytes, value: bytes | None, now_ms: int, timeout_ms: int
    ) -> asyncio.Future[ErrorCode]:
        """Appends one record to partition ``index``.

        The batch reaches the log before this returns, so writes keep the order they
        were made in; the future is done once the in-sync replicas have it (acks=all,
        at most ``timeout_ms``), with NONE or the replica manager's error."""
        return self.append_many(index, [(key, value)], now_ms, timeout_ms)

    def append_many(
        self, index: int, records: list[Record], now_ms: int, timeout_ms: int
    ) -> asyncio.Future[ErrorCode]:
        """`append` of several records, as one batch (all or none)."""
        no_headers: list[tuple[str, bytes | None]] = []
        entries: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
            (key, value, no_headers) for key, value in records
        ]
        batch = build_batch(entries, 0, 0, now_ms)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, index)
        write = self.host.replica_manager.append_records(
            {tp: batch}, -1, timeout_ms, origin=AppendOrigin.COORDINATOR
        )

        def outcome(results: Mapping[TopicPartition, AppendResult]) -> ErrorCode:
            result = results[tp]
            if result.error not in (
                ErrorCode.NONE,
                ErrorCode.KAFKA_STORAGE_ERROR,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ):
                # (Storage errors are logged by the replica manager.)
                log.warning("append to %s failed: %s", tp, result.message or result.error.name)
            return result.error

        return then(write, outcome)

    # -- reads -------------------------------------------------------------------

    def is_empty(self, index: int) -> bool:
        """Nothing to read back in partition ``index`` (or it is not on this broker)."""
        partition = self.host.replica_manager.get_partition(
            TopicPartition(TRANSACTION_STATE_TOPIC, index)
        )
        return partition is None or partition.log.log_start_offset >= partition.log.log_end_offset

    async def read_partition(self, index: int) -> AsyncIterator[list[Record]]:
        """Yields the keyed records of one partition, oldest first, a chunk at a time, to
        the log end (a new leader's high watermark may lag behind writes its predecessor
        had acknowledged, as Kafka loads)."""
        partition = self.host.replica_manager.get_partition(
            TopicPartition(TRANSACTION_STATE_TOPIC, index)
        )
        if partition is None:
            return
        buffer = as_int(self.host.config["transaction.state.log.load.buffer.size"])
        for batches in read_whole_batches(partition, partition.log.log_end_offset, buffer):
            yield [
                (key, value)
                for batch in batches
                if not batch.attributes & CONTROL
                for _off, _ts, key, value, _headers in decode_records(batch.data, _MAX_DECOMPRESSED)
                if key is not None
            ]
