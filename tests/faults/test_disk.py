"""bench.faults.disk for real: a loop-mounted ext4 that fills up (ENOSPC), frees again,
is writable from inside a network namespace, and leaves no mount or loop device behind."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench.faults import disk, net
from bench.faults.disk import SmallDisk

from tests.faults.nets import enter_network

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop device needs root"),
]


def mounted_under(root: Path) -> list[str]:
    return [m for m, _ in disk._mounts() if m.startswith(str(root))]


def loops_under(root: Path) -> list[str]:
    return [dev for dev, back in disk._loop_devices() if back.startswith(str(root))]


def write(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.write(b"x" * size)
        f.flush()
        os.fsync(f.fileno())


def test_fill_gives_enospc_and_free_gives_room(tmp_path: Path) -> None:
    with SmallDisk(tmp_path / "b1.img", tmp_path / "b1-data", size_mb=32) as d:
        assert mounted_under(tmp_path) == [str(tmp_path / "b1-data")]
        assert len(loops_under(tmp_path)) == 1
        assert 20 << 20 < d.free_bytes() <= 32 << 20
        write(d.mountpoint / "before", 1 << 20)

        taken = d.fill()
        assert taken > 20 << 20
        assert d.free_bytes() < 64 << 10
        with pytest.raises(OSError) as e:
            write(d.mountpoint / "segment.log", 64 << 10)
        assert e.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as e:  # even one more byte
            write(d.mountpoint / "one", 1)
        assert e.value.errno == errno.ENOSPC

        d.free()
        assert d.free_bytes() > 20 << 20
        write(d.mountpoint / "segment.log", 4 << 20)
        assert d.fill() > 10 << 20  # fills again
        d.free()
    assert mounted_under(tmp_path) == []
    assert loops_under(tmp_path) == []
    assert not (tmp_path / "b1.img").exists()
    assert not (tmp_path / "b1-data").exists()


@pytest.mark.skipif(net.available() is not None, reason=str(net.available()))
def test_a_process_in_a_namespace_writes_to_the_disk(tmp_path: Path) -> None:
    with (
        SmallDisk(tmp_path / "img", tmp_path / "data", size_mb=16) as d,
        enter_network(["b1"]) as nw,
    ):
        target = d.mountpoint / "from-netns"
        code = f"open({str(target)!r}, 'w').write('hello')"
        subprocess.run([*nw.exec_prefix("b1"), sys.executable, "-c", code], check=True, timeout=10)
        assert target.read_text() == "hello"
        d.fill()
        code = f"open({str(target)!r}, 'a').write('x' * 65536)"
        done = subprocess.run(
            [*nw.exec_prefix("b1"), sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert done.returncode != 0
        assert "No space left on device" in done.stderr
    assert mounted_under(tmp_path) == []
    assert loops_under(tmp_path) == []


def test_busy_disk_is_unmounted_lazily_and_its_loop_device_goes(tmp_path: Path) -> None:
    with SmallDisk(tmp_path / "img", tmp_path / "data", size_mb=16) as d:
        held = open(d.mountpoint / "open", "w")  # noqa: SIM115 (held across the exit)
    try:
        # Gone from the mount table at once; the device lingers while the file is open.
        assert mounted_under(tmp_path) == []
        held.write("still writable")
    finally:
        held.close()
    deadline = time.monotonic() + 5
    while loops_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loops_under(tmp_path) == []


def test_exception_inside_with_cleans_up(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), SmallDisk(tmp_path / "img", tmp_path / "data", 16):
        raise RuntimeError("boom")
    assert mounted_under(tmp_path) == []
    assert loops_under(tmp_path) == []


def test_sweep_mounts_removes_a_crashed_run(tmp_path: Path) -> None:
    crashed = SmallDisk(tmp_path / "img", tmp_path / "data", size_mb=16)
    crashed.__enter__()  # and never __exit__
    assert mounted_under(tmp_path) != []
    done = disk.sweep_mounts(tmp_path)
    assert any(line.startswith(f"umount {tmp_path / 'data'}") for line in done)
    assert mounted_under(tmp_path) == []
    assert loops_under(tmp_path) == []
    assert disk.sweep_mounts(tmp_path) == []


def test_fill_refuses_a_disk_someone_else_unmounted(tmp_path: Path) -> None:
    # Once, the clean-up of a run sharing the results folder unmounted another run's disks;
    # that run's next disk-full fault then filled the machine's own disk.
    with SmallDisk(tmp_path / "img", tmp_path / "data", size_mb=16) as d:
        disk.sweep_mounts(tmp_path / "data")
        assert mounted_under(tmp_path) == []
        free_before = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
        with pytest.raises(disk.DiskError, match="no longer mounted"):
            d.fill()
        assert not d.filler.exists()
        free_after = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
        assert free_before - free_after < 16 << 20
    assert mounted_under(tmp_path) == []
    assert loops_under(tmp_path) == []
