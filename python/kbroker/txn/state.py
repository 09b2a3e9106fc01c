"""One transactional id's state and the state machine it moves through.

`TransactionMetadata` is what the coordinator keeps per transactional id: its
producer id and epoch (and the previous ones, for KIP-360 retries), its
transaction timeout, its `TxnState`, the partitions of its ongoing transaction
and two timestamps. It changes in two steps, as in Kafka: a ``prepare_*``
method checks the move and returns the `TxnTransit` to write (the metadata's
``pending_state`` is set meanwhile, so no second move starts), and once the
record is stored `complete_transition` applies it. A failed write drops the
pending state (`abort_transition`) and nothing changed.

The states and the moves between them are Kafka's (TransactionState): Empty
-> Ongoing (partitions added) -> PrepareCommit / PrepareAbort (EndTxn, the
record written before any marker) -> CompleteCommit / CompleteAbort (every
marker written) -> Ongoing again, or Empty (InitProducerId bumps the epoch),
or Dead (the id expired: a tombstone, never a stored state).
PrepareEpochFence is the moment between deciding to fence an ongoing
transaction's producer (InitProducerId of a new instance, or a timeout) and
writing its PrepareAbort with the bumped epoch; it is never stored either.
Their numbers are what ``__transaction_state`` stores and their names what
DescribeTransactions and ListTransactions show.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NoReturn

from kbroker.log import TopicPartition
from kbroker.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# An epoch this high is the last a producer id may use: one more is kept for fencing.
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    """A transaction's state; the value is the id ``__transaction_state`` stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka's admin APIs show (``PrepareCommit``)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)

    @property
    def expiration_allowed(self) -> bool:
        """Whether an idle transactional id in this state may expire."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def has_open_transaction(self) -> bool:
        return self in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TxnState
# The states a state may be entered from.
_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransition(RuntimeError):
    """A move the state machine does not allow: a bug in the caller, never a client's."""


def epoch_exhausted(epoch: int) -> bool:
    """No further epoch may be handed out for this producer id (one is kept for fencing)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The state a transactional id moves to: what its ``__transaction_state`` record holds
    (plus the previous producer id and epoch, which only the coordinator's memory keeps)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    """One transactional id as its coordinator knows it (see the module docstring)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # The state a move under way goes to (its record is being written), or None.
    pending_state: TxnState | None = None
    # A fencing epoch bump whose record failed to be written: the next fence reuses
    # that epoch instead of bumping again (it was never given to any producer).
    has_failed_epoch_fence: bool = False

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    def snapshot(self) -> TxnTransit:
        """The current state as a transit (no move)."""
        return TxnTransit(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    # -- preparing moves -----------------------------------------------------------

    def prepare_fence_epoch(self) -> TxnTransit:
        """Fences the producer of the ongoing transaction: the epoch goes up by one (unless
        a previous fence's write failed: that epoch was never handed out), to be aborted."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(
                f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}, the maximum"
            )
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            TxnState.PREPARE_EPOCH_FENCE,
            self.producer_id,
            epoch,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_increment_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | ErrorCode:
        """InitProducerId: the next epoch of the same producer id (Empty), or
        PRODUCER_FENCED when ``expected_epoch`` (KIP-360: the caller's current epoch) is
        neither the current epoch nor the previous one (a retry of a bump that worked)."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: producer epoch exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # The caller's bump worked but it never heard: the same answer again.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare(
            TxnState.EMPTY,
            self.producer_id,
            epoch,
            last_epoch,
            txn_timeout_ms,
            frozenset(),
            -1,
            now_ms,
        )

    def prepare_rotate_producer_id(
        self, producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """InitProducerId when the epochs of the producer id are used up: a new id, epoch 0."""
        if self.state.has_open_transaction:
            raise IllegalTransition(
                f"{self.transactional_id}: cannot change producer id with a transaction open"
            )
        return self._prepare(
            TxnState.EMPTY,
            producer_id,
            0,
            self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            frozenset(),
            -1,
            now_ms,
        )

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransit:
        """AddPartitionsToTxn: the transaction (started now, unless it already is) with
        ``added`` among its partitions."""
        start = (
            now_ms
            if self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            else self.txn_start_timestamp
        )
        return self._prepare(
            TxnState.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions | added),
            start,
            now_ms,
        )

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int) -> TxnTransit:
        """EndTxn: PrepareCommit or PrepareAbort, over the same partitions."""
        return self._prepare(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Every marker written: CompleteCommit or CompleteAbort, with no partitions."""
        state = (
            TxnState.COMPLETE_COMMIT
            if self.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        # The fence (if this completes one) is now on disk.
        self.has_failed_epoch_fence = False
        return self._prepare(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_dead(self) -> TxnTransit:
        """The id expires: its tombstone is written, then it is dropped."""
        return self._prepare(
            TxnState.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def _prepare(
        self,
        state: TxnState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        txn_timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start_timestamp: int,
        update_timestamp: int,
    ) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: moving to {state.display_name} while a move to "
                f"{self.pending_state.display_name} is under way"
            )
        if producer_id < 0:
            raise IllegalTransition(f"{self.transactional_id}: producer id {producer_id}")
        if state != TxnState.DEAD and epoch < 0:
            raise IllegalTransition(f"{self.transactional_id}: producer epoch {epoch}")
        if self.state not in _PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.display_name} cannot move to "
                f"{state.display_name}"
            )
        self.pending_state = state
        return TxnTransit(
            producer_id,
            self.producer_id,
            epoch,
            last_epoch,
            txn_timeout_ms,
            state,
            partitions,
            start_timestamp,
            update_timestamp,
        )

    # -- completing moves ----------------------------------------------------------

    def abort_transition(self) -> None:
        """The move's record was not written: nothing changed."""
        self.pending_state = None

    def complete_transition(self, transit: TxnTransit) -> None:
        """The move's record is stored: the metadata becomes ``transit``. Checks that it
        is the move prepared and that it is consistent with the state it leaves."""
        target = self.pending_state
        if target is None or target != transit.state:
            self._inconsistent(transit, "it is not the move under way")
        same_producer = (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )
        if target == TxnState.EMPTY:
            bumped = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id
            )
            if (
                not (transit.producer_epoch == self.producer_epoch or bumped)
                or transit.partitions
                or transit.txn_start_timestamp != -1
            ):
                self._inconsistent(transit, "not a valid epoch bump")
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif target == TxnState.ONGOING:
            if (
                not same_producer
                or not self.partitions <= transit.partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
            ):
                self._inconsistent(transit, "not an addition of partitions")
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.partitions |= transit.partitions
        elif target in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if (
                not same_producer
                or self.partitions != transit.partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or self.txn_start_timestamp != transit.txn_start_timestamp
            ):
                self._inconsistent(transit, "not the end of this transaction")
        elif target in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if (
                not same_producer
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or transit.txn_start_timestamp == -1
            ):
                self._inconsistent(transit, "not the completion of this transaction")
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.partitions.clear()
        else:
            # PrepareEpochFence becomes PrepareAbort before anything is written, and Dead
            # ends in the id's removal: neither is ever a stored state to complete.
            self._inconsistent(transit, f"{target.display_name} is never stored")
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = target

    def _inconsistent(self, transit: TxnTransit, why: str) -> NoReturn:
        raise IllegalTransition(
            f"{self.transactional_id}: cannot complete the move from {self.state.display_name} "
            f"to {transit} ({why})"
        )
