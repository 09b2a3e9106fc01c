"""Whether the process that last wrote a data directory ran under the kernel running now.

A process that is killed (kill -9, the OOM killer, a crash) loses none of its writes:
each one it made is in the kernel's page cache or on disk, and stays readable as written
until the machine itself goes down. Only a write in progress when it died can be cut
short, at the end of its log. So a broker restarted under the same kernel need not
re-read and check everything past its logs' recovery points, as it must after a machine
crash or power loss: it checks each log's tail only (`LastWriter::SameKernel` in the
Rust core).

The mark, ``.kernel-boot`` in the data directory, says that every log in the directory
was opened (recovered where needed) by a broker running under the kernel whose boot id
(``/proc/sys/kernel/random/boot_id``) it names; it is written once every log is open, so
a broker that dies while recovering leaves the old mark, and the next start recovers in
full again. It also names its own device and inode: a directory copied or restored from
elsewhere (a backup, a snapshot) brings a mark that does not match, so it is recovered in
full. The mark needs no fsync: after a machine crash the boot id differs whatever the file
then holds. A failed write of partition data (a disk error, a full disk) removes it, so
the next start checks everything past the recovery points: a write the disk refused may
not read back as it was written.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

MARK_FILE = ".kernel-boot"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    """This boot's id, or None where the kernel does not give one."""
    try:
        value = BOOT_ID.read_text().strip()
    except OSError:
        return None
    return value or None


def same_kernel(data_dir: Path) -> bool:
    """True when the mark shows the directory's last writer ran under this kernel."""
    now = boot_id()
    if now is None:
        return False
    try:
        with open(data_dir / MARK_FILE, "rb") as f:
            st = os.fstat(f.fileno())
            text = f.read(256).decode("ascii", "replace")
    except OSError:
        return False
    return text.split() == [now, str(st.st_dev), str(st.st_ino)]


def forget(data_dir: Path) -> None:
    """Removes the mark: the next start recovers every log in full."""
    with contextlib.suppress(OSError):
        (data_dir / MARK_FILE).unlink()


def mark(data_dir: Path) -> None:
    """Records that every log in ``data_dir`` is open under this kernel. A mark that cannot
    be written (a full disk, say) is logged and left out: it only saves work at the next
    start, which then checks everything past the recovery points."""
    now = boot_id()
    if now is None:
        forget(data_dir)
        return
    tmp = data_dir / (MARK_FILE + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            st = os.fstat(fd)
            line = f"{now} {st.st_dev} {st.st_ino}\n".encode("ascii")
            if os.write(fd, line) != len(line):
                raise OSError(f"short write of {tmp}")
        finally:
            os.close(fd)
        # The rename keeps the inode the file names.
        os.replace(tmp, data_dir / MARK_FILE)
    except OSError as exc:
        log.warning("could not write %s (the next start checks every log in full): %s", tmp, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        forget(data_dir)
