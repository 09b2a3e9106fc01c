"""LogManager: a data directory of many partitions."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import pytest

from kbroker._kbroker import build_batch
from kbroker.log import LogConfig, LogManager, TopicPartition
from kbroker.log.manager import DataDirLocked
from kbroker.log.partition_metadata import (
    PARTITION_METADATA_FILE,
    encode_topic_id,
    read_partition_metadata,
)


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


def test_topic_logs_are_created_in_one_call_with_their_topic_ids(tmp_path: Path) -> None:
    ids = [uuid.uuid4(), uuid.uuid4()]
    with LogManager(tmp_path, config_for) as mgr:
        already = mgr.get_or_create(TopicPartition("b", 1))
        made = mgr.create_topic_logs(
            [
                (ids[0], [TopicPartition("a", 0), TopicPartition("a", 1)]),
                (ids[1], [TopicPartition("b", 0), TopicPartition("b", 1)]),
            ]
        )
        a, b = made
        assert isinstance(a, list) and [lg.tp for lg in a] == [
            TopicPartition("a", 0),
            TopicPartition("a", 1),
        ]
        assert isinstance(b, list) and b[1] is already  # an open log stays the one
        assert mgr.get(TopicPartition("a", 1)) is a[1]
        a[0].append(one_batch())
    # Kafka's partition.metadata names each directory's topic.
    assert read_partition_metadata(tmp_path / "a-0") == ids[0]
    assert read_partition_metadata(tmp_path / "a-1") == ids[0]
    assert read_partition_metadata(tmp_path / "b-0") == ids[1]
    assert (tmp_path / "a-0" / PARTITION_METADATA_FILE).read_text() == (
        f"version: 0\ntopic_id: {encode_topic_id(ids[0])}\n"
    )
    with LogManager(tmp_path, config_for) as mgr:
        ends = {str(log.tp): log.log_end_offset for log in mgr}
    assert ends == {"a-0": 1, "a-1": 0, "b-0": 0, "b-1": 0}


def test_a_topic_that_cannot_be_made_is_an_error_naming_the_path_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    with LogManager(tmp_path, config_for) as mgr:
        # Something that is not a directory where the second partition's would be.
        (tmp_path / "bad-1").write_bytes(b"")
        made = mgr.create_topic_logs(
            [
                (uuid.uuid4(), [TopicPartition("bad", 0), TopicPartition("bad", 1)]),
                (uuid.uuid4(), [TopicPartition("good", 0)]),
            ]
        )
        bad, good = made
        assert isinstance(bad, NotADirectoryError), bad
        assert str(tmp_path / "bad-1") in str(bad)
        assert not (tmp_path / "bad-0").exists()  # all or nothing
        assert mgr.get(TopicPartition("bad", 0)) is None
        assert isinstance(good, list) and mgr.get(TopicPartition("good", 0)) is good[0]


def test_a_data_dir_gone_under_the_manager_is_an_error_not_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(data, config_for) as mgr:
        shutil.rmtree(data)
        data.write_bytes(b"")  # a file where the directory was
        (made,) = mgr.create_topic_logs([(uuid.uuid4(), [TopicPartition("t", 0)])])
        assert isinstance(made, NotADirectoryError), made
        assert str(data / "t-0") in str(made)
        assert mgr.get(TopicPartition("t", 0)) is None
        data.unlink()
        data.mkdir()
