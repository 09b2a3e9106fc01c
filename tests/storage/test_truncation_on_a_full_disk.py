"""A truncation that a full disk interrupts leaves the log as it says it is. Seen in a
fault run: a follower told to cut one batch while its disk was full cut the segment
file, failed writing an index, and kept the old size in memory, so its next append
went past the end of the file and left a hole of zeros in the middle of the log. A
consumer reading across it got zeros where a batch should start, which librdkafka
answers with an assertion that aborts the process."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from bench.faults.disk import SmallDisk

from kbroker._kbroker import build_batch, decode_records, validate_batches, verify_log_dir
from kbroker.log import Log, LogConfig, TopicPartition

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root")

TP = TopicPartition("t", 0)


def values(log_: Log) -> list[bytes]:
    """Every record value from the log start to its end, read as a consumer would."""
    out: list[bytes] = []
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        part = log_.read(offset, 1 << 20)
        assert part is not None, offset
        data = part.read_bytes()
        batches = validate_batches(data, 1 << 20)  # raises on a torn or zeroed batch
        for info in batches:
            batch = data[info.position : info.position + info.size]
            out += [value or b"" for _, _, _, value, _ in decode_records(batch)]
        offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1
    return out


@pytest.mark.parametrize("cut", [29, 30, 1, 0])
def test_a_truncation_on_a_full_disk_leaves_no_hole(tmp_path: Path, cut: int) -> None:
    with SmallDisk(tmp_path / "img", tmp_path / "disk", size_mb=16) as disk:
        folder = disk.mountpoint / "data"
        # An index entry for every batch, none written yet: the cut must write the index.
        log_ = Log.open(folder, TP, LogConfig(index_interval_bytes=1))
        for i in range(40):
            log_.append(build_batch([(None, f"a{i}".encode(), [])]), leader_epoch=i // 20)
        disk.fill()
        with contextlib.suppress(OSError):  # what the cut writes may be refused
            log_.truncate_to(cut)
        end = log_.log_end_offset
        # The records go even so; emptying the log writes its new start first.
        assert end == cut or (cut == 0 and end == 40), end
        assert values(log_) == [f"a{i}".encode() for i in range(end)]

        disk.free()
        for i in range(end, end + 10):
            log_.append(build_batch([(None, f"b{i}".encode(), [])]), leader_epoch=3)
        expected = [f"a{i}".encode() for i in range(end)] + [
            f"b{i}".encode() for i in range(end, end + 10)
        ]
        assert values(log_) == expected
        assert log_.epoch_entries[-1] == (3, end)
        log_.close()

        report = verify_log_dir(str(folder / TP.dirname))
        assert report.bad == [] and report.batches == len(expected)
        reopened = Log.open(folder, TP, LogConfig())
        assert reopened.recovery_notes == []
        assert values(reopened) == expected
        reopened.close()
