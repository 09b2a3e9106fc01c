"""A broker killed under the kernel still running: recovery checks each log's tail only.

The broker is a real process killed with SIGKILL; what it wrote is then damaged the ways a
kill can (a torn last batch) and cannot (a flipped byte inside, which only a machine crash
or a bad disk leaves), to show which recovery ran.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from kbroker._kbroker import build_batch
from kbroker.log import LogConfig, LogManager, TopicPartition, kernel_mark

TP = TopicPartition("t", 0)
BATCHES = 50


def config_for(topic: str) -> LogConfig:
    return LogConfig(segment_bytes=1 << 20)


def batch(i: int) -> bytes:
    return build_batch([(b"k", b"v%03d" % i * 20, [])], timestamp=1_000 + i)


WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from kbroker._kbroker import build_batch
    from kbroker.log import LogConfig, LogManager, TopicPartition

    mgr = LogManager(Path(sys.argv[1]), lambda topic: LogConfig(segment_bytes=1 << 20))
    mgr.open()
    log = mgr.get_or_create(TopicPartition("t", 0))
    for i in range(int(sys.argv[2])):
        log.append(build_batch([(b"k", b"v%03d" % i * 20, [])], timestamp=1_000 + i))
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def killed_writer(data: Path) -> None:
    """A process that opens ``data``, writes BATCHES batches, and is killed (SIGKILL)."""
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(data), str(BATCHES)], timeout=60, check=False
    )
    assert done.returncode == -9


def damage(data: Path) -> None:
    """A flipped byte in the first batch's records (no kill does that), and half a batch
    at the end (a kill mid-write does)."""
    segment = data / TP.dirname / f"{0:020d}.log"
    raw = bytearray(segment.read_bytes())
    raw[80] ^= 0xFF
    raw += batch(999)[:40]
    segment.write_bytes(bytes(raw))


def end_offset(data: Path) -> int:
    with LogManager(data, config_for) as mgr:
        log = mgr.get(TP)
        assert log is not None
        return log.log_end_offset


def test_a_broker_killed_under_this_kernel_has_only_its_tails_checked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    killed_writer(data)
    damage(data)
    copied = tmp_path / "copied"
    shutil.copytree(data, copied)
    assert kernel_mark.same_kernel(data)
    # The torn batch is cut; the flipped byte is not looked for.
    assert end_offset(data) == BATCHES
    # A copy (a restore from a backup, say) has a mark naming another file: every
    # batch past the recovery point is checked, and the log is cut at the flip.
    assert not kernel_mark.same_kernel(copied)
    assert end_offset(copied) == 0
    # Opened here, under this kernel, the copy is now marked as such.
    assert kernel_mark.same_kernel(copied)


@pytest.mark.parametrize("boot", ["another boot's", "none"])
def test_a_mark_of_another_boot_or_without_a_boot_id_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str
) -> None:
    data = tmp_path / "data"
    killed_writer(data)
    damage(data)
    boot_id = tmp_path / "boot_id"
    if boot != "none":
        boot_id.write_text(f"{uuid.uuid4()}\n")
    monkeypatch.setattr(kernel_mark, "BOOT_ID", boot_id)
    assert not kernel_mark.same_kernel(data)
    assert end_offset(data) == 0
    # Opened under a kernel without a boot id, the directory keeps no mark.
    assert (data / kernel_mark.MARK_FILE).exists() == (boot != "none")


def test_a_damaged_or_missing_mark_means_a_full_check(tmp_path: Path) -> None:
    for content in (None, b"", b"garbage", b"\xff" * 300):
        data = tmp_path / f"data-{len(content or b'-')}"
        killed_writer(data)
        damage(data)
        mark = data / kernel_mark.MARK_FILE
        if content is None:
            mark.unlink()
        else:
            # Rewritten in place: the same inode, what it holds damaged.
            with open(mark, "r+b") as f:
                f.truncate(0)
                f.write(content)
        assert not kernel_mark.same_kernel(data)
        assert end_offset(data) == 0


def test_the_mark_is_written_only_once_every_log_has_opened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    killed_writer(data)
    (data / kernel_mark.MARK_FILE).unlink()
    # A partition whose log cannot be opened (its segment is a directory).
    (data / "bad-0" / f"{0:020d}.log").mkdir(parents=True)
    with pytest.raises(OSError):
        LogManager(data, config_for).open()
    assert not (data / kernel_mark.MARK_FILE).exists()
    shutil.rmtree(data / "bad-0")
    assert end_offset(data) == BATCHES
    assert kernel_mark.same_kernel(data)


def test_a_failed_write_of_partition_data_forgets_the_mark(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(data, config_for) as mgr:
        mgr.get_or_create(TP).append(batch(0))
        assert kernel_mark.same_kernel(data)
        mgr.errors.write_failed("append to", TP, OSError(5, "Input/output error"))
        assert not (data / kernel_mark.MARK_FILE).exists()


def test_a_mark_that_cannot_be_written_leaves_the_logs_open_and_no_mark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    killed_writer(data)
    damage(data)
    # The mark's temporary file cannot be made (a directory stands in its way).
    (data / (kernel_mark.MARK_FILE + ".tmp")).mkdir()
    with caplog.at_level(logging.WARNING, "kbroker.log"):
        # The last writer ran under this kernel: only the tail is checked.
        assert end_offset(data) == BATCHES
    assert "could not write" in caplog.text
    assert not (data / kernel_mark.MARK_FILE).exists()
    assert not (data / (kernel_mark.MARK_FILE + ".tmp")).is_file()
    assert not kernel_mark.same_kernel(data)
