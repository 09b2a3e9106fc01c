"""Idempotent producer state of one partition, in process: duplicates, sequence and epoch
checks, expiry (producer.id.expiration.ms) with an injected clock, and snapshots."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig
from kbroker.protocol import ErrorCode
from kbroker.replication import producer_state as ps
from kbroker.replication.producer_state import (
    SNAPSHOT_FILE,
    ProducerStateError,
    ProducerStateManager,
    expire_idle_producers,
    expire_producers_periodically,
)
from tests.helpers import BrokerProcess

HOUR = 3_600_000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def manager(clock: Clock, expiration_ms: int = HOUR) -> ProducerStateManager:
    return ProducerStateManager(expiration_ms, clock)


def append(m: ProducerStateManager, pid: int, seq: int, count: int, offset: int, ts: int) -> None:
    assert m.check(pid, 0, seq, count - 1) is None
    m.update(pid, 0, seq, count - 1, offset, ts)


def test_duplicates_gaps_and_epochs() -> None:
    m = manager(Clock(0))
    append(m, 7, 0, 3, 100, 10)
    append(m, 7, 3, 2, 103, 11)
    dup = m.check(7, 0, 0, 2)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 102)
    with pytest.raises(ProducerStateError) as gap:
        m.check(7, 0, 9, 0)
    assert gap.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    m.update(7, 1, 0, 0, 105, 12)  # a new epoch starts over at 0
    with pytest.raises(ProducerStateError) as old:
        m.check(7, 0, 5, 0)
    assert old.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_expiry_by_the_last_write_and_the_clock() -> None:
    clock = Clock(9 * HOUR)
    m = manager(clock)
    append(m, 1, 0, 1, 0, ts=5 * HOUR)
    append(m, 1, 1, 1, 1, ts=9 * HOUR)  # the last write counts
    append(m, 2, 0, 1, 2, ts=int(9.5 * HOUR))
    assert m.remove_expired() == 0
    clock.now = 10 * HOUR - 1
    assert m.remove_expired() == 0
    clock.now = 10 * HOUR  # exactly producer.id.expiration.ms after 9h: Kafka's >=
    assert m.remove_expired() == 1
    assert m.producer_ids() == [2]
    # Forgotten: its next write is taken at any sequence, as from a new producer.
    assert m.check(1, 0, 42, 0) is None
    clock.now = 100 * HOUR
    assert expire_idle_producers([m], HOUR) == 1 and len(m) == 0


def test_expiry_follows_the_setting() -> None:
    m = manager(Clock(2 * HOUR), expiration_ms=24 * HOUR)
    append(m, 1, 0, 1, 0, ts=HOUR)
    assert expire_idle_producers([m], 24 * HOUR) == 0
    assert expire_idle_producers([m], HOUR // 2) == 1
    assert m.expiration_ms == HOUR // 2


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_snapshot_is_durable_and_leaves_expired_producers_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(10 * HOUR)
    m = manager(clock)
    append(m, 1, 0, 1, 0, ts=HOUR)  # expired already
    append(m, 2, 0, 2, 1, ts=10 * HOUR)
    fsynced = count_fsyncs(monkeypatch)
    m.write_snapshot(tmp_path, 3)
    # The temp file, then (after the rename) the directory.
    assert fsynced == [str(tmp_path / f"{SNAPSHOT_FILE}.tmp"), str(tmp_path)]
    assert not (tmp_path / f"{SNAPSHOT_FILE}.tmp").exists()
    saved = json.loads((tmp_path / SNAPSHOT_FILE).read_text())
    assert saved["offset"] == 3 and list(saved["producers"]) == ["2"]

    loaded = manager(clock)
    assert loaded.load_snapshot(tmp_path, 3) == 3
    assert loaded.producer_ids() == [2]
    dup = loaded.check(2, 0, 0, 1)
    assert dup is not None and dup.first_offset == 1

    # Loaded later, what has expired meanwhile is dropped.
    clock.now = 12 * HOUR
    late = manager(clock)
    assert late.load_snapshot(tmp_path, 3) == 3
    assert len(late) == 0


def test_snapshot_without_producers_skips_the_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = manager(Clock(0))
    fsynced = count_fsyncs(monkeypatch)
    m.write_snapshot(tmp_path, 10)
    assert fsynced == []
    assert json.loads((tmp_path / SNAPSHOT_FILE).read_text()) == {"offset": 10, "producers": {}}


def test_snapshot_on_a_full_disk_leaves_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = manager(Clock(HOUR))
    append(m, 1, 0, 1, 0, ts=HOUR)
    m.write_snapshot(tmp_path, 1)
    before = (tmp_path / SNAPSHOT_FILE).read_text()

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    append(m, 1, 1, 1, 1, ts=HOUR)
    with pytest.raises(OSError):
        m.write_snapshot(tmp_path, 2)
    assert (tmp_path / SNAPSHOT_FILE).read_text() == before
    assert not (tmp_path / f"{SNAPSHOT_FILE}.tmp").exists()


@dataclass(frozen=True)
class Logged:
    """The facts of a logged batch a replay reads (as `ProducerBatch` gives them)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    control_type: int = -1
    coordinator_epoch: int = -1


def test_rebuild_from_the_log_drops_expired_producers() -> None:
    m = manager(Clock(10 * HOUR))
    m.rebuild(
        [
            Logged(1, 0, 0, 0, 0, HOUR),
            Logged(2, 0, 0, 1, 5, 10 * HOUR),
            Logged(-1, -1, -1, 6, 6, HOUR),
        ]
    )
    assert m.producer_ids() == [2]


def test_the_periodic_check(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(10 * HOUR)
    managers = [manager(clock) for _ in range(3)]
    for i, m in enumerate(managers):
        append(m, i, 0, 1, 0, ts=10 * HOUR - i * 1000)
    monkeypatch.setattr(ps, "_EXPIRE_CHUNK", 2)
    config = BrokerConfig.from_strings(
        [("producer.id.expiration.ms", "1500"), ("producer.id.expiration.check.interval.ms", "10")]
    )

    async def run(get: Callable[[], list[ProducerStateManager]]) -> None:
        task = asyncio.ensure_future(expire_producers_periodically(get, config))
        await asyncio.sleep(0.1)
        assert [len(m) for m in managers] == [1, 1, 0]  # 2000 ms old: gone
        clock.now += 1500
        await asyncio.sleep(0.1)
        assert [len(m) for m in managers] == [0, 0, 0]
        task.cancel()

    asyncio.run(run(lambda: managers))


def test_a_broker_forgets_idle_producers(broker_factory: Callable[..., BrokerProcess]) -> None:
    """End to end: producer.id.expiration.ms and its check interval are honoured."""
    from tests.broker.test_idempotence import TOPIC, idem_batch, init_pid
    from tests.helpers import Wire, metadata, wire_produce

    def send(w: Wire, batch: bytes) -> tuple[int, int]:
        return wire_produce(w, TOPIC, batch)

    b = broker_factory(
        "producer.id.expiration.ms=1000", "producer.id.expiration.check.interval.ms=100"
    )
    w = Wire(b.bootstrap)
    try:
        metadata(w, [TOPIC])
        pid, epoch = init_pid(w)
        assert send(w, idem_batch(pid, epoch, 0)) == (0, 0)
        assert send(w, idem_batch(pid, epoch, 10))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        time.sleep(1.5)
        # Forgotten: any sequence is taken, as from a producer the partition never saw.
        assert send(w, idem_batch(pid, epoch, 10)) == (0, 3)
        time.sleep(1.5)
    finally:
        w.close()
    assert b.stop() == 0
    snapshot = json.loads((b.data_dir / f"{TOPIC}-0" / SNAPSHOT_FILE).read_text())
    assert snapshot == {"offset": 6, "producers": {}}
