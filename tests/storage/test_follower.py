"""A follower's storage: a leader's batches copied with append_as_follower, the
leader-epoch cache, truncation, and recovery after a follower is killed mid-copy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kbroker._kbroker import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
    build_batch,
)
from kbroker.log.log import Log, LogConfig, ProducerBatch, TopicPartition
from kbroker.replication.producer_state import ProducerStateManager

TS = 1_700_000_000_000
TP = TopicPartition("orders", 0)


def open_log(root: Path, segment_bytes: int = 4096) -> Log:
    return Log.open(root, TP, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256))


def records(n: int, size: int = 40) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(b"k%d" % i, bytes([i % 256]) * size, []) for i in range(n)]


ProducerFacts = tuple[int, int, int, int, int, int]


def fill_leader(leader: Log, first_epoch: int = 0) -> list[ProducerFacts]:
    """Batches of every codec over three leader epochs from ``first_epoch``, with
    idempotent producer batches and LogAppendTime ones among them. Returns the
    producer batches' (base offset, last offset, producer id, epoch, sequence, max ts)."""
    seq = 0
    produced = []
    for epoch in (first_epoch, first_epoch + 2, first_epoch + 5):
        for i in range(12):
            ts = TS + 100 * epoch + i
            if i % 4 == 1:
                data = build_batch(
                    records(3), timestamp=ts, producer_id=77, producer_epoch=1, base_sequence=seq
                )
                seq += 3
            else:
                data = build_batch(records(1 + i % 5), codec=i % 5, timestamp=ts)
            info = leader.append(data, epoch, log_append_time=(i == 7))
            produced += [facts(b) for b in info.producer_batches]
    return produced


def facts(b: ProducerBatch) -> ProducerFacts:
    return (
        b.base_offset,
        b.last_offset,
        b.producer_id,
        b.producer_epoch,
        b.base_sequence,
        b.max_timestamp,
    )


def whole_log(log: Log, start: int | None = None) -> bytes:
    """Every byte of the log from ``start`` (default: the log start) to its end."""
    out = bytearray()
    offset = log.log_start_offset if start is None else start
    while (sl := log.read(offset, 1 << 20)) is not None:
        out += sl.read_bytes()
        offset = log_end_of(bytes(out))
    return bytes(out)


def log_end_of(data: bytes) -> int:
    """The offset after the last whole batch in ``data``."""
    pos, end = 0, 0
    while pos + 61 <= len(data):
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        delta = int.from_bytes(data[pos + 23 : pos + 27], "big", signed=True)
        end = base + delta + 1
        pos += 12 + length
    return end


def replicate(leader: Log, follower: Log, max_bytes: int = 700) -> list[int]:
    """Copies the leader's log as a fetcher would; returns each append's last epoch."""
    epochs = []
    while follower.log_end_offset < leader.log_end_offset:
        sl = leader.read(follower.log_end_offset, max_bytes)
        assert sl is not None
        info = follower.append_as_follower(sl.read_bytes())
        assert info.last_offset + 1 == follower.log_end_offset
        epochs.append(info.last_leader_epoch)
    return epochs


def test_a_follower_copy_reads_like_the_leader(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    fill_leader(leader)
    epochs = replicate(leader, follower)
    assert epochs == sorted(epochs) and epochs[-1] == 5

    assert follower.log_end_offset == leader.log_end_offset
    assert whole_log(follower) == whole_log(leader)
    assert follower.segment_count > 1
    assert follower.epoch_entries == leader.epoch_entries
    assert [e for e, _ in follower.epoch_entries] == [0, 2, 5]
    assert follower.latest_epoch == 5
    for epoch in range(-1, 8):
        assert follower.end_offset_for_epoch(epoch) == leader.end_offset_for_epoch(epoch)
    # Reads by offset land on the same batches; time lookups agree.
    for offset in range(follower.log_end_offset):
        a, b = follower.read(offset, 1), leader.read(offset, 1)
        assert a is not None and b is not None
        assert a.read_bytes() == b.read_bytes()
    for ts in (0, TS, TS + 5, TS + 203, TS + 511, TS + 10**9):
        assert follower.offset_for_timestamp(ts) == leader.offset_for_timestamp(ts)
    assert follower.max_timestamp_and_offset() == leader.max_timestamp_and_offset()

    # Both reopen to the same state.
    follower.close()
    follower = open_log(tmp_path / "follower")
    assert whole_log(follower) == whole_log(leader)
    assert follower.epoch_entries == leader.epoch_entries


def test_producer_batches_rebuild_a_followers_producer_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    produced = fill_leader(leader)
    assert len(produced) == 9
    state = ProducerStateManager()
    copied = []
    while follower.log_end_offset < leader.log_end_offset:
        sl = leader.read(follower.log_end_offset, 500)
        assert sl is not None
        for b in follower.append_as_follower(sl.read_bytes()).producer_batches:
            assert not (b.is_transactional or b.is_control)
            copied.append(facts(b))
            state.update(
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
                b.last_offset - b.base_offset,
                b.base_offset,
                b.max_timestamp,
            )
    assert copied == produced
    # A retry of the producer's last batch is a duplicate at the same offsets.
    duplicate = state.check(77, 1, 24, 2)
    assert duplicate is not None
    assert (duplicate.first_offset, duplicate.last_offset) == produced[-1][:2]
    assert state.check(77, 1, 27, 2) is None


def test_batches_behind_the_log_end_are_refused_and_change_nothing(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(build_batch(records(3), base_offset=0, timestamp=TS))
    before = whole_log(follower)
    stale = build_batch(records(4), base_offset=1, timestamp=TS)
    with pytest.raises(UnexpectedAppendOffsetError) as err:
        follower.append_as_follower(stale)
    assert isinstance(err.value, OffsetOutOfRangeError)
    assert err.value.args[1:] == (1, 4, 3)
    # Out of order within one answer; a flipped byte; a torn batch.
    two = build_batch(records(2), base_offset=3, timestamp=TS)
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(two + build_batch(records(1), base_offset=4, timestamp=TS))
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(two[:-1] + bytes([two[-1] ^ 1]))
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(two[:-1])
    assert follower.log_end_offset == 3
    assert whole_log(follower) == before
    # A gap the leader's cleaner left is kept.
    gap = follower.append_as_follower(build_batch(records(1), base_offset=10, timestamp=TS))
    assert (gap.first_offset, follower.log_end_offset) == (10, 11)


def test_a_follower_starts_where_the_leaders_log_start_cuts_a_batch(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    for i in range(5):
        leader.append(build_batch(records(3), timestamp=TS + i), 4)
    assert leader.delete_records_before(7) == 7  # inside batch 6..8
    follower = open_log(tmp_path / "follower")
    # The fetcher learns the leader's range and starts there ...
    follower.truncate_fully_and_start_at(leader.log_start_offset)
    sl = leader.read(follower.log_end_offset, 1 << 20)
    assert sl is not None
    data = sl.read_bytes()
    # ... but the first batch starts before it: on an empty log, start at its base.
    with pytest.raises(UnexpectedAppendOffsetError) as err:
        follower.append_as_follower(data)
    _, first, last, end = err.value.args
    assert (first, last, end) == (6, 8, 7)
    assert follower.log_start_offset == follower.log_end_offset == end
    follower.truncate_fully_and_start_at(first)
    follower.append_as_follower(data)
    assert follower.log_end_offset == leader.log_end_offset
    assert whole_log(follower, 6) == whole_log(leader, 7)
    assert follower.epoch_entries == [(4, 6)]


def test_truncation_drops_epochs_and_never_goes_below_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "l", segment_bytes=1024)
    for epoch in (1, 3, 4):
        for i in range(8):
            log.append(build_batch(records(2), timestamp=TS + i), epoch)
    assert log.epoch_entries == [(1, 0), (3, 16), (4, 32)]
    log.truncate_to(33)  # inside the first epoch-4 batch
    assert log.log_end_offset == 32
    assert log.epoch_entries == [(1, 0), (3, 16)]
    assert log.end_offset_for_epoch(3) == (3, 32)
    assert log.end_offset_for_epoch(4) == (-1, -1)
    assert log.read(31, 100) is not None
    assert log.offset_for_timestamp(TS + 7) == (14, TS + 7)

    log.delete_records_before(20)
    assert log.epoch_entries == [(3, 20)]
    assert log.end_offset_for_epoch(1) == (1, 20)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(19)
    log.truncate_to(20)
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (20, 20, [])

    log.append(build_batch(records(1), timestamp=TS), 6)
    log.maybe_assign_epoch_start_offset(7, log.log_end_offset)
    assert log.epoch_entries == [(6, 20), (7, 21)]
    assert log.end_offset_for_epoch(6) == (6, 21)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (100, 100, [])
    log.close()
    log = open_log(tmp_path / "l", segment_bytes=1024)
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (100, 100, [])


def test_the_checkpoint_is_kafkas_text_and_a_damaged_one_is_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path / "l")
    for epoch in (0, 0, 3, 9):
        log.append(build_batch(records(2), timestamp=TS), epoch)
    log.close()
    path = tmp_path / "l" / TP.dirname / "leader-epoch-checkpoint"
    assert path.read_text() == "0\n3\n0 0\n3 4\n9 6\n"
    path.write_text("0\n3\n0 0\n3 x\n9 6\n")
    log = open_log(tmp_path / "l")
    assert log.epoch_entries == [(0, 0), (3, 4), (9, 6)]
    assert [n.kind for n in log.recovery_notes] == ["bad-checkpoint"]
    assert path.read_text() == "0\n3\n0 0\n3 4\n9 6\n"


# A follower process: copies the first answers of the leader (one file per fetch
# answer) into its log, prints its log end and waits to be killed.
_FOLLOWER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from kbroker.log import Log, LogConfig, TopicPartition

    root, answers = Path(sys.argv[1]), sorted(Path(sys.argv[2]).iterdir())
    stop_after = int(sys.argv[3])
    log = Log.open(root, TopicPartition("orders", 0), LogConfig(segment_bytes=4096,
                   index_interval_bytes=256))
    for answer in answers[:stop_after]:
        log.append_as_follower(answer.read_bytes())
    print(log.log_end_offset, flush=True)
    sys.stdin.read()
    """
)


def test_a_follower_killed_mid_copy_recovers_and_catches_up(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    for k in range(6):
        fill_leader(leader, 10 * k)
    answers = tmp_path / "answers"
    answers.mkdir()
    offset, n = 0, 0
    while (sl := leader.read(offset, 600)) is not None:
        data = sl.read_bytes()
        (answers / f"{n:05d}").write_bytes(data)
        offset, n = log_end_of(data), n + 1
    assert n > 40

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    half = n // 2
    child = subprocess.Popen(
        [sys.executable, "-c", _FOLLOWER, str(tmp_path / "follower"), str(answers), str(half)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    killed_at = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait()

    # And a torn write at the tail: the next answer half written.
    part = tmp_path / "follower" / TP.dirname
    active = max(part.glob("*.log"))
    next_answer = (answers / f"{half:05d}").read_bytes()
    with active.open("ab") as f:
        f.write(next_answer[: len(next_answer) // 2])

    follower = open_log(tmp_path / "follower")
    assert "truncated" in [note.kind for note in follower.recovery_notes]
    end = follower.log_end_offset
    # Whole batches of the torn answer are kept, the torn one goes.
    assert killed_at <= end < leader.log_end_offset
    assert end < log_end_of(next_answer)
    assert whole_log(follower) == whole_log(leader)[: len(whole_log(follower))]
    # The epochs are those of the data kept: the leader's, cut at the follower's end.
    expected = [(e, s) for e, s in leader.epoch_entries if s < end]
    assert follower.epoch_entries == expected
    replicate(leader, follower)
    assert whole_log(follower) == whole_log(leader)
    assert follower.epoch_entries == leader.epoch_entries
