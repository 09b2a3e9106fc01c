"""The marker channel: a transaction's COMMIT or ABORT markers written to every partition
leader, retried until each has written them, then the transaction completed.

Once a transaction's PrepareCommit or PrepareAbort is stored, `TxnMarkerChannel`
(Kafka's TransactionMarkerChannelManager) takes it over (`add_markers`):

- its partitions are grouped by their leader (the metadata cache's view) and
  queued for that broker; one sender task per broker drains its queue into
  one request of many markers (WriteTxnMarkers over the inter-broker listener
  to another broker, the replica manager directly for this one), one
  request in flight per broker;
- a partition whose marker is written leaves the transaction's partitions;
  one whose leader moved, is unknown or could not write (not enough
  replicas, a timeout, a lost connection) is queued again after a short
  backoff, to its leader then; one whose topic is gone is dropped;
- when no partition is left, the CompleteCommit/CompleteAbort record is
  written (retried while ``__transaction_state`` is unavailable), and the id
  may start its next transaction;
- everything is abandoned, unwritten, when the coordinator no longer
  coordinates the id at the marker's coordinator epoch (a new coordinator
  loads the PrepareCommit/PrepareAbort record and sends the markers again),
  or when a leader answers that the producer epoch or the coordinator epoch
  is fenced (a newer one has taken over).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from kbroker.log import TopicPartition
from kbroker.metadata.cache import MetadataCache
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.txn import TxnMarker
from kbroker.txn.manager import TxnError, TxnStateManager
from kbroker.txn.state import TransactionMetadata, TxnTransit

log = logging.getLogger(__name__)

# The errors a completion's write keeps its transaction pending on (the same record is
# tried again): every one but losing the id.
_KEPT_PENDING_ON_COMPLETION = frozenset(ErrorCode) - {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}

E = ErrorCode

# Waits before sending again what could not be written, and before retrying a
# completion record that could not be written (Kafka's retry.backoff.ms).
RETRY_BACKOFF_S = 0.1

# Errors after which the marker is written again (to the partition's leader then).
_RETRIABLE = frozenset(
    {
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_LEADER_OR_FOLLOWER,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
        E.KAFKA_STORAGE_ERROR,
        E.NETWORK_EXCEPTION,
        E.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
# A newer producer epoch or coordinator has taken over: this transaction's markers stop.
_FENCED = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED})
# The partition cannot hold markers (old formats): the producer could not have written
# to it in a transaction either, so it needs none.
_UNSUPPORTED = frozenset({E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_VERSION})


class MarkerDestinationUnreachable(ConnectionError):
    """The markers could not be sent, or their answer did not come: send them again."""


# Writes markers on one broker: each marker's error per partition, in order.
MarkerWriter = Callable[[int, list[TxnMarker]], Awaitable[list[dict[TopicPartition, ErrorCode]]]]


@dataclass(slots=True, eq=False)
class PendingCompletion:
    """A transaction whose markers are being written, and the record that completes it."""

    transactional_id: str
    coordinator_epoch: int
    committed: bool
    metadata: TransactionMetadata
    transit: TxnTransit


@dataclass(slots=True, eq=False)
class _Queued:
    pending: PendingCompletion
    marker: TxnMarker


@dataclass(slots=True)
class _Destination:
    queue: list[_Queued] = field(default_factory=list)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class TxnMarkerChannel:
    def __init__(
        self,
        manager: TxnStateManager,
        metadata_cache: MetadataCache,
        write: MarkerWriter,
        retry_backoff_s: float = RETRY_BACKOFF_S,
    ) -> None:
        self.manager = manager
        self.metadata_cache = metadata_cache
        self._write = write
        self.retry_backoff_s = retry_backoff_s
        self._destinations: dict[int, _Destination] = {}
        # Transactions whose markers are under way, by id.
        self._pending: dict[str, PendingCompletion] = {}
        # Timers of markers and completions waiting to be tried again.
        self._timers: set[asyncio.TimerHandle] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- what the coordinator hands over ----------------------------------------------------

    def add_markers(
        self,
        coordinator_epoch: int,
        committed: bool,
        metadata: TransactionMetadata,
        transit: TxnTransit,
    ) -> None:
        """Writes the markers of ``metadata``'s transaction (its PrepareCommit or
        PrepareAbort is stored), then its completion ``transit``."""
        pending = PendingCompletion(
            metadata.transactional_id, coordinator_epoch, committed, metadata, transit
        )
        previous = self._pending.get(pending.transactional_id)
        if previous is not None:
            log.info("%s: replacing markers still under way", pending.transactional_id)
        self._pending[pending.transactional_id] = pending
        self._enqueue(pending, frozenset(metadata.partitions))
        self._maybe_complete(pending)

    def remove_partition(self, index: int) -> None:
        """``__transaction_state-<index>`` is no longer this coordinator's: the markers of
        its ids are not sent any more (a new coordinator sends them)."""
        for txn_id in list(self._pending):
            try:
                mine = self.manager.partition_of(txn_id) == index
            except TxnError:
                mine = True
            if mine:
                del self._pending[txn_id]
        for destination in self._destinations.values():
            destination.queue = [q for q in destination.queue if q.pending in self._pending_set()]

    def _pending_set(self) -> set[PendingCompletion]:
        return set(self._pending.values())

    @property
    def transactions_under_way(self) -> int:
        return len(self._pending)

    async def stop(self) -> None:
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        tasks = [d.task for d in self._destinations.values() if d.task is not None]
        tasks += list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._destinations.clear()
        self._pending.clear()

    # -- queues -------------------------------------------------------------------------------

    def _is_current(self, pending: PendingCompletion) -> bool:
        """Still to be done by this coordinator (else forgotten)."""
        if self._pending.get(pending.transactional_id) is not pending:
            return False
        try:
            owned = self.manager.lookup(pending.transactional_id)
        except TxnError as exc:
            log.info(
                "%s: markers at coordinator epoch %d stop (%s)",
                pending.transactional_id,
                pending.coordinator_epoch,
                exc.code.name,
            )
            self._forget(pending)
            return False
        if owned is None or owned.coordinator_epoch != pending.coordinator_epoch:
            log.info(
                "%s: coordinator epoch moved on from %d; its markers stop",
                pending.transactional_id,
                pending.coordinator_epoch,
            )
            self._forget(pending)
            return False
        return True

    def _forget(self, pending: PendingCompletion) -> None:
        if self._pending.get(pending.transactional_id) is pending:
            del self._pending[pending.transactional_id]

    def _enqueue(self, pending: PendingCompletion, partitions: Iterable[TopicPartition]) -> None:
        """Queues the markers of ``partitions`` for their leaders."""
        if self._closed or not self._is_current(pending):
            return
        metadata = pending.metadata
        by_leader: dict[int, set[TopicPartition]] = defaultdict(set)
        unknown: set[TopicPartition] = set()
        gone: list[TopicPartition] = []
        for tp in partitions:
            state = self.metadata_cache.partition_state(tp.topic, tp.partition)
            if state is None:
                gone.append(tp)
            elif state.leader < 0 or self.metadata_cache.broker(state.leader) is None:
                unknown.add(tp)
            else:
                by_leader[state.leader].add(tp)
        for tp in gone:
            # Deleted: nothing can be written there, nor read from it.
            log.info("%s: %s is gone; it needs no marker", pending.transactional_id, tp)
            metadata.partitions.discard(tp)
        for leader, tps in by_leader.items():
            marker = TxnMarker(
                metadata.producer_id,
                metadata.producer_epoch,
                pending.coordinator_epoch,
                pending.committed,
                tuple(sorted(tps)),
            )
            destination = self._destinations.get(leader)
            if destination is None:
                destination = self._destinations[leader] = _Destination()
            destination.queue.append(_Queued(pending, marker))
            destination.wakeup.set()
            if destination.task is None or destination.task.done():
                destination.task = asyncio.ensure_future(self._send_loop(leader, destination))
        if unknown:
            self._later(lambda: self._enqueue(pending, unknown))
        if gone:
            self._maybe_complete(pending)

    def _later(self, action: Callable[[], None]) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()

        def run() -> None:
            self._timers.discard(handle)
            action()

        handle = loop.call_later(self.retry_backoff_s, run)
        self._timers.add(handle)

    # -- sending ------------------------------------------------------------------------------

    async def _send_loop(self, broker_id: int, destination: _Destination) -> None:
        while not self._closed:
            await destination.wakeup.wait()
            destination.wakeup.clear()
            batch, destination.queue = self._one_request(destination.queue)
            if destination.queue:
                destination.wakeup.set()
            batch = [q for q in batch if self._is_current(q.pending)]
            if not batch:
                continue
            try:
                results = await self._write(broker_id, [q.marker for q in batch])
            except MarkerDestinationUnreachable as exc:
                log.info("markers to broker %d not written: %s; retrying", broker_id, exc)
                for q in batch:
                    self._retry(q, q.marker.partitions)
                continue
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing markers on broker %d failed; retrying", broker_id)
                for q in batch:
                    self._retry(q, q.marker.partitions)
                continue
            for q, errors in zip(batch, results, strict=True):
                self._answered(broker_id, q, errors)

    @staticmethod
    def _one_request(queue: list[_Queued]) -> tuple[list[_Queued], list[_Queued]]:
        """What goes in one request: at most one marker per producer id (answers are keyed
        by producer id); the rest waits for the next one."""
        seen: set[int] = set()
        now: list[_Queued] = []
        rest: list[_Queued] = []
        for q in queue:
            if q.marker.producer_id in seen:
                rest.append(q)
            else:
                seen.add(q.marker.producer_id)
                now.append(q)
        return now, rest

    def _answered(
        self, broker_id: int, q: _Queued, errors: dict[TopicPartition, ErrorCode]
    ) -> None:
        pending = q.pending
        if not self._is_current(pending):
            return
        metadata = pending.metadata
        retry: set[TopicPartition] = set()
        for tp in q.marker.partitions:
            error = errors.get(tp, E.UNKNOWN_SERVER_ERROR)
            if error == E.NONE or error in _UNSUPPORTED:
                metadata.partitions.discard(tp)
            elif error in _FENCED:
                log.info(
                    "%s: broker %d refused its marker on %s (%s): its markers stop",
                    pending.transactional_id,
                    broker_id,
                    tp,
                    error.name,
                )
                self._forget(pending)
                return
            else:
                if error not in _RETRIABLE:
                    log.warning(
                        "%s: broker %d could not write its marker on %s: %s; retrying",
                        pending.transactional_id,
                        broker_id,
                        tp,
                        error.name,
                    )
                retry.add(tp)
        if retry:
            self._retry(q, retry)
        else:
            self._maybe_complete(pending)

    def _retry(self, q: _Queued, partitions: Iterable[TopicPartition]) -> None:
        tps = frozenset(partitions)
        self._later(lambda: self._enqueue(q.pending, tps))

    # -- completion ---------------------------------------------------------------------------

    def _maybe_complete(self, pending: PendingCompletion) -> None:
        if pending.metadata.partitions or not self._is_current(pending):
            return
        del self._pending[pending.transactional_id]
        self._write_completion(pending)

    def _write_completion(self, pending: PendingCompletion) -> None:
        if self._closed:
            return
        try:
            owned = self.manager.lookup(pending.transactional_id)
        except TxnError as exc:
            log.info("%s: not completed here (%s)", pending.transactional_id, exc.code.name)
            return
        if owned is None or owned.coordinator_epoch != pending.coordinator_epoch:
            log.info("%s: coordinator epoch moved on; not completed here", pending.transactional_id)
            return
        write = self.manager.append_transit(
            pending.transactional_id,
            pending.coordinator_epoch,
            pending.transit,
            _KEPT_PENDING_ON_COMPLETION,
        )

        def written(future: asyncio.Future[ErrorCode]) -> None:
            if future.cancelled():
                return
            exc = future.exception()
            error = E.UNKNOWN_SERVER_ERROR if exc is not None else future.result()
            if exc is not None:
                log.error(
                    "%s: completing the transaction failed: %r", pending.transactional_id, exc
                )
                return
            if error == E.NONE:
                log.debug("%s: transaction completed", pending.transactional_id)
            elif error in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
                log.info("%s: not completed here (%s)", pending.transactional_id, error.name)
            else:
                log.info(
                    "%s: writing the completion failed (%s); retrying",
                    pending.transactional_id,
                    error.name,
                )
                self._later(lambda: self._write_completion(pending))

        write.add_done_callback(written)
