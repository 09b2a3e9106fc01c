"""A follower whose disk is full when it must truncate: the replica fetcher reports a
storage failure (the broker then steps down) and parks the partition, with no traceback
and no end to its loop. Seen in a fault run: the truncation that drops an epoch this
replica led without writing rewrites leader-epoch-checkpoint, which a full disk refuses."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from bench.faults.disk import SmallDisk

from kbroker._kbroker import build_batch
from kbroker.log import Log, LogConfig, TopicPartition
from kbroker.log.manager import StorageErrors
from kbroker.metadata.model import PartitionState
from kbroker.replication.fetcher import FetcherSettings, ReplicaFetcher, _Target
from kbroker.replication.partition import Partition

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root")

TP = TopicPartition("t", 0)
ME, LEADER = 2, 1


def test_a_truncation_the_disk_refuses_is_a_storage_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SmallDisk(tmp_path / "img", tmp_path / "disk", size_mb=16) as disk:
        log_ = Log.open(disk.mountpoint / "data", TP, LogConfig())
        log_.append(build_batch([(b"k", b"v", [])] * 3), leader_epoch=4)
        # This replica led epoch 6 without writing: the epoch starts at its log end.
        log_.maybe_assign_epoch_start_offset(6, 3)
        assert log_.epoch_entries == [(4, 0), (6, 3)]
        state = PartitionState(
            replicas=[LEADER, ME], leader=LEADER, leader_epoch=7, isr=[LEADER, ME], version=0
        )
        partition = Partition(log_, state, ME, new=True, high_watermark=3)
        errors = StorageErrors()
        told: list[BaseException] = []
        errors.on_write_failure(told.append)
        # The leader's answer to a fetch: its epoch 4 ends at 3, as ours does (Fetch's
        # diverging epoch). No record goes, but epoch 6 must, and the disk is full.
        answer = SimpleNamespace(
            diverging_epoch=SimpleNamespace(epoch=4, end_offset=3),
            records=None,
            high_watermark=3,
            log_start_offset=0,
        )

        async def fetch_answered() -> _Target:
            fetcher = ReplicaFetcher(ME, LEADER, 0, "127.0.0.1", 9, FetcherSettings(), errors)
            target = _Target(partition, leader_epoch=7, truncating=False)
            assert fetcher._take(target, answer) is None  # no records: nothing to write
            return target

        disk.fill()
        with caplog.at_level(logging.ERROR, logger="kbroker"):
            target = asyncio.run(fetch_answered())
        assert len(told) == 1 and isinstance(told[0], OSError), told
        assert target.parked_until > 0  # waits a backoff, then fetches again
        assert log_.epoch_entries == [(4, 0), (6, 3)]  # unchanged: nothing half done
        assert "truncate" in caplog.text and "Traceback" not in caplog.text
        assert not any(r.exc_info for r in caplog.records)

        # Room again: the same answer drops the empty epoch and the fetcher goes on.
        disk.free()
        target = asyncio.run(fetch_answered())
        assert log_.epoch_entries == [(4, 0)]
        assert target.parked_until == 0 and log_.log_end_offset == 3
        log_.close()
