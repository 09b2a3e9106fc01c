"""A partition leader's side of replication, in-process on real logs: the high watermark
is the smallest log end of the ISR, followers join the ISR when they reach it and leave it
when they lag, ISR changes count only once the controller has written them, a fenced
leader stops taking writes, and followers append the leader's batches as they are and
truncate where the logs part.

The controller is the test here: ISR changes a partition asks for are collected and
answered by hand (the cluster tests drive the real one).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kbroker._kbroker import build_batch
from kbroker.errors import ErrorCode, PartitionError
from kbroker.log import Log, LogConfig, TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.replication.checkpoint import read_high_watermarks, write_high_watermarks
from kbroker.replication.partition import Partition, monotonic_ms
from kbroker.replication.producer_state import SNAPSHOT_FILE

TP = TopicPartition("t", 0)
LEADER, F1, F2 = 1, 2, 3
LAG_MS = 10_000


def batch(n: int = 1, pid: int = -1, seq: int = -1) -> bytes:
    records = [(b"k", b"v" * 50, []) for _ in range(n)]
    if pid < 0:
        return build_batch(records, timestamp=1)
    # Now: a producer whose last write is older than producer.id.expiration.ms is forgotten.
    now = time.time_ns() // 1_000_000
    return build_batch(records, timestamp=now, producer_id=pid, producer_epoch=0, base_sequence=seq)


def state(leader: int = LEADER, epoch: int = 1, isr: list[int] | None = None, version: int = 0):
    return PartitionState(
        replicas=[LEADER, F1, F2],
        leader=leader,
        leader_epoch=epoch,
        isr=[LEADER, F1, F2] if isr is None else isr,
        version=version,
    )


class Leader:
    def __init__(self, path: Path, isr: list[int] | None = None) -> None:
        self.log = Log.open(path, TP, LogConfig())
        self.asked: list[list[int]] = []
        self.progress = 0
        self.p = Partition(self.log, state(isr=isr), LEADER, new=True, high_watermark=0)
        self.p.request_isr = lambda _p, isr: self.asked.append(isr)
        self.p.on_progress = lambda _tp: setattr(self, "progress", self.progress + 1)

    def append(self, n: int = 1, acks: int = -1, min_isr: int = 1) -> int:
        from kbroker._kbroker import validate_batches

        data = batch(n)
        infos = validate_batches(data, 1 << 20)
        return self.p.append_as_leader_now(data, infos, acks, min_isr, False).end_offset


def test_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path: Path) -> None:
    lead = Leader(tmp_path)
    end = lead.append(5)
    assert end == 5 and lead.p.high_watermark == 0  # nobody else has it yet
    lead.p.update_follower_fetch_state(F1, 5, 0, 1000)
    assert lead.p.high_watermark == 0  # F2 still has nothing
    lead.p.update_follower_fetch_state(F2, 3, 0, 1000)
    assert lead.p.high_watermark == 3
    done, code = lead.p.check_enough_replicas_reached(5, 2)
    assert (done, code) == (False, ErrorCode.NONE)
    lead.p.update_follower_fetch_state(F2, 5, 0, 1001)
    assert lead.p.high_watermark == 5
    assert lead.p.check_enough_replicas_reached(5, 2) == (True, ErrorCode.NONE)
    # A fetch from a broker that is no replica changes nothing.
    assert not lead.p.update_follower_fetch_state(9, 100, 0, 1002)


def test_lagging_follower_leaves_the_isr_once_the_controller_wrote_it(tmp_path: Path) -> None:
    # Followers in the ISR count as caught up when leading starts: not before t0.
    t0 = monotonic_ms()
    lead = Leader(tmp_path)
    lead.append(4)
    lead.p.update_follower_fetch_state(F1, 4, 0, t0)
    lead.p.update_follower_fetch_state(F2, 1, 0, t0)
    assert lead.p.high_watermark == 1
    lead.p.maybe_shrink_isr(t0 + LAG_MS, LAG_MS)
    assert lead.asked == []  # not lagging for longer than the bound yet
    now = t0 + 100 * LAG_MS  # F1 caught up at its fetch, F2 never did
    lead.p.update_follower_fetch_state(F1, 4, 0, now)
    lead.p.maybe_shrink_isr(now, LAG_MS)
    assert lead.asked == [[LEADER, F1]]
    # Pending: the high watermark still waits for F2, min.insync still counts it.
    assert lead.p.high_watermark == 1 and lead.p.maximal_isr == {LEADER, F1, F2}
    lead.p.maybe_shrink_isr(now + 1, LAG_MS)
    assert len(lead.asked) == 1  # one change at a time
    lead.p.isr_change_answered(ErrorCode.NONE, state(isr=[LEADER, F1], version=1))
    assert lead.p.isr == [LEADER, F1] and lead.p.state.version == 1
    assert lead.p.high_watermark == 4  # F2 no longer holds it back
    # acks=all with min.insync.replicas 3 is now refused before the append.
    with pytest.raises(PartitionError) as refused:
        lead.append(1, acks=-1, min_isr=3)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS


def test_follower_that_reaches_the_high_watermark_joins_the_isr(tmp_path: Path) -> None:
    lead = Leader(tmp_path, isr=[LEADER, F1])
    lead.append(3)
    lead.p.update_follower_fetch_state(F1, 3, 0, 1)
    assert lead.p.high_watermark == 3
    lead.p.update_follower_fetch_state(F2, 2, 0, 1)
    assert lead.asked == []  # below the high watermark
    lead.p.update_follower_fetch_state(F2, 3, 0, 2)
    assert lead.asked == [[LEADER, F1, F2]]
    # Pending expansion: the high watermark already waits for F2 too.
    lead.append(2)
    lead.p.update_follower_fetch_state(F1, 5, 0, 3)
    assert lead.p.high_watermark == 3
    # The controller refuses (its state changed since): back to the written ISR.
    lead.p.isr_change_answered(ErrorCode.INVALID_UPDATE_VERSION, None)
    assert lead.p.pending_isr is None and lead.p.isr == [LEADER, F1]


def test_fenced_leader_stops_taking_writes_until_its_next_order(tmp_path: Path) -> None:
    lead = Leader(tmp_path, isr=[LEADER, F1])
    lead.append(1)
    lead.p.update_follower_fetch_state(F2, 1, 0, 1)
    assert lead.asked
    lead.p.isr_change_answered(ErrorCode.FENCED_LEADER_EPOCH, None)
    assert not lead.p.is_leader
    with pytest.raises(PartitionError) as refused:
        lead.append(1, acks=1)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert lead.p.check_enough_replicas_reached(1, 1) == (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    lead.p.become_leader(state(epoch=2, isr=[LEADER, F1]))
    assert lead.p.is_leader and lead.append(1, acks=1) == 2


def test_new_leader_records_where_its_epoch_starts(tmp_path: Path) -> None:
    lead = Leader(tmp_path)
    lead.append(3)  # epoch 1 at 0
    lead.p.become_follower(state(leader=F1, epoch=2))
    lead.p.become_leader(state(epoch=3))
    assert lead.log.epoch_entries == [(1, 0), (3, 3)]
    assert lead.log.end_offset_for_epoch(1) == (1, 3)
    assert lead.log.end_offset_for_epoch(2) == (1, 3)
    # Followers start unknown: the high watermark waits for their fetches.
    assert all(f.log_end_offset == -1 for f in lead.p.followers.values())


def test_follower_appends_as_is_and_rebuilds_producer_state(tmp_path: Path) -> None:
    leader_log = Log.open(tmp_path / "leader", TP, LogConfig())
    leader_log.append(batch(2, pid=7, seq=0), leader_epoch=4)
    leader_log.append(batch(1), leader_epoch=5)
    data = leader_log.read(0, 1 << 20).read_bytes()
    follower = Partition(
        Log.open(tmp_path / "follower", TP, LogConfig()),
        state(leader=F1, epoch=5),
        LEADER,
        new=True,
        high_watermark=0,
    )
    follower.append_as_follower_now(data)
    assert follower.log.read(0, 1 << 20).read_bytes() == data
    assert follower.log.epoch_entries == [(4, 0), (5, 2)]
    # The idempotent producer's batch is known: a retry of it would be a duplicate.
    dup = follower.producers.check(7, 0, 0, 1)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 1)
    follower.update_follower_high_watermark(10)
    assert follower.high_watermark == 3  # bounded by its own log end
    follower.truncate_to(2)
    assert follower.log.log_end_offset == 2 and follower.high_watermark == 2
    assert follower.log.epoch_entries == [(4, 0)]


def test_high_watermark_checkpoint_round_trip(tmp_path: Path) -> None:
    hws = {TopicPartition("a", 0): 5, TopicPartition("b.c-d", 12): 0}
    write_high_watermarks(tmp_path, hws)
    assert read_high_watermarks(tmp_path) == hws
    assert (tmp_path / "replication-offset-checkpoint").read_text().splitlines()[:2] == ["0", "2"]
    (tmp_path / "replication-offset-checkpoint").write_text("0\n3\na 0 5\n")
    assert read_high_watermarks(tmp_path) == {}  # damaged: nothing trusted
    assert read_high_watermarks(tmp_path / "missing") == {}


def test_producer_state_is_saved_when_the_log_rolls(tmp_path: Path) -> None:
    """So a restart after kill -9 replays only what came after the last roll."""
    config = LogConfig(segment_bytes=1024)
    lead = Partition(
        Log.open(tmp_path, TP, config), state(isr=[LEADER]), LEADER, new=True, high_watermark=0
    )
    from kbroker._kbroker import validate_batches

    snapshot = lead.log.dir / SNAPSHOT_FILE
    seq = 0
    while lead.log.segment_count < 3:
        data = batch(2, pid=42, seq=seq)
        lead.append_as_leader_now(data, validate_batches(data, 1 << 20), 1, 1, False)
        seq += 2
    saved = json.loads(snapshot.read_text())
    assert 0 < saved["offset"] <= lead.log.log_end_offset
    assert "42" in saved["producers"]
    # No close (a crash): reopened, the producer's last batch is still known as a duplicate.
    reopened = Partition(Log.open(tmp_path, TP, config), state(isr=[LEADER]), LEADER)
    dup = reopened.producers.check(42, 0, seq - 2, 1)
    assert dup is not None and dup.last_offset == lead.log.log_end_offset - 1


def test_leader_alone_in_the_isr_commits_its_whole_log_at_once(tmp_path: Path) -> None:
    """A restarted leader with no checkpointed high watermark (kill -9 before the first
    checkpoint), alone in its ISR: everything it has is committed."""
    log_ = Log.open(tmp_path, TP, LogConfig())
    log_.append(batch(4), leader_epoch=1)
    alone = Partition(log_, state(isr=[LEADER]), LEADER, high_watermark=0)
    assert alone.high_watermark == 4
    # With followers in the ISR it waits for them.
    log2 = Log.open(tmp_path / "other", TP, LogConfig())
    log2.append(batch(4), leader_epoch=1)
    assert Partition(log2, state(), LEADER, high_watermark=1).high_watermark == 1
