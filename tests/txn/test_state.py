"""The transaction state machine (`kbroker.txn.state`): the moves Kafka allows and their
checks, epoch bumps and fencing, driven directly."""

from __future__ import annotations

import pytest

from kbroker.log import TopicPartition
from kbroker.protocol import ErrorCode
from kbroker.txn.state import (
    MAX_EPOCH,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)

S = TxnState
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def fresh(producer_id: int = 7) -> TransactionMetadata:
    """A new id: its first InitProducerId gives epoch 0."""
    m = TransactionMetadata("tx", producer_id, -1, 60000, txn_last_update_timestamp=1)
    m.complete_transition(_ok(m.prepare_increment_epoch(60000, None, 10)))
    return m


def _ok(result: TxnTransit | ErrorCode) -> TxnTransit:
    assert not isinstance(result, ErrorCode), result
    return result


def test_a_transaction_from_start_to_commit_and_the_next_one_to_abort() -> None:
    m = fresh()
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.EMPTY, 0, -1)
    t = m.prepare_add_partitions({A0}, 100)
    assert m.pending_state == S.ONGOING and m.state == S.EMPTY  # nothing changes before
    m.complete_transition(t)
    assert (m.state, m.partitions, m.txn_start_timestamp) == (S.ONGOING, {A0}, 100)
    m.complete_transition(m.prepare_add_partitions({A1, B0}, 150))
    assert m.partitions == {A0, A1, B0} and m.txn_start_timestamp == 100  # started at 100
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 200))
    assert m.state == S.PREPARE_COMMIT and m.partitions == {A0, A1, B0}
    done = m.prepare_complete(210)
    assert done.state == S.COMPLETE_COMMIT and not done.partitions
    m.partitions.clear()  # the markers are written, partition by partition
    m.complete_transition(done)
    assert (m.state, m.txn_last_update_timestamp) == (S.COMPLETE_COMMIT, 210)
    # The next transaction starts from CompleteCommit, at its own time.
    m.complete_transition(m.prepare_add_partitions({B0}, 300))
    assert (m.state, m.txn_start_timestamp) == (S.ONGOING, 300)
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_ABORT, 310))
    m.complete_transition(m.prepare_complete(320))
    assert m.state == S.COMPLETE_ABORT and m.producer_epoch == 0


@pytest.mark.parametrize(
    ("state", "target"),
    [
        (S.EMPTY, S.PREPARE_COMMIT),
        (S.EMPTY, S.PREPARE_ABORT),
        (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
        (S.PREPARE_COMMIT, S.ONGOING),
        (S.PREPARE_ABORT, S.EMPTY),
        (S.ONGOING, S.EMPTY),
        (S.ONGOING, S.DEAD),
    ],
)
def test_moves_kafka_does_not_allow_are_refused(state: TxnState, target: TxnState) -> None:
    m = fresh()
    m.state = state
    with pytest.raises(IllegalTransition):
        if target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            m.prepare_abort_or_commit(target, 5)
        elif target == S.ONGOING:
            m.prepare_add_partitions({A0}, 5)
        elif target == S.DEAD:
            m.prepare_dead()
        else:
            m.prepare_increment_epoch(60000, None, 5)
    assert m.pending_state is None


def test_one_move_at_a_time_and_a_failed_write_changes_nothing() -> None:
    m = fresh()
    t = m.prepare_add_partitions({A0}, 100)
    with pytest.raises(IllegalTransition, match="under way"):
        m.prepare_add_partitions({A1}, 101)
    m.abort_transition()
    assert (m.state, m.partitions, m.pending_state) == (S.EMPTY, set(), None)
    # The move must be the one prepared.
    m.prepare_add_partitions({A0}, 100)
    with pytest.raises(IllegalTransition):
        m.complete_transition(m.snapshot())
    m.complete_transition(t)
    assert m.state == S.ONGOING


def test_epoch_bumps_of_init_producer_id_kip_360() -> None:
    m = fresh()
    # No expected epoch: the next one, no previous one kept.
    t = _ok(m.prepare_increment_epoch(30000, None, 20))
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms) == (1, -1, 30000)
    m.complete_transition(t)
    # The producer names its current epoch: bumped, the previous one kept.
    t = _ok(m.prepare_increment_epoch(30000, 1, 30))
    m.complete_transition(t)
    assert (m.producer_epoch, m.last_producer_epoch) == (2, 1)
    # It retries with the epoch it had (its answer was lost): the same answer, no bump.
    t = _ok(m.prepare_increment_epoch(30000, 1, 40))
    assert (t.producer_epoch, t.last_producer_epoch) == (2, 1)
    m.complete_transition(t)
    # Any other epoch is a fenced producer's.
    assert m.prepare_increment_epoch(30000, 0, 50) == ErrorCode.PRODUCER_FENCED
    assert m.pending_state is None


def test_fencing_bumps_the_epoch_once_even_when_its_write_failed() -> None:
    m = fresh()
    m.complete_transition(m.prepare_add_partitions({A0}, 100))
    fence = m.prepare_fence_epoch()
    assert (fence.state, fence.producer_epoch, fence.last_producer_epoch) == (
        S.PREPARE_EPOCH_FENCE,
        1,
        -1,
    )
    # PrepareEpochFence is never stored: completing it is refused.
    with pytest.raises(IllegalTransition, match="never stored"):
        m.complete_transition(fence)
    # The coordinator writes the abort with the bumped epoch; say that write failed.
    m.pending_state = None
    m.producer_epoch = fence.producer_epoch
    m.has_failed_epoch_fence = True
    again = m.prepare_fence_epoch()
    assert again.producer_epoch == 1  # not 2: epoch 1 was never handed out
    m.pending_state = None
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_ABORT, 200))
    m.complete_transition(m.prepare_complete(210))
    assert not m.has_failed_epoch_fence and m.state == S.COMPLETE_ABORT


def test_exhausted_epochs_rotate_the_producer_id() -> None:
    m = fresh()
    m.producer_epoch = MAX_EPOCH - 1
    assert m.epoch_exhausted
    with pytest.raises(IllegalTransition):
        m.prepare_increment_epoch(60000, None, 5)
    t = m.prepare_rotate_producer_id(99, 60000, 5, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch) == (
        99,
        0,
        7,
        MAX_EPOCH - 1,
    )
    m.complete_transition(t)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id) == (99, 0, 7)
    # No new id while a transaction is open.
    m.complete_transition(m.prepare_add_partitions({A0}, 6))
    with pytest.raises(IllegalTransition):
        m.prepare_rotate_producer_id(100, 60000, 7, record_last_epoch=False)


def test_names_and_ids_are_kafkas() -> None:
    assert [(s.value, s.display_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert TxnState.from_name("Ongoing") == S.ONGOING and TxnState.from_name("ongoing") is None
    assert {s for s in TxnState if s.expiration_allowed} == {
        S.EMPTY,
        S.COMPLETE_COMMIT,
        S.COMPLETE_ABORT,
    }
