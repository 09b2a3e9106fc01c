"""Transactions on one partition, in process on real logs: transactional batches open a
producer's transaction, markers close it, the last stable offset follows the open and
unreplicated transactions, aborts are indexed in Kafka's .txnindex format, Kafka's
fencing rules and KIP-890's verification guard hold, followers copy markers into the
same state, and truncation, restarts and a damaged index all come back to the state the
log says.

The cluster and real-client tests (tests/broker/test_transactions_wire.py and the cluster
ones) drive the same code through requests.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from kbroker._kbroker import build_batch, validate_batches
from kbroker.errors import ErrorCode, PartitionError
from kbroker.log import Log, LogConfig, TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.replication.partition import Partition
from kbroker.replication.producer_state import SNAPSHOT_FILE
from kbroker.replication.txn import AppendOrigin

TP = TopicPartition("t", 0)
LEADER, F1 = 1, 2
A, B, C = 1000, 2000, 3000  # producer ids


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def state(leader: int = LEADER, isr: list[int] | None = None, epoch: int = 1) -> PartitionState:
    return PartitionState(
        replicas=[LEADER, F1],
        leader=leader,
        leader_epoch=epoch,
        isr=[LEADER] if isr is None else isr,
    )


def batch(pid: int, seq: int, n: int = 2, epoch: int = 0, txn: bool = True) -> bytes:
    records = [(b"k%d" % (seq + i), b"v%d" % (seq + i), []) for i in range(n)]
    return build_batch(
        records,
        timestamp=now_ms(),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


class Replica:
    """A partition on a real log, leading (alone in its ISR unless told) or following."""

    def __init__(
        self,
        path: Path,
        leader: int = LEADER,
        isr: list[int] | None = None,
        config: LogConfig | None = None,
    ) -> None:
        self.path = path
        self.config = config or LogConfig()
        self.log = Log.open(path, TP, self.config)
        self.markers: list[tuple[int, bool, int]] = []
        self.p = Partition(
            self.log, state(leader, isr), LEADER, new=self.log.log_end_offset == 0, high_watermark=0
        )
        self.p.on_follower_marker = lambda _tp, pid, committed, offset: self.markers.append(
            (pid, committed, offset)
        )

    def produce(
        self,
        data: bytes,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        guard: object | None = None,
        verification: bool = False,
    ) -> int:
        infos = validate_batches(data, 1 << 20)
        result = self.p.append_as_leader_now(
            data,
            infos,
            1,
            1,
            False,
            origin,
            guard,
            verification,  # type: ignore[arg-type]
        )
        return result.base_offset

    def marker(self, pid: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        result = self.p.append_marker_as_leader_now(
            pid, epoch, coordinator_epoch, committed, 1, False
        )
        return result.base_offset

    @property
    def lso(self) -> int:
        return self.p.last_stable_offset

    def reopen(self, leader: int = LEADER) -> Replica:
        self.p.close()
        self.log.close()
        return Replica(self.path, leader, config=self.config)


def refused(code: ErrorCode) -> pytest.RaisesExc[PartitionError]:
    return pytest.raises(PartitionError, check=lambda e: e.code == code)


def txnindex_entries(path: Path) -> list[tuple[int, int, int, int, int]]:
    """Every entry of every .txnindex file in ``path``, read as Kafka's AbortedTxn:
    (version, producer id, first offset, last offset, last stable offset)."""
    out = []
    for f in sorted(path.glob("*.txnindex")):
        data = f.read_bytes()
        assert len(data) % 34 == 0, f
        out += [struct.unpack_from(">hqqqq", data, at) for at in range(0, len(data), 34)]
    return out


# -- the leader -------------------------------------------------------------------------


def test_a_transaction_holds_the_lso_until_its_marker_is_replicated(tmp_path: Path) -> None:
    r = Replica(tmp_path, isr=[LEADER, F1])
    assert r.produce(build_batch([(b"k", b"v", [])])) == 0
    r.p.update_follower_fetch_state(F1, 1, 0, 1)
    assert (r.p.high_watermark, r.lso) == (1, 1)
    assert r.produce(batch(A, 0)) == 1  # A's transaction opens at 1
    assert r.produce(batch(A, 2)) == 3
    r.p.update_follower_fetch_state(F1, 5, 0, 2)
    assert (r.p.high_watermark, r.lso) == (5, 1)
    commit = r.marker(A, committed=True)
    assert commit == 5
    # Decided, but the marker is not replicated: still unstable.
    assert (r.p.high_watermark, r.lso) == (5, 1)
    r.p.update_follower_fetch_state(F1, 6, 0, 3)
    assert (r.p.high_watermark, r.lso) == (6, 6)
    assert r.log.aborted_txns == []  # a commit is not indexed


def test_aborts_are_indexed_as_kafka_writes_them(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    assert r.produce(batch(A, 0)) == 0  # A opens at 0
    assert r.produce(batch(B, 0)) == 2  # B opens at 2
    assert r.lso == 0
    abort_a = r.marker(A, committed=False)
    assert abort_a == 4
    # The LSO the entry records: B's open transaction, the earliest of another producer.
    assert r.log.aborted_txns == [(A, 0, 4, 2)]
    assert r.lso == 2
    assert r.produce(batch(C, 0)) == 5
    r.marker(B, committed=True)  # 7
    abort_c = r.marker(C, committed=False)
    assert abort_c == 8
    assert r.lso == 9
    assert r.log.aborted_txns == [(A, 0, 4, 2), (C, 5, 8, 9)]
    assert txnindex_entries(r.log.dir) == [(0, A, 0, 4, 2), (0, C, 5, 8, 9)]
    # What a read_committed fetch from each offset is told.
    assert r.log.collect_aborted_txns(0, 9) == [(A, 0), (C, 5)]
    assert r.log.collect_aborted_txns(5, 9) == [(C, 5)]
    assert r.log.collect_aborted_txns(0, 2) == [(A, 0)]  # complete at A's LSO of 2
    assert r.log.collect_aborted_txns(9, 10) == []
    sl = r.p.read(0, 1 << 20, True, r.lso)
    assert sl is not None
    assert r.log.aborted_txns_for_slice(0, sl) == [(A, 0), (C, 5)]


def test_fencing_and_transaction_rules(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    r.produce(batch(A, 0, epoch=1))
    with refused(ErrorCode.INVALID_TXN_STATE):  # non-transactional while open
        r.produce(batch(A, 2, epoch=1, txn=False))
    with refused(ErrorCode.INVALID_PRODUCER_EPOCH):  # a zombie's data
        r.produce(batch(A, 2, epoch=0))
    with refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
        r.produce(batch(A, 7, epoch=1))
    with refused(ErrorCode.INVALID_PRODUCER_EPOCH):  # a zombie's marker
        r.marker(A, committed=True, epoch=0)
    r.marker(A, committed=False, epoch=1, coordinator_epoch=5)
    with refused(ErrorCode.TRANSACTION_COORDINATOR_FENCED):  # an old coordinator's marker
        r.marker(A, committed=True, epoch=1, coordinator_epoch=4)
    # The coordinator fences the producer: an abort with a bumped epoch.
    r.produce(batch(A, 2, epoch=1))
    r.marker(A, committed=False, epoch=2, coordinator_epoch=5)
    with refused(ErrorCode.INVALID_PRODUCER_EPOCH):
        r.produce(batch(A, 4, epoch=1))
    with refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):  # a new epoch starts at 0
        r.produce(batch(A, 4, epoch=2))
    end = r.log.log_end_offset
    r.produce(batch(A, 0, epoch=2))
    assert r.log.log_end_offset == end + 2
    # A marker of a producer with nothing open is written and closes nothing.
    r.marker(B, committed=True)
    assert r.lso == end  # A's new transaction is open
    entry = r.p.producers.entries()[B]
    assert (entry.epoch, entry.txn_first_offset) == (0, -1)


def test_a_retried_transactional_batch_is_a_duplicate(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    assert r.produce(batch(A, 0)) == 0
    assert r.produce(batch(A, 0)) == 0
    assert r.log.log_end_offset == 2


def test_coordinator_writes_skip_sequences_but_not_epochs(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    r.produce(batch(A, 0, epoch=3), AppendOrigin.COORDINATOR)
    r.produce(batch(A, 0, epoch=3), AppendOrigin.COORDINATOR)  # no duplicate check
    assert r.log.log_end_offset == 4
    with refused(ErrorCode.INVALID_PRODUCER_EPOCH):
        r.produce(batch(A, 0, epoch=2), AppendOrigin.COORDINATOR)


def test_kip890_only_a_verified_batch_opens_a_transaction(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    states = r.p.producers
    with refused(ErrorCode.INVALID_TXN_STATE):
        r.produce(batch(A, 0), verification=True)
    guard = states.maybe_start_verification(A, 0, 0)
    assert guard is not None
    # Another guard (a stale verification) does not pass; the one handed out does.
    with refused(ErrorCode.INVALID_TXN_STATE):
        r.produce(batch(A, 0), guard=object(), verification=True)
    assert r.produce(batch(A, 0), guard=guard, verification=True) == 0
    # The transaction is open here: no verification needed, none asked for.
    assert states.maybe_start_verification(A, 2, 0) is None
    assert r.produce(batch(A, 2), verification=True) == 2
    # The ABA case: verified, then the transaction aborted before the append.
    r.marker(A, committed=False)
    stale = guard
    with refused(ErrorCode.INVALID_TXN_STATE):
        r.produce(batch(A, 4), guard=stale, verification=True)
    # A later batch than one still being verified may not open the transaction.
    fresh = states.maybe_start_verification(A, 4, 0)
    with refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
        r.produce(batch(A, 6), guard=fresh, verification=True)
    assert r.produce(batch(A, 4), guard=fresh, verification=True) == 5


def test_an_open_transaction_keeps_its_producer_from_expiring(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    r.produce(batch(A, 0))
    r.produce(batch(B, 0, txn=False))
    states = r.p.producers
    assert states.remove_expired(now_ms() + 10 * states.expiration_ms) == 1
    assert states.producer_ids() == [A]


# -- followers, truncation, restarts ------------------------------------------------------


def copy(leader: Replica, follower: Replica) -> None:
    while follower.log.log_end_offset < leader.log.log_end_offset:
        sl = leader.log.read(follower.log.log_end_offset, 300)
        assert sl is not None
        follower.p.append_as_follower_now(sl.read_bytes())
    follower.p.update_follower_high_watermark(leader.p.high_watermark)


def txn_state(r: Replica) -> tuple[object, ...]:
    entries = {
        pid: (e.epoch, e.last_seq, e.coordinator_epoch, e.txn_first_offset)
        for pid, e in r.p.producers.entries().items()
    }
    return entries, r.lso, r.log.aborted_txns


def history(r: Replica) -> None:
    r.produce(batch(A, 0))
    r.produce(batch(B, 0))
    r.marker(A, committed=False, coordinator_epoch=2)
    r.produce(batch(C, 0, n=5))
    r.marker(B, committed=True, coordinator_epoch=3)
    r.produce(batch(B, 2))  # B's next transaction stays open


def test_a_follower_copies_markers_into_the_same_state(tmp_path: Path) -> None:
    lead = Replica(tmp_path / "lead")
    history(lead)
    follower = Replica(tmp_path / "follower", leader=F1)
    copy(lead, follower)
    assert txn_state(follower) == txn_state(lead)
    assert follower.markers == [(A, False, 4), (B, True, 10)]
    assert txnindex_entries(follower.log.dir) == txnindex_entries(lead.log.dir)
    # Leading now, it knows the open transactions (C's since 5, B's since 11): B goes on
    # and commits, C aborts, and the LSO moves to the end.
    follower.p.become_leader(state(LEADER, epoch=2))
    assert follower.lso == 5
    assert follower.produce(batch(B, 4)) == 13
    follower.marker(B, committed=True, coordinator_epoch=3)
    assert follower.lso == 5
    follower.marker(C, committed=False, coordinator_epoch=3)
    assert follower.lso == follower.log.log_end_offset
    assert follower.log.aborted_txns[-1] == (C, 5, 16, 17)


def test_truncating_below_a_marker_reopens_its_transaction(tmp_path: Path) -> None:
    r = Replica(tmp_path / "follower", leader=F1)
    lead = Replica(tmp_path / "lead")
    history(lead)
    copy(lead, r)
    assert r.log.aborted_txns == [(A, 0, 4, 2)]
    r.p.truncate_to(4)  # the abort marker goes
    assert r.log.aborted_txns == []
    assert txnindex_entries(r.log.dir) == []
    entries = r.p.producers.entries()
    assert entries[A].txn_first_offset == 0 and entries[B].txn_first_offset == 2
    assert r.lso == 0
    # The leader's marker comes again: the same state as the leader's.
    copy(lead, r)
    assert txn_state(r) == txn_state(lead)


def test_a_restart_restores_open_transactions_and_the_index(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    history(r)
    before = txn_state(r)
    again = r.reopen()
    assert txn_state(again) == before
    # Without the snapshot: replayed from the log.
    again.p.close()
    again.log.close()
    (again.log.dir / SNAPSHOT_FILE).unlink()
    third = Replica(tmp_path)
    assert txn_state(third) == before


def test_a_damaged_index_is_rebuilt_from_the_markers(tmp_path: Path) -> None:
    r = Replica(tmp_path)
    history(r)
    before = txn_state(r)
    r.p.close()
    r.log.close()
    (index,) = r.log.dir.glob("*.txnindex")
    data = bytearray(index.read_bytes())
    data[1] = 7  # an entry version Kafka never wrote
    index.write_bytes(bytes(data) + b"\x00" * 5)
    again = Replica(tmp_path)
    assert any(n.kind == "cut-txn-index" for n in again.log.recovery_notes)
    assert txn_state(again) == before
    assert txnindex_entries(again.log.dir) == [(0, A, 0, 4, 2)]


def test_the_index_lives_and_dies_with_its_segment(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, retention_ms=-1)
    r = Replica(tmp_path, config=config)
    aborted = []
    for i in range(6):
        pid = A + i
        first = r.produce(batch(pid, 0, n=3))
        aborted.append((pid, first, r.marker(pid, committed=False)))
    assert len(r.log.segment_base_offsets) > 2
    files = sorted(r.log.dir.glob("*.txnindex"))
    assert len(files) > 1
    # Each entry is in the segment of its marker.
    for f in files:
        base = int(f.name.split(".")[0])
        for _v, _pid, _first, last, _lso in txnindex_entries_of(f):
            assert base <= last
    assert [(p, f, last) for p, f, last, _ in r.log.aborted_txns] == aborted
    # Retention of the first segments takes their indexes along.
    bases = r.log.segment_base_offsets
    r.p.delete_records_before(bases[2])
    left = {int(f.name.split(".")[0]) for f in r.log.dir.glob("*.txnindex")}
    assert left and min(left) >= bases[2]
    assert all(last >= bases[2] for _, _, last, _ in r.log.aborted_txns)


def txnindex_entries_of(f: Path) -> list[tuple[int, int, int, int, int]]:
    data = f.read_bytes()
    return [struct.unpack_from(">hqqqq", data, at) for at in range(0, len(data), 34)]
