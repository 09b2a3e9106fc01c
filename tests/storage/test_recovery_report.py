"""What recovery says about the data it drops, damaged checkpoints, and `kbroker log verify`."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker import _kbroker
from kbroker._kbroker import build_batch
from kbroker.log import LogConfig, LogManager, TopicPartition

KBROKER = [sys.executable, "-m", "kbroker.cli"]
SEGMENT_BYTES = 4096


def config_for(topic: str) -> LogConfig:
    return LogConfig(segment_bytes=SEGMENT_BYTES)


def one_batch(i: int) -> bytes:
    return build_batch([(b"k", b"v" * 100, [])], timestamp=1_000 + i)


def write_log(data_dir: Path, tp: TopicPartition, batches: int, clean: bool) -> Path:
    """A partition log of `batches` one-record batches; closed cleanly or left as after a crash."""
    raw = _kbroker.Log(str(data_dir / tp.dirname), config_for(tp.topic), 1_000)
    for i in range(batches):
        raw.append(one_batch(i), 0, None, 1_000)
    if clean:
        raw.close()
    return data_dir / tp.dirname


def segment(part: Path, base: int) -> Path:
    return part / f"{base:020d}.log"


def test_a_cut_tail_is_logged_with_partition_offset_position_and_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tp = TopicPartition("orders", 3)
    part = write_log(tmp_path, tp, 5, clean=False)
    seg = segment(part, 0)
    good = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(b"\x00" * 33)
    with caplog.at_level(logging.WARNING, "kbroker.log"), LogManager(tmp_path, config_for) as mgr:
        log = mgr.get(tp)
        assert log is not None and log.log_end_offset == 5
        assert mgr.recovery_truncations == 1
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "orders-3" in line
    assert "00000000000000000000.log" in line
    assert f"at byte {good} (offset 5)" in line
    assert "dropped 33 bytes" in line


def test_segments_deleted_after_a_cut_are_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tp = TopicPartition("t", 0)
    part = write_log(tmp_path, tp, 120, clean=False)
    bases = sorted(int(p.stem) for p in part.glob("*.log"))
    assert len(bases) >= 3
    # A flipped byte inside the first batch of the second segment.
    data = bytearray(segment(part, bases[1]).read_bytes())
    data[100] ^= 0xFF
    segment(part, bases[1]).write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, "kbroker.log"), LogManager(tmp_path, config_for) as mgr:
        assert mgr.recovery_truncations == len(bases) - 1
        log = mgr.get(tp)
        assert log is not None and log.log_end_offset == bases[1]
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"(offset {bases[1]})" in lines[0] and "CRC" in lines[0]
    for base, line in zip(bases[2:], lines[1:], strict=True):
        assert f"deleted segment {base:020d}.log" in line


@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\x00\x13garbage\x80", b"12 monkeys\n", b"9" * 500],
    ids=["empty", "binary", "text", "long"],
)
@pytest.mark.parametrize("name", ["recovery-point", "log-start-offset", "cleaner-checkpoint"])
def test_damaged_checkpoints_are_a_warning_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, content: bytes
) -> None:
    tp = TopicPartition("t", 0)
    part = write_log(tmp_path, tp, 3, clean=True)
    (part / name).write_bytes(content)
    with caplog.at_level(logging.WARNING, "kbroker.log"), LogManager(tmp_path, config_for) as mgr:
        log = mgr.get(tp)
        assert log is not None and log.log_end_offset == 3
        assert mgr.recovery_truncations == 0
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(part / name) in line and "treated" in line


def test_a_checkpoint_that_is_a_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    part = write_log(tmp_path, tp, 3, clean=False)
    (part / "recovery-point").unlink(missing_ok=True)
    (part / "recovery-point").mkdir()
    with pytest.raises(OSError, match="recovery-point"):
        LogManager(tmp_path, config_for).open()


# -- kbroker log verify -----------------------------------------------------------


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KBROKER, "log", "verify", *args], capture_output=True, text=True, timeout=60
    )


def files_of(root: Path) -> dict[Path, tuple[bytes, int]]:
    return {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_verify_passes_a_healthy_data_dir(tmp_path: Path) -> None:
    for p in range(3):
        write_log(tmp_path, TopicPartition("ok", p), 40, clean=True)
    result = verify(str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked 3 partitions" in result.stdout and "120 good batches" in result.stdout
    assert "0 bad batches" in result.stdout


def test_verify_names_each_bad_batch_and_changes_nothing(tmp_path: Path) -> None:
    part = write_log(tmp_path, TopicPartition("pay", 7), 120, clean=True)
    write_log(tmp_path, TopicPartition("pay", 8), 10, clean=True)
    bases = sorted(int(p.stem) for p in part.glob("*.log"))
    seg = segment(part, bases[1])
    data = bytearray(seg.read_bytes())
    data[100] ^= 0x01  # a record byte of the segment's first batch
    seg.write_bytes(bytes(data))
    before = files_of(tmp_path)

    for target in (tmp_path, part):
        result = verify(str(target))
        assert result.returncode == 1, result.stdout + result.stderr
        bad = [line for line in result.stdout.splitlines() if line.startswith("BAD")]
        assert bad == [
            f"BAD pay-7 {bases[1]:020d}.log offset {bases[1]} position 0: corrupt record: "
            + bad[0].split("corrupt record: ", 1)[1]
        ]
        assert "CRC mismatch" in bad[0]
        assert "1 bad batches, 1 partitions with problems" in result.stdout
    assert files_of(tmp_path) == before


def test_verify_usage_errors_exit_2(tmp_path: Path) -> None:
    missing = verify(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = verify(str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no segment files" in empty.stderr
    assert "Traceback" not in missing.stderr + empty.stderr


def test_the_documented_repair_cuts_the_log_at_the_bad_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """README: stop the broker, delete the data directory's .kernel-boot and the partition's
    recovery-point and .clean-shutdown, start: recovery scans every batch, cuts at the first
    bad one and says so."""
    tp = TopicPartition("pay", 7)
    part = write_log(tmp_path, tp, 120, clean=True)
    bases = sorted(int(p.stem) for p in part.glob("*.log"))
    seg = segment(part, bases[1])
    data = bytearray(seg.read_bytes())
    data[100] ^= 0x01
    seg.write_bytes(bytes(data))
    assert verify(str(tmp_path)).returncode == 1
    # A clean shutdown trusts the data: without the repair the bad batch stays.
    with LogManager(tmp_path, config_for) as mgr:
        assert mgr.recovery_truncations == 0
    (part / "recovery-point").unlink(missing_ok=True)
    (part / ".clean-shutdown").unlink()
    (tmp_path / ".kernel-boot").unlink()
    with caplog.at_level(logging.WARNING, "kbroker.log"), LogManager(tmp_path, config_for) as mgr:
        log = mgr.get(tp)
        assert log is not None and log.log_end_offset == bases[1]
        assert mgr.recovery_truncations == len(bases) - 1
    assert f"truncated segment {bases[1]:020d}.log at byte 0 (offset {bases[1]})" in caplog.text
    result = verify(str(tmp_path))
    assert result.returncode == 0, result.stdout
