"""The transactional ids this coordinator owns, by ``__transaction_state`` partition.

An id lives in partition ``abs(java_hashcode(id)) % partitions`` of
``__transaction_state`` and is served by that partition's leader, whose
leader epoch is the *coordinator epoch* every marker it sends carries.
`TxnStateManager` owns (Kafka's TransactionStateManager does the same):

- which partitions are this coordinator's and at which coordinator epoch:
  `on_elected` loads a partition in the background (its ids are answered
  COORDINATOR_LOAD_IN_PROGRESS meanwhile; an empty partition is loaded at
  once) and hands each transaction found half-ended (PrepareCommit,
  PrepareAbort) to ``complete_pending``, which sends its markers again;
  `on_resigned` drops the partition (NOT_COORDINATOR then). Calls with an
  epoch older than the last one seen for the partition are ignored;
- the ids' metadata (`lookup`, `put_if_absent`);
- `append_transit`: a move's record written with acks=all, then the move
  completed, if the partition is still this coordinator's at the same epoch
  (Kafka's appendTransactionToLog, its errors mapped the same way);
- what the periodic duties look for: transactions open past their timeout
  (`timed_out`) and ids idle past ``transactional.id.expiration.ms``
  (`expire_ids`, which writes their tombstones and then forgets them);
- ListTransactions' view (`list_transactions`).

Everything runs on the event loop: a request sees a consistent state, and
a move in progress is marked on its metadata (``pending_state``) so no
second one starts while the first one's record is being written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kbroker.futures import then
from kbroker.protocol.errors import ErrorCode
from kbroker.txn.log import (
    TRANSACTION_STATE_TOPIC,
    TxnRecordError,
    key_bytes,
    parse_key,
    parse_value,
    partition_of,
    value_bytes,
)
from kbroker.txn.state import TransactionMetadata, TxnState, TxnTransit
from kbroker.txn.store import Record, TxnLogStore

log = logging.getLogger(__name__)

E = ErrorCode

# Append failures as the transaction APIs report them (Kafka's mapping).
_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}

# Tombstones of expired ids go in batches of at most this many key bytes.
_TOMBSTONE_BATCH_BYTES = 512 * 1024
# How long the tombstones of expired ids may wait for the replicas.
TOMBSTONE_TIMEOUT_MS = 30_000


class TxnError(Exception):
    """A transactional id this coordinator cannot serve now (the code says why)."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


@dataclass(frozen=True, slots=True)
class Owned:
    """An id's metadata and the coordinator epoch it is served at."""

    coordinator_epoch: int
    metadata: TransactionMetadata


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int
    ids: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TimedOut:
    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: TxnState


# (coordinator epoch, committed, metadata, its completing move): a transaction whose
# markers must be written (found half-ended at load).
CompletePending = Callable[[int, bool, TransactionMetadata, TxnTransit], None]


def answered(code: ErrorCode) -> asyncio.Future[ErrorCode]:
    future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
    future.set_result(code)
    return future


class TxnStateManager:
    def __init__(
        self,
        store: TxnLogStore,
        clock: Callable[[], int],
        complete_pending: CompletePending,
        on_unloaded: Callable[[int], None] = lambda _index: None,
    ) -> None:
        self.store = store
        self.clock = clock
        self._complete_pending = complete_pending
        self._on_unloaded = on_unloaded
        self._partitions: int | None = None
        self._owned: dict[int, _Partition] = {}
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}
        # The last coordinator epoch heard of per partition (older calls are stale).
        self._epochs: dict[int, int] = {}

    # -- partitions ------------------------------------------------------------------

    def partition_count(self) -> int | None:
        """Partitions ids map to; None while ``__transaction_state`` does not exist."""
        if self._partitions is None:
            self._partitions = self.store.partition_count()
        return self._partitions

    def partition_of(self, transactional_id: str) -> int:
        count = self.partition_count()
        if count is None:
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE)
        return partition_of(transactional_id, count)

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def owned_partitions(self) -> dict[int, int]:
        """The partitions served, with their coordinator epochs."""
        return {index: p.coordinator_epoch for index, p in self._owned.items()}

    def _is_stale(self, index: int, epoch: int) -> bool:
        current = self._epochs.get(index)
        if current is not None and epoch < current:
            log.info(
                "%s-%d: ignoring coordinator epoch %d, older than %d",
                TRANSACTION_STATE_TOPIC,
                index,
                epoch,
                current,
            )
            return True
        self._epochs[index] = epoch
        return False

    def on_elected(self, index: int, epoch: int) -> None:
        """This broker leads partition ``index`` at coordinator epoch ``epoch``: its ids
        are loaded (in the background unless there is nothing to read)."""
        if self._is_stale(index, epoch):
            return
        loading = self._loading.get(index)
        owned = self._owned.get(index)
        if (loading is not None and loading[0] == epoch) or (
            owned is not None and owned.coordinator_epoch == epoch
        ):
            return
        self._drop(index)
        self.partition_count()
        if self.store.is_empty(index):
            self._owned[index] = _Partition(epoch)
            log.debug(
                "%s-%d: coordinating (coordinator epoch %d, nothing to load)",
                TRANSACTION_STATE_TOPIC,
                index,
                epoch,
            )
            return
        log.info("%s-%d: loading (coordinator epoch %d)", TRANSACTION_STATE_TOPIC, index, epoch)
        self._loading[index] = (epoch, asyncio.ensure_future(self._load(index, epoch)))

    def on_resigned(self, index: int, epoch: int) -> None:
        """This broker no longer leads partition ``index``: its ids go."""
        if self._is_stale(index, epoch):
            return
        if self._drop(index):
            log.debug(
                "%s-%d: no longer coordinating (coordinator epoch %d)",
                TRANSACTION_STATE_TOPIC,
                index,
                epoch,
            )

    def _drop(self, index: int) -> bool:
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading[1].cancel()
        dropped = self._owned.pop(index, None) is not None or loading is not None
        if dropped:
            self._on_unloaded(index)
        return dropped

    async def stop(self) -> None:
        loads = [task for _, task in self._loading.values()]
        self._loading.clear()
        for task in loads:
            task.cancel()
        for task in loads:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._owned.clear()
        self._epochs.clear()

    async def _load(self, index: int, epoch: int) -> None:
        started = self.clock()
        try:
            loaded = await self._read(index)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, index)
            loaded = {}
        current = self._loading.get(index)
        if current is None or current[1] is not asyncio.current_task():
            return  # resigned (or elected again) meanwhile
        del self._loading[index]
        self._owned[index] = _Partition(epoch, loaded)
        log.info(
            "%s-%d: loaded %d transactional ids in %d ms (coordinator epoch %d)",
            TRANSACTION_STATE_TOPIC,
            index,
            len(loaded),
            self.clock() - started,
            epoch,
        )
        # Transactions ended but not completed: their markers go out again.
        now = self.clock()
        for metadata in loaded.values():
            if metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                committed = metadata.state == TxnState.PREPARE_COMMIT
                transit = metadata.prepare_complete(now)
                self._complete_pending(epoch, committed, metadata, transit)

    async def _read(self, index: int) -> dict[str, TransactionMetadata]:
        loaded: dict[str, TransactionMetadata] = {}
        async for chunk in self.store.read_partition(index):
            self._replay(index, chunk, loaded)
            await asyncio.sleep(0)
        return loaded

    @staticmethod
    def _replay(index: int, records: list[Record], into: dict[str, TransactionMetadata]) -> None:
        for key_data, value in records:
            try:
                key = parse_key(key_data)
                if value is None:
                    into.pop(key.transactional_id, None)
                else:
                    metadata = parse_value(key.transactional_id, value)
                    if metadata.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
                        raise TxnRecordError(f"a stored state {metadata.state.display_name}")
                    into[key.transactional_id] = metadata
            except TxnRecordError as exc:
                log.warning(
                    "skipping unreadable record in %s-%d: %s", TRANSACTION_STATE_TOPIC, index, exc
                )

    # -- ids -------------------------------------------------------------------------

    def lookup(self, transactional_id: str) -> Owned | None:
        """The id's metadata, None when this coordinator has none for it; TxnError when
        its partition is not this coordinator's (NOT_COORDINATOR) or still loading."""
        index = self.partition_of(transactional_id)
        if index in self._loading:
            raise TxnError(E.COORDINATOR_LOAD_IN_PROGRESS)
        partition = self._owned.get(index)
        if partition is None:
            raise TxnError(E.NOT_COORDINATOR)
        metadata = partition.ids.get(transactional_id)
        return None if metadata is None else Owned(partition.coordinator_epoch, metadata)

    def put_if_absent(self, metadata: TransactionMetadata) -> Owned:
        """The id's metadata: ``metadata`` unless it has one already; TxnError as lookup."""
        index = self.partition_of(metadata.transactional_id)
        if index in self._loading:
            raise TxnError(E.COORDINATOR_LOAD_IN_PROGRESS)
        partition = self._owned.get(index)
        if partition is None:
            raise TxnError(E.NOT_COORDINATOR)
        existing = partition.ids.setdefault(metadata.transactional_id, metadata)
        return Owned(partition.coordinator_epoch, existing)

    def all_metadata(self) -> Iterable[TransactionMetadata]:
        for partition in list(self._owned.values()):
            yield from list(partition.ids.values())

    # -- writes ----------------------------------------------------------------------

    def append_transit(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        transit: TxnTransit,
        keep_pending_on: frozenset[ErrorCode] = frozenset(),
    ) -> asyncio.Future[ErrorCode]:
        """Writes the record of ``transit`` (acks=all, at most the transaction timeout),
        then completes the move if the id is still served at ``coordinator_epoch``.

        The future gives NONE, or the error the requester gets (Kafka's mapping of
        append errors: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...). On an error the
        move is dropped (the metadata's pending state cleared), unless the error is in
        ``keep_pending_on`` (the caller retries the same move)."""
        try:
            owned = self.lookup(transactional_id)
        except TxnError as exc:
            return answered(exc.code)
        if owned is None or owned.coordinator_epoch != coordinator_epoch:
            return answered(E.NOT_COORDINATOR)
        write = self.store.append(
            self.partition_of(transactional_id),
            key_bytes(transactional_id),
            value_bytes(transit),
            self.clock(),
            transit.txn_timeout_ms,
        )
        return then(
            write,
            lambda error: self._after_append(
                transactional_id, coordinator_epoch, transit, error, keep_pending_on
            ),
        )

    def _after_append(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        transit: TxnTransit,
        error: ErrorCode,
        keep_pending_on: frozenset[ErrorCode],
    ) -> ErrorCode:
        if error != E.NONE:
            error = _APPEND_ERRORS.get(error, error)
        try:
            owned = self.lookup(transactional_id)
        except TxnError as exc:
            return exc.code if error == E.NONE else error
        if error == E.NONE:
            if owned is None or owned.coordinator_epoch != coordinator_epoch:
                log.info(
                    "%s: no longer coordinated at epoch %d once its move to %s was written",
                    transactional_id,
                    coordinator_epoch,
                    transit.state.display_name,
                )
                return E.NOT_COORDINATOR
            owned.metadata.complete_transition(transit)
            return E.NONE
        if (
            owned is not None
            and owned.coordinator_epoch == coordinator_epoch
            and error not in keep_pending_on
        ):
            owned.metadata.abort_transition()
        log.info(
            "%s: writing its move to %s failed: %s",
            transactional_id,
            transit.state.display_name,
            error.name,
        )
        return error

    # -- periodic duties -------------------------------------------------------------

    def timed_out(self) -> list[TimedOut]:
        """Transactions open longer than their timeout (no move under way)."""
        now = self.clock()
        return [
            TimedOut(m.transactional_id, m.producer_id, m.producer_epoch)
            for m in self.all_metadata()
            if m.pending_state is None
            and m.state == TxnState.ONGOING
            and m.txn_start_timestamp + m.txn_timeout_ms < now
        ]

    def expire_ids(self, expiration_ms: int) -> list[asyncio.Future[ErrorCode]]:
        """Writes the tombstones of ids idle for ``expiration_ms`` with no transaction
        open, and forgets each once its tombstone is stored (the futures: one a batch)."""
        now = self.clock()
        writes: list[asyncio.Future[ErrorCode]] = []
        for index, partition in list(self._owned.items()):
            expired = [
                m
                for m in partition.ids.values()
                if m.pending_state is None
                and m.state.expiration_allowed
                and m.txn_last_update_timestamp <= now - expiration_ms
            ]
            batch: list[tuple[TransactionMetadata, TxnTransit]] = []
            size = 0
            for metadata in expired:
                key_size = len(metadata.transactional_id.encode())
                if batch and size + key_size > _TOMBSTONE_BATCH_BYTES:
                    writes.append(self._write_tombstones(index, partition, batch, now))
                    batch, size = [], 0
                batch.append((metadata, metadata.prepare_dead()))
                size += key_size
            if batch:
                writes.append(self._write_tombstones(index, partition, batch, now))
        return writes

    def _write_tombstones(
        self,
        index: int,
        partition: _Partition,
        batch: list[tuple[TransactionMetadata, TxnTransit]],
        now: int,
    ) -> asyncio.Future[ErrorCode]:
        records: list[Record] = [(key_bytes(m.transactional_id), None) for m, _ in batch]
        write = self.store.append_many(index, records, now, TOMBSTONE_TIMEOUT_MS)

        def written(error: ErrorCode) -> ErrorCode:
            current = self._owned.get(index)
            for metadata, transit in batch:
                if (
                    error == E.NONE
                    and current is partition
                    and metadata.pending_state == TxnState.DEAD
                    and metadata.producer_epoch == transit.producer_epoch
                    and partition.ids.get(metadata.transactional_id) is metadata
                ):
                    del partition.ids[metadata.transactional_id]
                    log.info("transactional id %s expired", metadata.transactional_id)
                else:
                    metadata.abort_transition()
            if error != E.NONE:
                log.warning(
                    "%s-%d: expiring %d transactional ids failed: %s",
                    TRANSACTION_STATE_TOPIC,
                    index,
                    len(batch),
                    error.name,
                )
            return error

        return then(write, written)

    # -- ListTransactions ---------------------------------------------------------------

    def list_transactions(
        self, producer_ids: set[int], states: set[TxnState] | None, min_duration_ms: int
    ) -> list[TxnListing]:
        """The ids matching every filter given (no producer ids, states None or a negative
        duration: no filter); Dead ones never.
        TxnError(COORDINATOR_LOAD_IN_PROGRESS) while a partition loads."""
        if self._loading:
            raise TxnError(E.COORDINATOR_LOAD_IN_PROGRESS)
        now = self.clock()
        out = []
        for m in self.all_metadata():
            if m.state == TxnState.DEAD:
                continue
            if producer_ids and m.producer_id not in producer_ids:
                continue
            if states is not None and m.state not in states:
                continue
            if min_duration_ms >= 0 and now - m.txn_start_timestamp <= min_duration_ms:
                continue
            out.append(TxnListing(m.transactional_id, m.producer_id, m.state))
        return out
