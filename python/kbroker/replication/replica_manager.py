"""The replica manager: owns the partitions this broker holds, and every read and write of them.

`ReplicaManager` is the one room through which records go in and out:

- `append_records` appends validated batches to partitions this broker leads
  (client produce requests, the group coordinator's offsets and the
  transaction coordinator's records all come here) and, with acks=all, waits
  in the produce purgatory until the in-sync replicas have the records or the
  request's timeout passes (`DelayedProduce`). A client's transactional batch
  that would open its producer's transaction on a partition is first verified
  with the transaction coordinator (KIP-890 part 1, through the `TxnVerifier`
  given to `set_txn_verifier`), and appended only if the coordinator has the
  partition in that transaction.
- `write_txn_markers` writes a transaction coordinator's COMMIT or ABORT
  marker to partitions this broker leads, acks=all; the marker listeners
  (`add_marker_listener`: the group coordinator) hear of each marker once it
  is replicated, and of each one a follower copies.
- `fetch_records` reads from partitions this broker leads, never past the
  high watermark (or, read_committed, the last stable offset, with the
  transactions aborted in what it read from the segments' `.txnindex`), and
  waits in the fetch purgatory for ``min_bytes`` (`DelayedFetch`).
- `delete_records` (DeleteRecords) moves the log start of partitions this
  broker leads and waits until their in-sync replicas have moved theirs
  (`DelayedDeleteRecords`).
- `make_leader` / `make_follower` are the leadership transitions; listeners
  (the group coordinator) hear of them. In a cluster the controller orders
  them: `become_leader_or_follower` applies its LeaderAndIsr and
  `stop_replicas` its StopReplica, each fenced by the controller's epoch and
  each partition's leader epoch. A follower's partitions go to the replica
  fetchers (`kbroker.replication.fetcher`); a leader counts its followers'
  fetches as their progress, and its ISR changes go to the controller
  (`kbroker.replication.alter_partition`). `shrink_isrs` runs periodically,
  and the high watermarks are checkpointed (`checkpoint_high_watermarks`).

Both purgatories are keyed by partition; a partition calls back when its
high watermark or log end moves, which wakes exactly the operations
watching it. Results are asyncio futures, done once every partition's write
(on the logs' I/O threads, see `kbroker.log.io_threads`) and any wait is over;
no request costs a task.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from kbroker._kbroker import (
    CorruptRecordError,
    InvalidRecordError,
    LogSlice,
    OffsetOutOfRangeError,
    RecordErrorsError,
    RecordTooLargeError,
    StaleLeaderEpochError,
    validate_batches,
)
from kbroker.config import TopicConfig
from kbroker.errors import ErrorCode, KafkaError, PartitionError
from kbroker.log import Log, LogManager, TopicPartition
from kbroker.log.compression import recompress_for_topic
from kbroker.log.io_threads import IoThreadsClosed
from kbroker.metadata.model import PartitionState
from kbroker.metrics.core import BrokerMetrics
from kbroker.replication.alter_partition import IsrChannel
from kbroker.replication.checkpoint import read_high_watermarks, write_high_watermarks
from kbroker.replication.fetcher import ReplicaFetcherManager
from kbroker.replication.partition import Partition, ProduceResult, monotonic_ms
from kbroker.replication.producer_state import VerificationGuard
from kbroker.replication.purgatory import DelayedOperation, Purgatory, Scheduler
from kbroker.replication.record_errors import record_errors
from kbroker.replication.txn import (
    AppendOrigin,
    MarkerListener,
    TxnMarker,
    TxnVerifier,
    coordinator_error_for_verification,
    produce_error_for_verification,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Decompressed size bound while validating one batch.
MAX_DECOMPRESSED_BYTES = 256 << 20

# A record batch's attributes (int16) at byte 21, then its lastOffsetDelta, timestamps,
# producer id (int64) at 43, producer epoch (int16) and base sequence (int32).
_ATTRIBUTES_AT = 21
_PRODUCER_AT = 43
_PRODUCER = struct.Struct(">qhi")
_TRANSACTIONAL = 0x10
_BATCH_HEADER_SIZE = 61


def first_batch_producer(data: bytes | memoryview) -> tuple[int, int, int, bool] | None:
    """(producer id, epoch, base sequence, transactional) from the header of the first
    batch in ``data`` (None when too short to hold one): what verification needs, read
    before the batches are validated."""
    if len(data) < _BATCH_HEADER_SIZE:
        return None
    pid, epoch, seq = _PRODUCER.unpack_from(data, _PRODUCER_AT)
    return pid, epoch, seq, bool(data[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL)


@dataclass(slots=True)
class AppendResult:
    """One partition's answer to an append."""

    error: ErrorCode
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    # The offset after the last appended record: what acks=all waits for.
    end_offset: int = -1
    # (index in the batch, why) of each record that failed its batch (Produce v8+).
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass(slots=True)
class _Writing:
    """A partition's append as leader whose write is under way: its answer is made from
    ``written`` once that is done. ``counted``: (bytes, records) for the topic's metrics
    (a client's data)."""

    tp: TopicPartition
    partition: Partition
    written: asyncio.Future[ProduceResult]
    counted: tuple[int, int] | None


# A partition's answer to an append: now, or once its write is done.
Written = AppendResult | _Writing


@dataclass(frozen=True, slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool
    # A follower's broker id (it reads up to the log end); -1 for a consumer.
    replica_id: int = -1


@dataclass(frozen=True, slots=True)
class FetchPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    # The epoch of the fetcher's last batch (v12+): checked against this log's epochs.
    last_fetched_epoch: int = -1
    # A follower's log start offset.
    log_start_offset: int = -1


@dataclass(slots=True)
class ReadResult:
    """One partition's answer to a fetch."""

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: LogSlice | None = None
    # (epoch, end offset) where the fetcher's log parts from this one (v12+).
    diverging_epoch: tuple[int, int] | None = None
    # read_committed: (producer id, first offset) of the transactions aborted in what
    # was read (None for other reads).
    aborted_transactions: list[tuple[int, int]] | None = None


LeadershipListener = Callable[[TopicPartition, bool, int], None]

# Opens (or creates) a partition's log, its directory naming the topic id (when known).
LogOpener = Callable[[TopicPartition, "uuid.UUID | None"], Log]

# StopReplica's leader epochs that stop a partition whatever its epoch: the topic is
# being deleted (Kafka's EpochDuringDelete), or the request carries none (NoEpoch).
EPOCH_DURING_DELETE = -2
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsrOrder:
    """One partition of a controller's LeaderAndIsr request."""

    tp: TopicPartition
    state: PartitionState
    topic_id: uuid.UUID | None = None
    is_new: bool = False
    # Where the leader takes fetches (the request's live leaders), for a follower.
    leader_endpoint: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class StopReplicaOrder:
    """One partition of a controller's StopReplica request."""

    tp: TopicPartition
    leader_epoch: int
    delete: bool


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        topic_config: Callable[[str], TopicConfig],
        scheduler: Scheduler | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.broker_id = broker_id
        # Bytes and records in and out per topic, when given.
        self.metrics = metrics
        self.logs = logs
        self.topic_config = topic_config
        self._partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory: Purgatory[TopicPartition] = Purgatory("Fetch", scheduler)
        self.produce_purgatory: Purgatory[TopicPartition] = Purgatory("Produce", scheduler)
        self.delete_records_purgatory: Purgatory[TopicPartition] = Purgatory(
            "DeleteRecords", scheduler
        )
        # Told (partition, is_leader_now, leader_epoch) on every leadership transition.
        self._listeners: list[LeadershipListener] = []
        # The partitions the listeners were last told this broker leads: a leader the
        # controller fenced is no leader (`Partition.is_leader`), yet its listeners (the
        # coordinators) still serve it until told otherwise.
        self._announced_leading: set[TopicPartition] = set()
        # Shutting down: no request waits any more.
        self._closing = False
        # The highest controller epoch heard from: orders of older controllers are refused.
        self.controller_epoch = -1
        # Topic ids of the partitions served (the controller names them in its orders).
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}
        # Cluster mode (`start_replication`): the fetchers of the partitions followed, the
        # way to the controller for ISR changes, and the high watermarks checkpointed at
        # the last stop (a partition opened since has taken its own).
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr_channel: IsrChannel | None = None
        self._endpoint_of: Callable[[int], tuple[str, int] | None] = lambda _id: None
        self._checkpointed: dict[TopicPartition, int] = {}
        # ISR changes this broker's leaders made (Kafka's IsrShrinksPerSec/IsrExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        # Transactions: who hears of markers, and KIP-890's verifier and its switch
        # (transaction.partition.verification.enable); no verifier, no verification.
        self._marker_listeners: list[MarkerListener] = []
        self._verifier: TxnVerifier | None = None
        self._verification_enabled: Callable[[], bool] = lambda: True

    def _isr_changed(self, before: list[int], after: list[int]) -> None:
        if len(after) < len(before):
            self.isr_shrinks += 1
        elif len(after) > len(before):
            self.isr_expands += 1

    def start_replication(
        self,
        fetchers: ReplicaFetcherManager,
        isr_channel: IsrChannel,
        endpoint_of: Callable[[int], tuple[str, int] | None],
    ) -> None:
        """Cluster mode: partitions follow their leaders (reached at ``endpoint_of`` their
        id when an order names no address) and lead their followers."""
        self.fetchers = fetchers
        self.isr_channel = isr_channel
        self._endpoint_of = endpoint_of
        self._checkpointed = read_high_watermarks(self.logs.data_dir)

    async def stop_replication(self) -> None:
        """Stops the fetchers and the ISR channel (after `shutdown`)."""
        if self.fetchers is not None:
            await self.fetchers.close()
        if self.isr_channel is not None:
            await self.isr_channel.close()

    def high_watermark_of(self, tp: TopicPartition) -> int | None:
        """The high watermark of a partition's log: None when it has no bound (a log no
        partition serves on a single node); in a cluster an unserved log keeps the one
        checkpointed (0 if none), until the controller says what it is."""
        partition = self._partitions.get(tp)
        if partition is not None:
            return partition.high_watermark
        if self.fetchers is None:
            return None
        return self._checkpointed.get(tp, 0)

    def cleanable_bound_of(self, tp: TopicPartition) -> int | None:
        """Where compaction of a partition's log stops: its last stable offset (the
        cleaner may only decide about transactions whose outcome is written and
        replicated: it takes every transactional record below the bound as committed
        unless the log's aborted-transaction index says otherwise). A log no partition
        serves has no producer state, so no known last stable offset: it is not
        cleaned."""
        partition = self._partitions.get(tp)
        if partition is not None:
            return partition.last_stable_offset
        return 0

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Every partition's high watermark, as checkpointed (on the event loop)."""
        hws = dict(self._checkpointed)
        hws.update((tp, p.high_watermark) for tp, p in self._partitions.items())
        return hws

    def checkpoint_high_watermarks(self, hws: Mapping[TopicPartition, int] | None = None) -> None:
        """Writes the high watermarks (``hws``, taken on the event loop; default: now) to
        the data directory (blocking: any thread)."""
        write_high_watermarks(self.logs.data_dir, self.high_watermarks() if hws is None else hws)

    def shrink_isrs(self, max_lag_ms: int) -> None:
        """Leaders drop from their ISRs the followers more than ``max_lag_ms`` behind."""
        now = monotonic_ms()
        for partition in self._partitions.values():
            if partition.followers:
                partition.maybe_shrink_isr(now, max_lag_ms)

    # -- partitions ----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._partitions)

    def __contains__(self, tp: TopicPartition) -> bool:
        return tp in self._partitions

    def all_partitions(self) -> Mapping[TopicPartition, Partition]:
        return self._partitions

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self._partitions.get(tp)

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it (in the client's epoch); else PartitionError."""
        partition = self._partitions.get(tp)
        if partition is None:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        partition.check_leader_epoch(current_leader_epoch)
        if not partition.is_leader:
            raise PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return partition

    def add_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    def add_marker_listener(self, listener: MarkerListener) -> None:
        """``listener(tp, producer_id, committed, offset)`` hears of every transaction
        marker written to a partition of this broker: as leader once the in-sync
        replicas have it (what `write_txn_markers` answers NONE for), as follower when
        it copies it. It runs on the event loop and must not raise."""
        self._marker_listeners.append(listener)

    def set_txn_verifier(
        self, verifier: TxnVerifier | None, enabled: Callable[[], bool] = lambda: True
    ) -> None:
        """KIP-890 part 1: ``verifier`` is asked before a client's transactional batch
        opens its producer's transaction on a partition, while ``enabled()``
        (transaction.partition.verification.enable) holds."""
        self._verifier = verifier
        self._verification_enabled = enabled

    def _notify_marker(
        self, tp: TopicPartition, producer_id: int, committed: bool, offset: int
    ) -> None:
        for listener in self._marker_listeners:
            try:
                listener(tp, producer_id, committed, offset)
            except Exception:
                log.exception("%s: a marker listener failed", tp)

    def add_partition(self, partition: Partition) -> None:
        """Starts serving ``partition`` in the role its state gives it."""
        self._partitions[partition.tp] = partition
        partition.on_progress = self._on_progress
        partition.on_follower_marker = self._notify_marker
        partition.on_fenced = self._resign_fenced
        if self.isr_channel is not None:
            partition.request_isr = self.isr_channel.submit
        partition.on_isr_change = self._isr_changed
        if partition.is_leader:
            self._notify(partition.tp, True, partition.leader_epoch)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stops serving partitions (deleted or moved away); their logs stay until deleted."""
        tps = list(tps)
        if self.fetchers is not None:
            self.fetchers.stop_following(tps)
        for tp in tps:
            partition = self._partitions.pop(tp, None)
            if partition is None:
                continue
            self._checkpointed[tp] = partition.high_watermark
            partition.close()
            if tp in self._announced_leading:
                self._notify(tp, False, partition.leader_epoch)
            self._on_progress(tp)  # waiting requests answer now, with an error

    def make_leader(self, tp: TopicPartition, state: PartitionState) -> None:
        """This broker leads ``tp`` from ``state.leader_epoch`` on."""
        partition = self._partitions[tp]
        if self.fetchers is not None:
            self.fetchers.stop_following([tp])
        partition.become_leader(state)
        self._notify(tp, True, state.leader_epoch)
        self._on_progress(tp)

    def make_follower(self, tp: TopicPartition, state: PartitionState) -> None:
        """Another broker leads ``tp``: requests waiting on it get NOT_LEADER_OR_FOLLOWER."""
        partition = self._partitions[tp]
        partition.become_follower(state)
        if tp in self._announced_leading:
            self._notify(tp, False, state.leader_epoch)
        self._on_progress(tp)

    # -- the controller's orders -----------------------------------------------

    def accepts_controller(self, controller_epoch: int) -> bool:
        """False for an order of a controller older than one already heard from (also
        UpdateMetadata's: one epoch for every order)."""
        if controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring an order of controller epoch %d: epoch %d is current",
                controller_epoch,
                self.controller_epoch,
            )
            return False
        self.controller_epoch = controller_epoch
        return True

    def become_leader_or_follower(
        self, controller_epoch: int, orders: Iterable[LeaderAndIsrOrder], open_log: LogOpener
    ) -> dict[TopicPartition, ErrorCode] | None:
        """Applies a controller's LeaderAndIsr: each partition's error (NONE: applied), or
        None when the whole request comes from an old controller (STALE_CONTROLLER_EPOCH).

        A partition takes a state only in a newer leader epoch than it has (an older
        or the same one: STALE_CONTROLLER_EPOCH), only if this broker is one of its
        replicas (else UNKNOWN_TOPIC_OR_PARTITION), and only for the topic id it
        knows (else INCONSISTENT_TOPIC_ID). A partition new to this broker has its
        log opened or created.
        """
        if not self.accepts_controller(controller_epoch):
            return None
        errors: dict[TopicPartition, ErrorCode] = {}
        for order in orders:
            errors[order.tp] = self._apply_order(order, open_log)
        stale = sum(1 for code in errors.values() if code == ErrorCode.STALE_CONTROLLER_EPOCH)
        if stale:
            log.info(
                "controller epoch %d: %d of %d partition(s) already in that leader epoch or a "
                "newer one; left as they are",
                controller_epoch,
                stale,
                len(errors),
            )
        return errors

    def _apply_order(self, order: LeaderAndIsrOrder, open_log: LogOpener) -> ErrorCode:
        tp, state = order.tp, order.state
        partition = self._partitions.get(tp)
        known_id = self._topic_ids.get(tp)
        if order.topic_id is not None and known_id is not None and known_id != order.topic_id:
            log.error(
                "%s: the controller names topic id %s, this broker has %s",
                tp,
                order.topic_id,
                known_id,
            )
            return ErrorCode.INCONSISTENT_TOPIC_ID
        current = -1 if partition is None else partition.leader_epoch
        if state.leader_epoch <= current:
            log.debug(
                "%s: ignoring leader epoch %d, not newer than %d", tp, state.leader_epoch, current
            )
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if self.broker_id not in state.replicas:
            log.warning(
                "%s: ignoring a state whose replicas %s do not include this broker",
                tp,
                state.replicas,
            )
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if partition is None:
            try:
                lg = open_log(tp, order.topic_id)
            except OSError as exc:
                self.logs.errors.write_failed("opening", tp, exc)
                return ErrorCode.KAFKA_STORAGE_ERROR
            if order.topic_id is not None:
                self._topic_ids[tp] = order.topic_id
            new = order.is_new and lg.log_end_offset == 0
            hw = self._checkpointed.pop(tp, lg.log_start_offset)
            partition = Partition(
                lg, state, self.broker_id, new=new, high_watermark=hw, io=self.logs.io
            )
            self.add_partition(partition)
            self._on_progress(tp)
        elif state.leader == self.broker_id:
            self.make_leader(tp, state)
        else:
            self.make_follower(tp, state)
        if state.leader != self.broker_id:
            self._follow(self._partitions[tp], state, order.leader_endpoint)
        log.info(
            "%s: %s in leader epoch %d (isr %s)",
            tp,
            "leading" if state.leader == self.broker_id else f"following {state.leader}",
            state.leader_epoch,
            state.isr,
        )
        return ErrorCode.NONE

    def _follow(
        self, partition: Partition, state: PartitionState, endpoint: tuple[str, int] | None
    ) -> None:
        """Starts fetching ``partition`` from its leader (none: until there is one)."""
        if self.fetchers is None:
            return
        if endpoint is None and state.leader >= 0:
            endpoint = self._endpoint_of(state.leader)
        if state.leader < 0 or endpoint is None:
            self.fetchers.stop_following([partition.tp])
            if state.leader >= 0:
                log.warning("%s: no address known for leader %d", partition.tp, state.leader)
            return
        self.fetchers.follow(partition, state.leader, state.leader_epoch, endpoint)

    def stop_replicas(
        self, controller_epoch: int, orders: Iterable[StopReplicaOrder]
    ) -> dict[TopicPartition, ErrorCode] | None:
        """Applies a controller's StopReplica: each partition's error, or None when the
        request comes from an old controller. A stopped partition is no longer served;
        with ``delete`` its log is removed too (also when it was not served)."""
        if not self.accepts_controller(controller_epoch):
            return None
        errors: dict[TopicPartition, ErrorCode] = {}
        to_delete: list[TopicPartition] = []
        for order in orders:
            partition = self._partitions.get(order.tp)
            if partition is not None:
                epoch = order.leader_epoch
                # Kafka 3.9 takes an order of the partition's own epoch or a newer one.
                if epoch not in (EPOCH_DURING_DELETE, NO_EPOCH) and epoch < partition.leader_epoch:
                    errors[order.tp] = ErrorCode.FENCED_LEADER_EPOCH
                    continue
                self.remove_partitions([order.tp])
            if order.delete:
                to_delete.append(order.tp)
                self._topic_ids.pop(order.tp, None)
            errors[order.tp] = ErrorCode.NONE
        for tp in self.logs.delete_all(to_delete):
            errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
        return errors

    def _notify(self, tp: TopicPartition, leads: bool, leader_epoch: int) -> None:
        if leads:
            self._announced_leading.add(tp)
        else:
            self._announced_leading.discard(tp)
        for listener in self._listeners:
            listener(tp, leads, leader_epoch)

    def _resign_fenced(self, tp: TopicPartition) -> None:
        """The controller fenced this broker's leadership of ``tp``: the coordinators stop
        serving it now, not at the next order (which a broker cut off from the controller
        may not hear for long), so none answers from stale state."""
        partition = self._partitions.get(tp)
        if partition is not None and tp in self._announced_leading:
            self._notify(tp, False, partition.leader_epoch)

    def _on_progress(self, tp: TopicPartition) -> None:
        """The high watermark or log end of ``tp`` moved (or its leadership changed)."""
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)

    def shutdown(self) -> None:
        """Answers every waiting request now, then closes the partitions."""
        self._closing = True
        self.fetch_purgatory.complete_all()
        self.produce_purgatory.complete_all()
        self.delete_records_purgatory.complete_all()
        for partition in self._partitions.values():
            partition.close()
        if self.fetchers is not None:
            try:
                self.checkpoint_high_watermarks()
            except OSError as exc:
                log.warning("could not checkpoint the high watermarks: %s", exc)

    # -- writes ----------------------------------------------------------------

    def append_records(
        self,
        entries: Mapping[TopicPartition, bytes | memoryview],
        required_acks: int,
        timeout_ms: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transactional_id: str | None = None,
    ) -> asyncio.Future[dict[TopicPartition, AppendResult]]:
        """Appends each partition's batches (all or none per partition).

        ``origin``: a client's produce, or a coordinator's own writes (no sequence
        checks; the group coordinator's transactional offsets come this way).
        ``transactional_id``: the producer's, for KIP-890 verification of a
        transactional batch that opens its transaction on a partition (none: no
        verification). The future is done at once unless verification or acks=all
        has to wait.
        """
        guards: dict[TopicPartition, VerificationGuard] = {}
        verify: tuple[int, int] | None = None
        if (
            transactional_id is not None
            and self._verifier is not None
            and self._verification_enabled()
        ):
            verify, guards = self._start_verification(entries)
        if verify is None or not guards:
            written = {
                tp: self._append_to_leader(tp, data, required_acks, origin)
                for tp, data in entries.items()
            }
            return self._await_acks_when_written(written, required_acks, timeout_ms)
        assert transactional_id is not None
        done: asyncio.Future[dict[TopicPartition, AppendResult]] = (
            asyncio.get_running_loop().create_future()
        )
        asyncio.get_running_loop().create_task(
            self._append_verified(
                entries, required_acks, timeout_ms, origin, transactional_id, verify, guards, done
            )
        )
        return done

    def _start_verification(
        self, entries: Mapping[TopicPartition, bytes | memoryview]
    ) -> tuple[tuple[int, int] | None, dict[TopicPartition, VerificationGuard]]:
        """((producer id, epoch), a guard per partition to verify) for the transactional
        batches of ``entries`` whose producer has no transaction open on their partition
        (Kafka's partitionEntriesForVerification)."""
        guards: dict[TopicPartition, VerificationGuard] = {}
        producer: tuple[int, int] | None = None
        for tp, data in entries.items():
            facts = first_batch_producer(data)
            if facts is None or not facts[3] or facts[0] < 0:
                continue
            pid, epoch, seq, _ = facts
            partition = self._partitions.get(tp)
            if partition is None or not partition.is_leader:
                continue  # answered by the append itself
            guard = partition.producers.maybe_start_verification(pid, seq, epoch)
            if guard is not None:
                guards[tp] = guard
                producer = (pid, epoch)
        return producer, guards

    async def _append_verified(
        self,
        entries: Mapping[TopicPartition, bytes | memoryview],
        required_acks: int,
        timeout_ms: int,
        origin: AppendOrigin,
        transactional_id: str,
        producer: tuple[int, int],
        guards: dict[TopicPartition, VerificationGuard],
        done: asyncio.Future[dict[TopicPartition, AppendResult]],
    ) -> None:
        """Asks the coordinator about ``guards``' partitions, then appends every entry:
        those it did not confirm are answered with the producer's error instead."""
        assert self._verifier is not None
        try:
            try:
                answers = await self._verifier.verify(
                    transactional_id, producer[0], producer[1], list(guards)
                )
            except Exception:
                log.exception("verifying %s with its transaction coordinator", transactional_id)
                answers = {tp: ErrorCode.NETWORK_EXCEPTION for tp in guards}
            results: dict[TopicPartition, Written] = {}
            for tp, data in entries.items():
                code = answers.get(tp, ErrorCode.NONE) if tp in guards else ErrorCode.NONE
                if code != ErrorCode.NONE:
                    if origin is AppendOrigin.COORDINATOR:
                        # The group coordinator answers TxnOffsetCommit from the
                        # coordinator's own error (Kafka converts it there, not as a
                        # produce's).
                        results[tp] = AppendResult(coordinator_error_for_verification(code))
                        continue
                    error, message = produce_error_for_verification(ErrorCode(code))
                    results[tp] = AppendResult(error, message)
                    continue
                results[tp] = self._append_to_leader(
                    tp, data, required_acks, origin, guards.get(tp)
                )
            acked = self._await_acks_when_written(results, required_acks, timeout_ms)
            acked.add_done_callback(lambda f: _pass_on(f, done))
        except Exception as exc:  # answered as the connection's failure, never lost
            if not done.done():
                done.set_exception(exc)

    def _await_acks_when_written(
        self, written: dict[TopicPartition, Written], required_acks: int, timeout_ms: int
    ) -> asyncio.Future[dict[TopicPartition, AppendResult]]:
        """`_await_acks` once every partition's write is done."""
        pending = [w.written for w in written.values() if isinstance(w, _Writing)]
        if not pending:
            return self._await_acks(
                {tp: r for tp, r in written.items() if isinstance(r, AppendResult)},
                required_acks,
                timeout_ms,
            )
        done: asyncio.Future[dict[TopicPartition, AppendResult]] = (
            pending[0].get_loop().create_future()
        )
        left = len(pending)

        def one_written(_: asyncio.Future[ProduceResult]) -> None:
            nonlocal left
            left -= 1
            if left:
                return
            results = {
                tp: w if isinstance(w, AppendResult) else self._written_result(w)
                for tp, w in written.items()
            }
            self._await_acks(results, required_acks, timeout_ms).add_done_callback(
                lambda f: _pass_on(f, done)
            )

        for f in pending:
            f.add_done_callback(one_written)
        return done

    def _await_acks(
        self, results: dict[TopicPartition, AppendResult], required_acks: int, timeout_ms: int
    ) -> asyncio.Future[dict[TopicPartition, AppendResult]]:
        """``results``, once acks=all is satisfied for the appended partitions."""
        done: asyncio.Future[dict[TopicPartition, AppendResult]] = (
            asyncio.get_running_loop().create_future()
        )
        waiting = [
            tp for tp, r in results.items() if r.error == ErrorCode.NONE and r.end_offset >= 0
        ]
        if required_acks != -1 or not waiting:
            done.set_result(results)
            return done
        op = DelayedProduce(self, timeout_ms, results, waiting, done)
        if self._closing:
            op.try_complete() or op.force_complete()
        else:
            self.produce_purgatory.try_complete_else_watch(op, waiting)
        return done

    def _append_to_leader(
        self,
        tp: TopicPartition,
        data: bytes | memoryview,
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        guard: VerificationGuard | None = None,
    ) -> Written:
        """Validates ``data`` and appends it to ``tp``'s log: its answer now (refused), or
        once written."""
        partition = self._partitions.get(tp)
        if partition is None:
            return AppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        settings = self.topic_config(tp.topic).append
        max_bytes = settings.max_message_bytes
        bounds = settings.timestamp_bounds_ms
        window = None if bounds is None else (int(time.time() * 1000), *bounds)
        try:
            infos = validate_batches(
                data, max_bytes, True, MAX_DECOMPRESSED_BYTES, settings.compacted, window
            )
            data = recompress_for_topic(data, infos, settings.compression_type, max_bytes)
        except RecordErrorsError as exc:
            refused = record_errors(tp, exc.args[1], window)
            return AppendResult(
                refused.error,
                refused.message,
                log_start_offset=partition.log.log_start_offset,
                record_errors=refused.records,
            )
        except RecordTooLargeError as exc:
            return AppendResult(ErrorCode.MESSAGE_TOO_LARGE, str(exc))
        except CorruptRecordError as exc:
            return AppendResult(ErrorCode.CORRUPT_MESSAGE, str(exc))
        except InvalidRecordError as exc:
            return AppendResult(ErrorCode.INVALID_RECORD, str(exc))
        for info in infos:
            if info.is_control:
                # Markers are written by the leader itself (`write_txn_markers`).
                return AppendResult(
                    ErrorCode.INVALID_RECORD, "clients may not write control batches"
                )
        written = partition.append_as_leader(
            data,
            infos,
            required_acks,
            settings.min_insync_replicas,
            settings.log_append_time,
            origin,
            guard,
            self._verifier is not None and self._verification_enabled(),
        )
        counted = (len(data), sum(i.records for i in infos))
        return self._answer_when_written(tp, partition, written, counted)

    def _answer_when_written(
        self,
        tp: TopicPartition,
        partition: Partition,
        written: asyncio.Future[ProduceResult],
        counted: tuple[int, int] | None = None,
    ) -> Written:
        """A partition's answer to an append as leader, now if its write is done, else once
        it is (`_await_acks_when_written` waits for it). ``counted``: (bytes, records) for
        the topic's metrics (a client's data)."""
        if written.done():
            return self._append_result(tp, partition, written, counted)
        return _Writing(tp, partition, written, counted)

    def _written_result(self, w: _Writing) -> AppendResult:
        return self._append_result(w.tp, w.partition, w.written, w.counted)

    def _append_result(
        self,
        tp: TopicPartition,
        partition: Partition,
        written: asyncio.Future[ProduceResult],
        counted: tuple[int, int] | None,
    ) -> AppendResult:
        """A partition's answer to an append as leader, from its finished write."""
        try:
            result = written.result()
        except KafkaError as exc:
            return AppendResult(exc.code, str(exc))
        except (StaleLeaderEpochError, IoThreadsClosed) as exc:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc))
        except RecordTooLargeError as exc:
            # Larger than the topic's segment.bytes (max.message.bytes was checked above).
            return AppendResult(ErrorCode.RECORD_LIST_TOO_LARGE, str(exc))
        except (CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError) as exc:
            return AppendResult(ErrorCode.CORRUPT_MESSAGE, str(exc))
        except OSError as exc:
            self.logs.errors.write_failed("append to", tp, exc)
            return AppendResult(
                ErrorCode.KAFKA_STORAGE_ERROR, f"the broker could not write to its disk: {exc}"
            )
        except Exception as exc:
            # Every write is answered: an exception escaping here would leave the request
            # (and every later answer on its connection) waiting forever.
            return self._append_failed(tp, partition, exc)
        self.logs.errors.succeeded("append to", tp)
        if self.metrics is not None and counted is not None:
            self.metrics.appended(tp.topic, *counted)
        return AppendResult(
            ErrorCode.NONE,
            None,
            result.base_offset,
            result.log_append_time,
            result.log_start_offset,
            result.end_offset,
        )

    def _append_failed(
        self, tp: TopicPartition, partition: Partition, exc: Exception
    ) -> AppendResult:
        """The answer to a write that failed in a way `_append_result` does not name. One
        to a partition closed meanwhile (stopped or deleted: its log refuses the writes
        still queued on the I/O threads, as closed) is NOT_LEADER_OR_FOLLOWER, as Kafka
        answers a partition no longer served: the producer asks where it went and
        retries there. Anything else is a fault here, logged, UNKNOWN_SERVER_ERROR."""
        if partition.closed or self._partitions.get(tp) is not partition:
            return AppendResult(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"the partition is no longer served here ({exc})",
            )
        log.error("%s: a write failed unexpectedly", tp, exc_info=exc)
        return AppendResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))

    # -- transaction markers ----------------------------------------------------

    def write_txn_markers(
        self, marker: TxnMarker, timeout_ms: int
    ) -> asyncio.Future[dict[TopicPartition, ErrorCode]]:
        """Writes ``marker`` to each of its partitions this broker leads, as Kafka's
        WriteTxnMarkers does: a control batch with the COMMIT or ABORT record and the
        coordinator epoch, appended as leader with acks=all. The future is done with
        each partition's error once the in-sync replicas have the marker or
        ``timeout_ms`` passed: NONE, UNKNOWN_TOPIC_OR_PARTITION (not here),
        NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH and
        TRANSACTION_COORDINATOR_FENCED (a stale marker: nothing written),
        REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR. The marker listeners hear of each
        marker written and replicated.
        """
        writes = {tp: self._append_marker(tp, marker) for tp in marker.partitions}
        acked = self._await_acks_when_written(writes, -1, timeout_ms)
        done: asyncio.Future[dict[TopicPartition, ErrorCode]] = (
            asyncio.get_running_loop().create_future()
        )

        def answer(f: asyncio.Future[dict[TopicPartition, AppendResult]]) -> None:
            if done.done():
                return
            if f.cancelled() or f.exception() is not None:
                done.set_exception(f.exception() or asyncio.CancelledError())
                return
            final = f.result()
            for tp, r in final.items():
                if r.error == ErrorCode.NONE:
                    self._notify_marker(tp, marker.producer_id, marker.committed, r.base_offset)
            done.set_result({tp: r.error for tp, r in final.items()})

        acked.add_done_callback(answer)
        return done

    def _append_marker(self, tp: TopicPartition, marker: TxnMarker) -> Written:
        partition = self._partitions.get(tp)
        if partition is None:
            return AppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        settings = self.topic_config(tp.topic).append
        written = partition.append_marker_as_leader(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.committed,
            settings.min_insync_replicas,
            settings.log_append_time,
        )
        return self._answer_when_written(tp, partition, written)

    # -- reads -----------------------------------------------------------------

    def fetch_records(
        self, params: FetchParams, fetches: list[FetchPartition]
    ) -> asyncio.Future[list[ReadResult]]:
        """Reads ``fetches``; waits (at most ``max_wait_ms``) until ``min_bytes`` are there.

        The future is done at once when the data, an error, or a zero wait
        allows an answer now.
        """
        done: asyncio.Future[list[ReadResult]] = asyncio.get_running_loop().create_future()
        if params.replica_id >= 0:
            self._update_followers(params.replica_id, fetches)
        op = DelayedFetch(self, params, fetches, done)
        if self._closing or params.max_wait_ms <= 0 or not fetches:
            op.force_complete()
        else:
            self.fetch_purgatory.try_complete_else_watch(op, {f.tp for f in fetches})
        return done

    def _update_followers(self, replica_id: int, fetches: list[FetchPartition]) -> None:
        """A follower's fetch offsets are its log ends: the leaders note its progress
        (not when its log diverges: it truncates first)."""
        now = monotonic_ms()
        for f in fetches:
            partition = self._partitions.get(f.tp)
            if partition is None or not partition.is_leader:
                continue
            if f.current_leader_epoch >= 0 and f.current_leader_epoch != partition.leader_epoch:
                continue
            if f.last_fetched_epoch >= 0 and _diverging(partition, f) is not None:
                continue
            if not partition.update_follower_fetch_state(
                replica_id, f.fetch_offset, f.log_start_offset, now
            ):
                log.debug("%s: fetch from broker %d, not a replica", f.tp, replica_id)
            elif self.delete_records_purgatory.watched(f.tp):
                self.delete_records_purgatory.check_and_complete(f.tp)

    def read_from_local_log(
        self, params: FetchParams, fetches: list[FetchPartition]
    ) -> tuple[list[ReadResult], int]:
        """Reads what is there now: (a result per partition, bytes read)."""
        remaining = params.max_bytes
        total = 0
        results = []
        follower = params.replica_id >= 0
        for f in fetches:
            try:
                partition = self.leader_partition(f.tp, f.current_leader_epoch)
            except PartitionError as exc:
                results.append(ReadResult(exc.code))
                continue
            if follower and params.replica_id not in partition.followers:
                # Only a replica reads past the high watermark (Kafka answers the same).
                results.append(ReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            hw = partition.high_watermark
            lso = partition.last_stable_offset
            result = ReadResult(ErrorCode.NONE, hw, lso, partition.log.log_start_offset)
            committed = params.read_committed and not follower
            if committed:
                result.aborted_transactions = []
            try:
                if f.last_fetched_epoch >= 0:
                    result.diverging_epoch = _diverging(partition, f)
                    if result.diverging_epoch is not None:
                        results.append(result)
                        continue
                limit = min(f.max_bytes, remaining)
                if limit > 0 or total == 0:
                    if follower:
                        bound = partition.log.log_end_offset
                    else:
                        bound = lso if params.read_committed else hw
                    records = partition.read(f.fetch_offset, max(limit, 0), total == 0, bound)
                    if records is not None:
                        n = len(records)
                        result.records = records
                        total += n
                        remaining -= n
                        if committed:
                            result.aborted_transactions = partition.log.aborted_txns_for_slice(
                                f.fetch_offset, records
                            )
            except OffsetOutOfRangeError:
                result.error = ErrorCode.OFFSET_OUT_OF_RANGE
            except KafkaError as exc:
                result.error = exc.code
            except OSError as exc:
                self.logs.errors.failed("reading", f.tp, exc)
                result.error = ErrorCode.KAFKA_STORAGE_ERROR
            results.append(result)
        return results, total

    # -- maintenance -----------------------------------------------------------

    def delete_records(
        self, offsets: Mapping[TopicPartition, int], timeout_ms: int
    ) -> asyncio.Future[dict[TopicPartition, tuple[int, ErrorCode]]]:
        """DeleteRecords on partitions this broker leads: each one's (low watermark, error)
        once every in-sync replica has moved its log start there (`DelayedDeleteRecords`),
        or REQUEST_TIMED_OUT at ``timeout_ms``. Offset -1 means the high watermark."""
        results: dict[TopicPartition, tuple[int, ErrorCode]] = {}
        targets: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            try:
                partition = self.leader_partition(tp)
                partition.delete_records_before(offset)
            except PartitionError as exc:
                results[tp] = (-1, exc.code)
                continue
            except OSError as exc:
                self.logs.errors.failed("deleting records of", tp, exc)
                results[tp] = (-1, ErrorCode.KAFKA_STORAGE_ERROR)
                continue
            self.logs.errors.succeeded("deleting records of", tp)
            targets[tp] = partition.log.log_start_offset
        done: asyncio.Future[dict[TopicPartition, tuple[int, ErrorCode]]] = (
            asyncio.get_running_loop().create_future()
        )
        op = DelayedDeleteRecords(self, timeout_ms, targets, results, done)
        if self._closing or not targets:
            op.try_complete() or op.force_complete()
        else:
            self.delete_records_purgatory.try_complete_else_watch(op, targets)
        return done


def _pass_on(source: asyncio.Future[T], target: asyncio.Future[T]) -> None:
    """Completes ``target`` as ``source`` completed."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class DelayedProduce(DelayedOperation):
    """acks=all: waits until every appended partition is replicated, or the timeout.

    A partition is done when its high watermark reaches the end of what was
    appended (with enough in-sync replicas), or when this broker stops
    leading it; partitions still waiting at the timeout get REQUEST_TIMED_OUT.
    """

    def __init__(
        self,
        replicas: ReplicaManager,
        timeout_ms: int,
        results: dict[TopicPartition, AppendResult],
        waiting: list[TopicPartition],
        done: asyncio.Future[dict[TopicPartition, AppendResult]],
    ) -> None:
        super().__init__(timeout_ms)
        self._replicas = replicas
        self._results = results
        self._waiting = set(waiting)
        self._done = done

    def try_complete(self) -> bool:
        for tp in list(self._waiting):
            partition = self._replicas.get_partition(tp)
            if partition is None or not partition.is_leader:
                self._results[tp].error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                self._waiting.discard(tp)
                continue
            min_isr = self._replicas.topic_config(tp.topic).get_int("min.insync.replicas")
            reached, error = partition.check_enough_replicas_reached(
                self._results[tp].end_offset, min_isr
            )
            if reached:
                self._results[tp].error = error
                self._waiting.discard(tp)
        if self._waiting:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        for tp in self._waiting:
            result = self._results[tp]
            result.error = ErrorCode.REQUEST_TIMED_OUT
            result.message = "the in-sync replicas did not acknowledge the records in time"
        if not self._done.done():
            self._done.set_result(self._results)


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes`` of new data, at most ``max_wait_ms``.

    Each check reads the partitions as `read_from_local_log` does (slices,
    no copies) and completes with what it read when there are enough bytes
    or a partition has an error to report (leadership moved, the partition
    went, the client's epoch is stale); the timeout answers with what is
    there then.
    """

    def __init__(
        self,
        replicas: ReplicaManager,
        params: FetchParams,
        fetches: list[FetchPartition],
        done: asyncio.Future[list[ReadResult]],
    ) -> None:
        super().__init__(params.max_wait_ms)
        self._replicas = replicas
        self._params = params
        self._fetches = fetches
        self._done = done
        self._results: list[ReadResult] | None = None

    def try_complete(self) -> bool:
        results, total = self._replicas.read_from_local_log(self._params, self._fetches)
        if total >= self._params.min_bytes or any(
            r.error != ErrorCode.NONE or r.diverging_epoch is not None for r in results
        ):
            self._results = results
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._done.done():
            return
        try:
            results = self._results
            if results is None:  # the timeout, or shutdown: what is there now
                results, _ = self._replicas.read_from_local_log(self._params, self._fetches)
        except Exception as exc:  # answered as the connection's failure, never lost
            self._done.set_exception(exc)
            return
        metrics = self._replicas.metrics
        if metrics is not None:
            for f, r in zip(self._fetches, results, strict=True):
                if r.records is not None:
                    metrics.fetched(f.tp.topic, len(r.records))
        self._done.set_result(results)


def _diverging(partition: Partition, f: FetchPartition) -> tuple[int, int] | None:
    """Where the fetcher's log parts from this leader's, given the epoch of its last batch:
    (the largest epoch here at or below it, where that ends), or None when the fetch
    offset is within that epoch here (Kafka's check, KIP-595 as used since 2.7)."""
    epoch, end = partition.log.end_offset_for_epoch(f.last_fetched_epoch)
    if epoch < 0:
        # No epoch here at or below it: nothing to compare; an offset beyond this log
        # is answered OFFSET_OUT_OF_RANGE.
        return None
    if epoch < f.last_fetched_epoch or end < f.fetch_offset:
        return epoch, end
    return None


class DelayedDeleteRecords(DelayedOperation):
    """DeleteRecords: waits until each partition's low watermark (the smallest log start
    of its in-sync replicas) reaches the new log start, or the timeout (Kafka's
    DelayedDeleteRecords); a partition whose leadership moved meanwhile gets
    NOT_LEADER_OR_FOLLOWER."""

    def __init__(
        self,
        replicas: ReplicaManager,
        timeout_ms: int,
        targets: dict[TopicPartition, int],
        results: dict[TopicPartition, tuple[int, ErrorCode]],
        done: asyncio.Future[dict[TopicPartition, tuple[int, ErrorCode]]],
    ) -> None:
        super().__init__(timeout_ms)
        self._replicas = replicas
        self._waiting = dict(targets)
        self._results = results
        self._done = done

    def try_complete(self) -> bool:
        for tp, target in list(self._waiting.items()):
            partition = self._replicas.get_partition(tp)
            if partition is None or not partition.is_leader:
                self._results[tp] = (-1, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                del self._waiting[tp]
                continue
            low = partition.low_watermark
            if low >= target:
                self._results[tp] = (low, ErrorCode.NONE)
                del self._waiting[tp]
        if self._waiting:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        for tp in self._waiting:
            self._results[tp] = (-1, ErrorCode.REQUEST_TIMED_OUT)
        if not self._done.done():
            self._done.set_result(self._results)
