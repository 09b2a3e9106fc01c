"""LogManager: a data directory of many partitions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kbroker._kbroker import build_batch
from kbroker.log import LogConfig, LogManager, TopicPartition
from kbroker.log.manager import DataDirLocked


def config_for(topic: str) -> LogConfig:
    return LogConfig(segment_bytes=4096, flush_ms=50)


def one_batch() -> bytes:
    return build_batch([(b"k", b"v" * 100, [])], timestamp=1)


def test_partitions_survive_reopen(tmp_path: Path) -> None:
    with LogManager(tmp_path, config_for) as mgr:
        for p in range(3):
            log = mgr.get_or_create(TopicPartition("orders.v1", p))
            for _ in range(p + 1):
                log.append(one_batch())
        mgr.get_or_create(TopicPartition("other-topic", 0))
    with LogManager(tmp_path, config_for) as mgr:
        ends = {str(log.tp): log.log_end_offset for log in mgr}
    assert ends == {"orders.v1-0": 1, "orders.v1-1": 2, "orders.v1-2": 3, "other-topic-0": 0}


def test_data_dir_is_locked(tmp_path: Path) -> None:
    with LogManager(tmp_path, config_for), pytest.raises(DataDirLocked):
        LogManager(tmp_path, config_for).open()


def test_delete_partition(tmp_path: Path) -> None:
    with LogManager(tmp_path, config_for) as mgr:
        tp = TopicPartition("gone", 0)
        mgr.get_or_create(tp).append(one_batch())
        mgr.delete(tp)
        assert mgr.get(tp) is None
        assert not (tmp_path / "gone-0").exists()
    with LogManager(tmp_path, config_for) as mgr:
        assert len(mgr) == 0


def test_background_flush_advances_recovery_point(tmp_path: Path) -> None:
    async def run() -> int:
        with LogManager(tmp_path, config_for) as mgr:
            log = mgr.get_or_create(TopicPartition("t", 0))
            log.append(one_batch())
            task = asyncio.ensure_future(mgr.run_background(lambda: 10_000, tick_ms=20))
            for _ in range(100):
                await asyncio.sleep(0.02)
                if log.recovery_point == 1:
                    break
            task.cancel()
            return log.recovery_point

    assert asyncio.run(run()) == 1


def test_dirname_parsing() -> None:
    assert TopicPartition.from_dirname("a-b-12") == TopicPartition("a-b", 12)
    assert TopicPartition.from_dirname("no_partition") is None
    assert TopicPartition.from_dirname("x-1.deleted") is None
