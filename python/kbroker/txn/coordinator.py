"""The transaction coordinator: the flows of the transaction APIs for the ids it owns.

`TransactionCoordinator` (Kafka's TransactionCoordinator) decides each
request against an id's `TransactionMetadata` and writes the move to
``__transaction_state`` before it answers:

- `init_producer_id`: a new id gets a producer id; a known one the next
  epoch (KIP-360: a producer naming its current id and epoch may resume);
  the epochs of a producer id used up, a new producer id. An ongoing
  transaction of the previous instance is aborted first (its producer
  fenced) and the caller told CONCURRENT_TRANSACTIONS, to try again;
- `add_partitions` (AddPartitionsToTxn, AddOffsetsToTxn): the transaction
  starts or grows; `verify_partitions`: KIP-890's question, whether
  partitions are in the ongoing transaction (nothing written);
- `end_transaction` (EndTxn, and aborts the coordinator decides itself):
  PrepareCommit or PrepareAbort is written, the requester answered, and the
  marker channel writes the markers and then CompleteCommit/CompleteAbort;
- `describe` and `list_transactions` (the admin APIs);
- the periodic duties: transactions open past their timeout are aborted
  and their producer fenced (every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``), ids idle
  past ``transactional.id.expiration.ms`` are forgotten (every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``);
- creating ``__transaction_state`` on first use, and the election hooks
  (the replica manager's leadership listener).

Results are futures done once the record is stored (already done when
nothing was written); what follows a write runs in callbacks of the write
itself, so a requester that goes away stops nothing half way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kbroker.config import as_int
from kbroker.log import TopicPartition
from kbroker.log.log import now_ms
from kbroker.protocol.codec import MAX_STRING_BYTES
from kbroker.protocol.errors import ErrorCode
from kbroker.txn.log import TRANSACTION_STATE_TOPIC
from kbroker.txn.manager import Owned, TxnError, TxnListing, TxnStateManager, answered
from kbroker.txn.markers import MarkerWriter, TxnMarkerChannel
from kbroker.txn.state import (
    NO_PRODUCER_EPOCH,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
    epoch_exhausted,
)
from kbroker.txn.store import TxnLogStore

if TYPE_CHECKING:
    from kbroker.txn.host import TxnHost

log = logging.getLogger(__name__)

E = ErrorCode
S = TxnState

# Retries of a failed creation of __transaction_state: the first after the minimum,
# each next one twice as late, up to the maximum.
CREATE_BACKOFF_MIN_S = 0.1
CREATE_BACKOFF_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class TxnDescription:
    """DescribeTransactions' view of one id (zeros with an error, as Kafka answers)."""

    error: ErrorCode
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    partitions: list[TopicPartition] = field(default_factory=list)


class TransactionCoordinator:
    def __init__(
        self,
        host: TxnHost,
        write_markers: MarkerWriter,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.host = host
        self.config = host.config
        self.clock = clock
        self.store = TxnLogStore(host)
        self.manager = TxnStateManager(
            self.store, lambda: self.clock(), self._complete_pending, self._on_unloaded
        )
        self.markers = TxnMarkerChannel(self.manager, host.metadata_cache, write_markers)
        self._active = False
        self._duties: list[asyncio.Task[None]] = []
        self._create_backoff_s = 0.0
        self._create_retry_at = 0.0

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        self._active = True
        self._duties = [
            asyncio.ensure_future(
                self._every(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                    self.abort_timed_out,
                )
            ),
            asyncio.ensure_future(
                self._every(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                    self.expire_ids,
                )
            ),
        ]

    async def stop(self) -> None:
        self._active = False
        for task in self._duties:
            task.cancel()
        for task in self._duties:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._duties = []
        await self.markers.stop()
        await self.manager.stop()

    async def _every(self, interval_setting: str, duty: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(as_int(self.config[interval_setting]) / 1000)
            try:
                duty()
            except Exception:
                # A bug must not end the duty for good.
                log.exception("transaction coordinator duty failed a round")

    def on_leadership_change(self, tp: TopicPartition, leads: bool, leader_epoch: int) -> None:
        """The replica manager's leadership listener: a ``__transaction_state`` partition's
        leader epoch is its coordinator epoch."""
        if tp.topic != TRANSACTION_STATE_TOPIC:
            return
        if leads:
            self.manager.on_elected(tp.partition, leader_epoch)
        else:
            self.manager.on_resigned(tp.partition, leader_epoch)

    def _on_unloaded(self, index: int) -> None:
        self.markers.remove_partition(index)

    def _complete_pending(
        self,
        coordinator_epoch: int,
        committed: bool,
        metadata: TransactionMetadata,
        transit: TxnTransit,
    ) -> None:
        log.info(
            "%s: writing the markers of its %s found at load",
            metadata.transactional_id,
            "commit" if committed else "abort",
        )
        self.markers.add_markers(coordinator_epoch, committed, metadata, transit)

    def internal_topic_configs(self, name: str) -> dict[str, str]:
        """The settings of an internal topic this coordinator owns (none for others)."""
        return self.store.topic_configs() if name == TRANSACTION_STATE_TOPIC else {}

    def partition_of(self, transactional_id: str) -> int | None:
        """The ``__transaction_state`` partition of an id (None: no such topic yet)."""
        try:
            return self.manager.partition_of(transactional_id)
        except TxnError:
            return None

    def ensure_topic(self) -> bool:
        """Creates ``__transaction_state`` on first use; False when it cannot exist yet
        (being created by the cluster's controller, too few brokers, a full disk:
        retried by later requests after a backoff)."""
        if self.manager.partition_count() is not None:
            return True
        from kbroker.errors import TopicError

        if time.monotonic() < self._create_retry_at:
            return False
        try:
            self.store.create()
        except TopicError as exc:
            if self.store.partition_count() is not None:
                return True
            if exc.code != E.LEADER_NOT_AVAILABLE:
                self._create_backoff_s = min(
                    max(2 * self._create_backoff_s, CREATE_BACKOFF_MIN_S), CREATE_BACKOFF_MAX_S
                )
                self._create_retry_at = time.monotonic() + self._create_backoff_s
                log.warning("cannot create %s yet: %s", TRANSACTION_STATE_TOPIC, exc)
            return False
        self._create_backoff_s = 0.0
        log.info("created %s", TRANSACTION_STATE_TOPIC)
        return True

    def check(self) -> ErrorCode:
        """The error every request gets before its id is looked at, or NONE."""
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE
        if self.manager.partition_count() is None:
            # Producers find their coordinator first, which creates the topic.
            return E.NOT_COORDINATOR
        return E.NONE

    def coordination_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates the id now (FindCoordinator's question):
        COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR when
        another broker leads it."""
        error = self.check()
        if error != E.NONE:
            return error
        try:
            self.manager.lookup(transactional_id)
        except TxnError as exc:
            return exc.code
        return E.NONE

    def _max_timeout_ms(self) -> int:
        return as_int(self.config["transaction.max.timeout.ms"])

    # -- InitProducerId ------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> InitResult:
        """InitProducerId of a transactional producer; ``expected`` (KIP-360): the
        producer id and epoch it has (to resume with), or None."""
        if not transactional_id or len(transactional_id.encode()) > MAX_STRING_BYTES:
            # (Longer ones cannot be stored; requests never carry them.)
            return InitResult(E.INVALID_REQUEST)
        if not 0 < txn_timeout_ms <= self._max_timeout_ms():
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        error = self.check()
        if error != E.NONE:
            return InitResult(error)
        try:
            owned = self.manager.lookup(transactional_id)
            if owned is None:
                producer_id = await self._new_producer_id()
                owned = self.manager.put_if_absent(
                    TransactionMetadata(
                        transactional_id,
                        producer_id,
                        NO_PRODUCER_EPOCH,
                        txn_timeout_ms,
                        S.EMPTY,
                        txn_last_update_timestamp=self.clock(),
                    )
                )
            # Taken before deciding (nothing awaits after it): the epochs of the producer
            # id may be used up, and then a new one is what the producer gets.
            new_producer_id: int | None = None
            if owned.metadata.epoch_exhausted:
                new_producer_id = await self._new_producer_id()
                again = self.manager.lookup(transactional_id)
                if again is None:
                    raise TxnError(E.CONCURRENT_TRANSACTIONS)  # expired meanwhile: ask again
                owned = again
            transit = self._prepare_init(owned, txn_timeout_ms, expected, new_producer_id)
        except TxnError as exc:
            return InitResult(exc.code)
        if transit.state == S.PREPARE_EPOCH_FENCE:
            # The previous instance's transaction is aborted first; the producer is told to
            # try again (then the epoch is bumped once more, for it).
            error = await asyncio.shield(
                self._end_transaction(
                    transactional_id,
                    transit.producer_id,
                    transit.producer_epoch,
                    committed=False,
                    from_client=False,
                )
            )
            return InitResult(E.CONCURRENT_TRANSACTIONS if error == E.NONE else error)
        error = await asyncio.shield(
            self.manager.append_transit(transactional_id, owned.coordinator_epoch, transit)
        )
        if error != E.NONE:
            log.info("%s: InitProducerId answered %s", transactional_id, error.name)
            return InitResult(error)
        log.info(
            "%s: producer id %d epoch %d",
            transactional_id,
            transit.producer_id,
            transit.producer_epoch,
        )
        return InitResult(E.NONE, transit.producer_id, transit.producer_epoch)

    async def _new_producer_id(self) -> int:
        try:
            return await self.host.producer_ids.next_id()
        except OSError as exc:
            log.warning("cannot allocate a producer id: %s", exc)
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE) from None

    def _prepare_init(
        self,
        owned: Owned,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
        new_producer_id: int | None,
    ) -> TxnTransit:
        metadata = owned.metadata
        if metadata.pending:
            raise TxnError(E.CONCURRENT_TRANSACTIONS)
        if expected is not None:
            expected_id, expected_epoch = expected
            # A producer naming an id and epoch resumes only as the id's current producer
            # (or the one just created, or the previous one right after an id change).
            if not (
                metadata.producer_epoch == NO_PRODUCER_EPOCH
                or expected_id == metadata.producer_id
                or (expected_id == metadata.last_producer_id and epoch_exhausted(expected_epoch))
            ):
                raise TxnError(E.PRODUCER_FENCED)
        state = metadata.state
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise TxnError(E.CONCURRENT_TRANSACTIONS)
        if state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            now = self.clock()
            if metadata.epoch_exhausted:
                if expected is not None and expected[1] != metadata.producer_epoch:
                    raise TxnError(E.PRODUCER_FENCED)
                if new_producer_id is None:
                    # Used up while a new id was being taken: the producer asks again.
                    raise TxnError(E.CONCURRENT_TRANSACTIONS)
                return metadata.prepare_rotate_producer_id(
                    new_producer_id, txn_timeout_ms, now, expected is not None
                )
            bumped = metadata.prepare_increment_epoch(
                txn_timeout_ms, None if expected is None else expected[1], now
            )
            if isinstance(bumped, ErrorCode):
                raise TxnError(bumped)
            return bumped
        if state == S.ONGOING:
            return metadata.prepare_fence_epoch()
        raise IllegalTransition(
            f"{metadata.transactional_id}: found in state {state.display_name}, which is never kept"
        )

    # -- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> asyncio.Future[ErrorCode]:
        """Adds ``partitions`` to the producer's transaction (starting it if none is open)."""
        if not transactional_id:
            return answered(E.INVALID_REQUEST)
        error = self.check()
        if error != E.NONE:
            return answered(error)
        added = set(partitions)
        try:
            owned = self.manager.lookup(transactional_id)
            metadata = self._checked_producer(owned, producer_id, producer_epoch)
            if metadata.pending or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise TxnError(E.CONCURRENT_TRANSACTIONS)
            if metadata.state == S.ONGOING and added <= metadata.partitions:
                return answered(E.NONE)
            transit = metadata.prepare_add_partitions(added, self.clock())
        except TxnError as exc:
            return answered(exc.code)
        assert owned is not None
        return self.manager.append_transit(transactional_id, owned.coordinator_epoch, transit)

    @staticmethod
    def _checked_producer(
        owned: Owned | None, producer_id: int, producer_epoch: int
    ) -> TransactionMetadata:
        if owned is None or owned.metadata.producer_id != producer_id:
            raise TxnError(E.INVALID_PRODUCER_ID_MAPPING)
        if owned.metadata.producer_epoch != producer_epoch:
            raise TxnError(E.PRODUCER_FENCED)
        return owned.metadata

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890: for each partition, NONE when it is in the producer's ongoing
        transaction, TRANSACTION_ABORTABLE when not; every partition gets the same error
        when the producer is not the id's (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED),
        the transaction is ending (CONCURRENT_TRANSACTIONS) or the id is not served here."""
        tps = list(partitions)
        if not transactional_id:
            return dict.fromkeys(tps, E.INVALID_REQUEST)
        error = self.check()
        if error != E.NONE:
            return dict.fromkeys(tps, error)
        try:
            metadata = self._checked_producer(
                self.manager.lookup(transactional_id), producer_id, producer_epoch
            )
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise TxnError(E.CONCURRENT_TRANSACTIONS)
        except TxnError as exc:
            return dict.fromkeys(tps, exc.code)
        return {tp: E.NONE if tp in metadata.partitions else E.TRANSACTION_ABORTABLE for tp in tps}

    # -- EndTxn --------------------------------------------------------------------------

    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> asyncio.Future[ErrorCode]:
        """EndTxn: NONE once the transaction's PrepareCommit/PrepareAbort is stored (its
        markers follow), or at once when it has already ended that way."""
        error = self.check()
        if error != E.NONE:
            return answered(error)
        return self._end_transaction(
            transactional_id, producer_id, producer_epoch, committed, from_client=True
        )

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        from_client: bool,
    ) -> asyncio.Future[ErrorCode]:
        if not transactional_id:
            return answered(E.INVALID_REQUEST)
        fencing = False
        try:
            owned = self.manager.lookup(transactional_id)
            if owned is None or owned.metadata.producer_id != producer_id:
                raise TxnError(E.INVALID_PRODUCER_ID_MAPPING)
            metadata = owned.metadata
            # A client must name the current epoch; the coordinator's own aborts name a
            # newer one (the fence) or the current one (a timeout).
            if (
                from_client and producer_epoch != metadata.producer_epoch
            ) or producer_epoch < metadata.producer_epoch:
                raise TxnError(E.PRODUCER_FENCED)
            if metadata.pending and metadata.pending_state != S.PREPARE_EPOCH_FENCE:
                raise TxnError(E.CONCURRENT_TRANSACTIONS)
            state = metadata.state
            if state == S.ONGOING:
                target = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
                if target == S.PREPARE_ABORT and metadata.pending_state == S.PREPARE_EPOCH_FENCE:
                    # The fence: its abort is written with the bumped epoch.
                    fencing = True
                    metadata.pending_state = None
                    metadata.producer_epoch = producer_epoch
                    metadata.last_producer_epoch = NO_PRODUCER_EPOCH
                transit = metadata.prepare_abort_or_commit(target, self.clock())
            elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                # Already ended: the same end again is a retry, the other one a mistake.
                if committed == (state == S.COMPLETE_COMMIT):
                    return answered(E.NONE)
                raise TxnError(self._invalid_end(transactional_id, state, committed))
            elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                if committed == (state == S.PREPARE_COMMIT):
                    raise TxnError(E.CONCURRENT_TRANSACTIONS)
                raise TxnError(self._invalid_end(transactional_id, state, committed))
            elif state == S.EMPTY:
                raise TxnError(self._invalid_end(transactional_id, state, committed))
            else:
                raise IllegalTransition(
                    f"{transactional_id}: found in state {state.display_name}, never kept"
                )
        except TxnError as exc:
            return answered(exc.code)
        coordinator_epoch = owned.coordinator_epoch
        out: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        write = self.manager.append_transit(transactional_id, coordinator_epoch, transit)

        def written(future: asyncio.Future[ErrorCode]) -> None:
            try:
                error = future.result()
                result = self._after_prepare_written(
                    transactional_id,
                    coordinator_epoch,
                    producer_id,
                    producer_epoch,
                    committed,
                    fencing,
                    transit,
                    error,
                )
            except Exception as exc:
                log.error("%s: ending its transaction failed: %r", transactional_id, exc)
                result = E.UNKNOWN_SERVER_ERROR
            if not out.done():
                out.set_result(result)

        write.add_done_callback(written)
        return out

    @staticmethod
    def _invalid_end(transactional_id: str, state: TxnState, committed: bool) -> ErrorCode:
        log.debug(
            "%s: %s asked in state %s",
            transactional_id,
            "commit" if committed else "abort",
            state.display_name,
        )
        return E.INVALID_TXN_STATE

    def _after_prepare_written(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        fencing: bool,
        transit: TxnTransit,
        error: ErrorCode,
    ) -> ErrorCode:
        if error != E.NONE:
            if fencing:
                # The bumped epoch was never handed out: the next fence uses it again.
                with contextlib.suppress(TxnError):
                    owned = self.manager.lookup(transactional_id)
                    if owned is not None and owned.coordinator_epoch == coordinator_epoch:
                        owned.metadata.has_failed_epoch_fence = True
                        log.warning(
                            "%s: fencing epoch %d not written (%s)",
                            transactional_id,
                            transit.producer_epoch,
                            error.name,
                        )
            return error
        try:
            owned = self.manager.lookup(transactional_id)
        except TxnError as exc:
            return exc.code
        if owned is None or owned.coordinator_epoch != coordinator_epoch:
            return E.NOT_COORDINATOR
        metadata = owned.metadata
        if metadata.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        if metadata.pending:
            return E.CONCURRENT_TRANSACTIONS
        expected = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        if metadata.state != expected:
            return self._invalid_end(transactional_id, metadata.state, committed)
        complete = metadata.prepare_complete(self.clock())
        self.markers.add_markers(coordinator_epoch, committed, metadata, complete)
        return E.NONE

    # -- periodic duties -------------------------------------------------------------------

    def abort_timed_out(self) -> list[asyncio.Future[ErrorCode]]:
        """Aborts every transaction open past its timeout, fencing its producer (the
        abort is written with the next epoch, which the producer never gets)."""
        aborts = []
        for timed_out in self.manager.timed_out():
            try:
                owned = self.manager.lookup(timed_out.transactional_id)
            except TxnError:
                continue
            if owned is None:
                continue
            metadata = owned.metadata
            if metadata.producer_id != timed_out.producer_id or metadata.pending:
                continue
            log.info(
                "%s: transaction open for more than %d ms: aborting it, fencing producer %d "
                "epoch %d",
                timed_out.transactional_id,
                metadata.txn_timeout_ms,
                metadata.producer_id,
                metadata.producer_epoch,
            )
            transit = metadata.prepare_fence_epoch()
            abort = self._end_transaction(
                timed_out.transactional_id,
                transit.producer_id,
                transit.producer_epoch,
                committed=False,
                from_client=False,
            )
            abort.add_done_callback(
                functools.partial(_log_timed_out_abort, timed_out.transactional_id)
            )
            aborts.append(abort)
        return aborts

    def expire_ids(self) -> list[asyncio.Future[ErrorCode]]:
        """Forgets ids idle past ``transactional.id.expiration.ms`` with no transaction open."""
        return self.manager.expire_ids(as_int(self.config["transactional.id.expiration.ms"]))

    # -- admin ------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnDescription:
        error = self.check()
        if error == E.NONE and not transactional_id:
            error = E.INVALID_REQUEST
        if error != E.NONE:
            return TxnDescription(error, transactional_id)
        try:
            owned = self.manager.lookup(transactional_id)
        except TxnError as exc:
            return TxnDescription(exc.code, transactional_id)
        if owned is None or owned.metadata.state == S.DEAD:
            return TxnDescription(E.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        m = owned.metadata
        return TxnDescription(
            E.NONE,
            transactional_id,
            m.state.display_name,
            m.txn_timeout_ms,
            m.txn_start_timestamp,
            m.producer_id,
            m.producer_epoch,
            sorted(m.partitions),
        )

    def list_transactions(
        self, producer_ids: set[int], state_names: set[str], min_duration_ms: int
    ) -> tuple[ErrorCode, list[TxnListing], list[str]]:
        """(error, the matching ids, the state filters that name no state)."""
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE, [], []
        states: set[TxnState] = set()
        unknown: list[str] = []
        for name in state_names:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        try:
            found = self.manager.list_transactions(
                producer_ids, states if state_names else None, min_duration_ms
            )
        except TxnError as exc:
            return exc.code, [], unknown
        return E.NONE, found, unknown


def _log_timed_out_abort(transactional_id: str, future: asyncio.Future[ErrorCode]) -> None:
    if future.cancelled():
        return
    error = future.result()
    if error == E.NONE:
        log.info("%s: timed-out transaction rolled back", transactional_id)
    elif error in (E.INVALID_PRODUCER_ID_MAPPING, E.PRODUCER_FENCED, E.CONCURRENT_TRANSACTIONS):
        log.debug("%s: timed-out rollback not needed any more (%s)", transactional_id, error.name)
    else:
        log.warning(
            "%s: rolling back its timed-out transaction failed: %s", transactional_id, error.name
        )
