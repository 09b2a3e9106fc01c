"""A small file system to fill up: a loop-mounted ext4 image for a broker's data dir.

    with SmallDisk(Path("/tmp/run/b1.img"), Path("/tmp/run/b1-data"), size_mb=256) as disk:
        ...start the broker with its log dir under disk.mountpoint...
        disk.fill()   # writes now fail with ENOSPC
        disk.free()   # and succeed again

The image is made with no reserved blocks (``mkfs.ext4 -m 0``): brokers run as
root here, and root may write into reserved blocks, so a disk with a reserve
would not be full for them. Mounts made in the root mount namespace are seen by
processes started later with ``ip netns exec`` (it makes a mount namespace that
is a slave copy of the root one), so a broker inside a network namespace can use
the disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

COMMAND_TIMEOUT = 60.0
FILLER = ".kbroker-filler"
CHUNK = 1 << 20


class DiskError(RuntimeError):
    """A command making, mounting or removing the small disk failed."""


def _run(args: Sequence[str], *, check: bool = True, timeout: float = COMMAND_TIMEOUT) -> str:
    try:
        done = subprocess.run(
            list(args), check=False, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        raise DiskError(f"`{' '.join(args)}` did not finish within {timeout} s") from e
    except OSError as e:
        raise DiskError(f"`{' '.join(args)}` could not start: {e}") from e
    if check and done.returncode != 0:
        raise DiskError(
            f"`{' '.join(args)}` exited {done.returncode}: "
            f"{done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


def _unescape(field: str) -> str:
    """A /proc/self/mountinfo path field (spaces etc. are octal escapes)."""
    return field.encode().decode("unicode_escape")


def _mounts() -> list[tuple[str, str]]:
    """(mount point, source) of every mount this process sees, in mount order."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            out.append((_unescape(fields[4]), _unescape(fields[sep + 2])))
    return out


def _mountpoint_source(mountpoint: str) -> str | None:
    """The source of the topmost mount on ``mountpoint``, None when nothing is mounted."""
    found = None
    for m, source in _mounts():
        if m == mountpoint:
            found = source
    return found


def _loop_devices() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device."""
    out = _run(["losetup", "--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE"])
    devices = []
    for line in out.splitlines():
        name, _, back = line.partition(" ")
        devices.append((name, _unescape(back.strip().removesuffix(" (deleted)"))))
    return devices


def _unmount(mountpoint: str, attempts: int = 10, pause: float = 0.2) -> str:
    """Unmounts, retrying while busy; lazily when it stays busy. Returns how it went."""
    last = ""
    for _ in range(attempts):
        done = subprocess.run(
            ["umount", mountpoint], capture_output=True, text=True, timeout=COMMAND_TIMEOUT
        )
        if done.returncode == 0:
            return "unmounted"
        last = done.stderr.strip()
        if "not mounted" in last:
            return "not mounted"
        time.sleep(pause)
    _run(["umount", "--lazy", mountpoint])
    return f"unmounted lazily ({last})"


class SmallDisk:
    """A loop-mounted ext4 file system of ``size_mb`` on ``mountpoint`` (created)."""

    def __init__(self, image: Path, mountpoint: Path, size_mb: int = 256) -> None:
        if size_mb < 8:
            raise ValueError(f"size_mb={size_mb}: at least 8 (ext4 needs room for its journal)")
        self.image = Path(image).absolute()
        self.mountpoint = Path(mountpoint).absolute()
        self.size_mb = size_mb
        self.device: str | None = None
        self._mounted = False
        self._mounted_dev: int | None = None  # st_dev of the mounted file system
        self._made_mountpoint = False

    @property
    def filler(self) -> Path:
        return self.mountpoint / FILLER

    def __enter__(self) -> SmallDisk:
        try:
            self._create()
        except BaseException:
            self._destroy()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._destroy()

    def _create(self) -> None:
        if self.image.exists():
            raise DiskError(f"{self.image} exists already (a crashed run? sweep_mounts())")
        self.image.parent.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb << 20)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", "kbroker-small", str(self.image)])
        if not self.mountpoint.exists():
            self.mountpoint.mkdir(parents=True)
            self._made_mountpoint = True
        self.device = _run(["losetup", "--find", "--show", str(self.image)]).strip()
        _run(["mount", "-t", "ext4", self.device, str(self.mountpoint)])
        self._mounted = True
        self._mounted_dev = os.stat(self.mountpoint).st_dev

    def _destroy(self) -> None:
        errors = []
        if self._mounted:
            try:
                _unmount(str(self.mountpoint))
            except DiskError as e:
                errors.append(str(e))
            self._mounted = False
            self._mounted_dev = None
        if self.device is not None:
            # Busy (a lazy unmount still in use): -d sets autoclear, the kernel detaches
            # the device once its last user goes.
            try:
                _run(["losetup", "--detach", self.device])
            except DiskError as e:
                errors.append(str(e))
            self.device = None
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        if self._made_mountpoint and not errors:
            with contextlib.suppress(OSError):
                self.mountpoint.rmdir()  # only if empty (a lazy unmount may hide files)
            self._made_mountpoint = False
        if errors:
            raise DiskError(f"removing the disk at {self.mountpoint}: " + "; ".join(errors))

    def free_bytes(self) -> int:
        """Bytes a root process may still write (blocks free; no reserve is set)."""
        st = os.statvfs(self.mountpoint)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Takes (nearly) all free space with a filler file; returns the bytes it took.

        A fallocate takes the bulk at once, then writes of shrinking size take what is
        left until the file system answers ENOSPC even for one byte (data blocks) —
        only free inodes and room in existing directory blocks remain, so creating an
        empty file still works but writing to it does not.
        """
        self._check_mounted()
        before = self.free_bytes()
        limit = self.size_mb << 20  # never more than the small disk holds, whatever happens
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if os.fstat(fd).st_dev != self._mounted_dev:
                raise DiskError(f"{self.filler} is not on the small disk: not filling it")
            size = os.fstat(fd).st_size
            bulk = min(max(0, self.free_bytes() - 4 * CHUNK), limit)
            for _ in range(20):  # fallocate may want a few blocks for its extent tree
                if bulk <= 0:
                    break
                try:
                    os.posix_fallocate(fd, size, bulk)
                    break
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    bulk //= 2
            chunk = CHUNK
            block = b"\0" * CHUNK
            for _ in range(100_000):  # bounded: ends long before, at ENOSPC on 1 byte
                if os.fstat(fd).st_size >= limit:
                    raise DiskError(f"{self.filler} outgrew the small disk: not filling on")
                try:
                    os.write(fd, block[:chunk])
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    if chunk == 1:
                        break
                    chunk = max(1, chunk // 16)
            os.fsync(fd)
        finally:
            os.close(fd)
        return max(0, before - self.free_bytes())

    def _check_mounted(self) -> None:
        """The mount point must still hold this disk's file system: had something unmounted
        it (another run's clean-up did once), filling it would fill the disk beneath."""
        # (fill() then checks that the filler it opened is on this file system.)
        here = _mountpoint_source(str(self.mountpoint))
        if not self._mounted or here is None or here != self.device:
            raise DiskError(
                f"{self.mountpoint} is no longer mounted from {self.device} "
                f"(mounted there: {here}): not filling it"
            )

    def free(self) -> None:
        """Removes the filler; its blocks are usable again once this returns."""
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()
        # ext4 reuses freed blocks only after the journal commits them; syncing makes
        # the space available now rather than after a retry inside the next write.
        _run(["sync", "--file-system", str(self.mountpoint)])


def sweep_mounts(root: Path) -> list[str]:
    """Unmounts every mount at or under ``root`` (deepest first) and detaches loop devices
    whose image lies under ``root``; returns what it did, e.g. ``["umount /r/b1-data"]``."""
    base = str(Path(root).absolute())
    done = []

    def under(path: str) -> bool:
        return path == base or path.startswith(base.rstrip("/") + "/")

    for _ in range(10):  # a mount point may hold several stacked mounts
        targets = sorted({m for m, _ in _mounts() if under(m)}, key=len, reverse=True)
        if not targets:
            break
        for mountpoint in targets:
            how = _unmount(mountpoint, attempts=3)
            done.append(f"umount {mountpoint} ({how})")
    for device, back in _loop_devices():
        if under(back):
            _run(["losetup", "--detach", device], check=False)
            done.append(f"losetup -d {device} ({back})")
    return done
