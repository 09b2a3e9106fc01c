"""One partition as the broker serves it: its log, leadership and high watermark.

`Partition` owns the partition's state that changes with writes: the high
watermark (the offset below which every in-sync replica has the data;
consumers never see past it) and the idempotent producer state. Leadership
(leader, epoch, ISR) comes from the metadata; the replica manager changes it
with `become_leader` / `become_follower`. Whenever the high watermark or the
log end moves, ``on_progress(tp)`` tells the replica manager, which wakes
the requests waiting on this partition.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kbroker._kbroker import AppendInfo, BatchInfo, LogSlice
from kbroker.errors import ErrorCode, PartitionError
from kbroker.log import Log, TopicPartition
from kbroker.metadata_types import PartitionState
from kbroker.replication.producer_state import ProducerStateManager

log = logging.getLogger(__name__)

# baseOffset, batchLength, leaderEpoch, magic, crc, attributes, lastOffsetDelta,
# firstTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhi")
_LOG_OVERHEAD = 12
_SCAN_CHUNK = 8 << 20


@dataclass(slots=True)
class ProduceResult:
    base_offset: int
    log_append_time: int
    log_start_offset: int
    # The offset after the last record appended (or found duplicate).
    end_offset: int


class Partition:
    def __init__(self, log_: Log, state: PartitionState, broker_id: int, new: bool = False) -> None:
        """``new``: the log was just created, so there is no producer state to rebuild."""
        self.log = log_
        self.tp = log_.tp
        self.state = state
        self.broker_id = broker_id
        # Alone in the ISR, everything in the log is committed.
        self.high_watermark = log_.log_end_offset
        self.producers = ProducerStateManager()
        self.on_progress: Callable[[TopicPartition], None] | None = None
        if not new:
            self._rebuild_producer_state()

    # -- leadership ----------------------------------------------------------

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    def become_leader(self, state: PartitionState) -> None:
        """This broker leads from ``state.leader_epoch`` on."""
        self.state = state
        self._maybe_advance_high_watermark()

    def become_follower(self, state: PartitionState) -> None:
        """Another broker leads; this one stops answering reads and writes."""
        self.state = state

    def check_enough_replicas_reached(
        self, required_offset: int, min_insync_replicas: int
    ) -> tuple[bool, ErrorCode]:
        """acks=all: (done, error) for records ending at ``required_offset``."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.state.isr) < min_insync_replicas:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fences requests from clients with a different view of leadership (KIP-320)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.state.leader_epoch:
            return
        if current_leader_epoch < self.state.leader_epoch:
            raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH)
        raise PartitionError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # -- writes ----------------------------------------------------------------

    def append_as_leader(
        self,
        batches: bytes | memoryview,
        infos: list[BatchInfo],
        required_acks: int,
        min_insync_replicas: int,
        log_append_time: bool,
    ) -> ProduceResult:
        """Appends validated batches (all or none), handling idempotent retries."""
        if not self.is_leader:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.state.isr) < min_insync_replicas:
            raise PartitionError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR of {len(self.state.isr)} is below min.insync.replicas={min_insync_replicas}",
            )
        idempotent = [i for i in infos if i.producer_id >= 0]
        if idempotent:
            if len(infos) != 1:
                raise PartitionError(
                    ErrorCode.INVALID_RECORD,
                    "an idempotent produce carries one batch per partition",
                )
            info = infos[0]
            duplicate = self.producers.check(
                info.producer_id,
                info.producer_epoch,
                info.base_sequence,
                info.last_offset_delta,
            )
            if duplicate is not None:
                return ProduceResult(
                    duplicate.first_offset,
                    -1,
                    self.log.log_start_offset,
                    duplicate.last_offset + 1,
                )
        appended: AppendInfo = self.log.append(batches, self.state.leader_epoch, log_append_time)
        if idempotent:
            info = infos[0]
            self.producers.update(
                info.producer_id,
                info.producer_epoch,
                info.base_sequence,
                info.last_offset_delta,
                appended.first_offset,
                appended.max_timestamp,  # the append time on LogAppendTime topics
            )
        self._maybe_advance_high_watermark()
        return ProduceResult(
            appended.first_offset,
            appended.log_append_time,
            self.log.log_start_offset,
            appended.last_offset + 1,
        )

    def _maybe_advance_high_watermark(self) -> None:
        # With this broker as the only in-sync replica, the HW is the log end.
        # Followers in the ISR (the cluster issue) will hold it back.
        if len(self.state.isr) <= 1:
            new_hw = self.log.log_end_offset
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
                if self.on_progress is not None:
                    self.on_progress(self.tp)

    # -- reads ---------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, min_one_batch: bool, upper_bound: int | None = None
    ) -> LogSlice | None:
        """Reads whole batches from ``offset``, never past ``upper_bound`` (default: the HW).

        Raises OffsetOutOfRangeError outside [log start, log end].
        """
        bound = self.high_watermark if upper_bound is None else upper_bound
        if bound <= offset <= self.log.log_end_offset:
            return None
        return self.log.read(offset, max_bytes, bound, min_one_batch)

    @property
    def last_stable_offset(self) -> int:
        # No transactions yet: everything committed is stable.
        return self.high_watermark

    # -- maintenance -------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: offset -1 means the high watermark."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
        return self.log.delete_records_before(offset)

    def close(self) -> None:
        try:
            self.producers.write_snapshot(self.log.dir, self.log.log_end_offset)
        except OSError as exc:
            log.warning("could not save producer state of %s: %s", self.tp, exc)

    def _rebuild_producer_state(self) -> None:
        start = self.producers.load_snapshot(self.log.dir, self.log.log_end_offset)
        start = max(start, self.log.log_start_offset)
        self.producers.rebuild(self._scan_batch_headers(start))

    def _scan_batch_headers(self, offset: int) -> Iterator[tuple[int, int, int, int, int, int]]:
        """Header facts of every batch from ``offset`` to the log end."""
        end = self.log.log_end_offset
        while offset < end:
            chunk = self.log.read(offset, _SCAN_CHUNK, None, True)
            if chunk is None:
                return
            data = chunk.read_bytes()
            pos = 0
            while pos + _BATCH_HEADER.size <= len(data):
                (base, length, _e, _m, _c, _a, delta, _ft, max_ts, pid, epoch, seq) = (
                    _BATCH_HEADER.unpack_from(data, pos)
                )
                if base + delta >= offset:
                    yield pid, epoch, seq, delta, base, max_ts
                offset = base + delta + 1
                pos += length + _LOG_OVERHEAD
            if pos == 0:
                return
