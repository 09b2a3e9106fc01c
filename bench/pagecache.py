"""A full page cache for the brokers to write into: the ballast.

On a virtual machine whose host takes back the memory the guest frees (virtio-balloon
free page reporting, as on the machine these figures come from), the first write into a
page the guest has not used since costs a fault on the host. Writing 1 GiB files with
``dd`` (each synced before the next) into such memory took 3.5-4.4 CPU seconds per GiB,
against 0.4 into pages used before: 250-300 MB/s instead of 2.5 GB/s, the cost falling on
whatever writes. A broker session that writes more than the page cache has grown to so far
pays it per byte, and so each row paid according to how much the rows before it had
written, not according to the broker.

A server that has run for a while has its page cache full, and its writes take pages the
kernel reclaims from older cached data. The harness makes that so before each row: it reads
files of its own until the free memory, less ``reserve``, is taken by their cached pages,
and removes them at the end. The files are sparse (all hole), so they take no disk space
and reading them puts zeroed pages in the cache without reading the disk; those pages are
clean, and the kernel reclaims them for the brokers' writes as it does any clean cached
page. Filling costs the first touch once (about a minute for 20 GiB here) instead of inside
the measured rows; a later fill reads the files again, as much as the brokers' writes took
of them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GIB = 1 << 30
CHUNK = 16 << 20  # one read
FILE_BYTES = 1 << 30


def meminfo(field: str) -> int:
    """A /proc/meminfo figure in bytes (0 where it is not given)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == field:
                    return int(rest.split()[0]) * 1024
    except OSError:
        pass
    return 0


class Ballast:
    """Sparse files in ``folder`` whose cached pages take up the machine's free memory.

    ``top_up()`` fills what the free memory exceeds ``reserve`` by (its files at most
    ``limit`` bytes in all); ``close()`` removes the files."""

    def __init__(self, folder: Path, reserve: int = 1 * GIB, limit: int | None = None) -> None:
        self.folder = folder
        self.reserve = reserve
        self.limit = limit
        self.sizes: list[int] = []  # each file's size, in the order made

    def room(self) -> int:
        """Bytes of free memory over the reserve."""
        return max(0, meminfo("MemFree") - self.reserve)

    def _path(self, n: int) -> Path:
        return self.folder / f"ballast-{n:05d}"

    def _read(self, path: Path, buf: bytearray) -> None:
        """Reads ``path`` into the cache while the free memory is a chunk or more over the
        reserve (one read is a chunk at most): reading further would make the kernel evict
        other cached data, a broker's among it, for the ballast."""
        with open(path, "rb", buffering=0) as f:
            while self.room() >= CHUNK and f.readinto(buf):
                pass

    def top_up(self) -> dict[str, Any]:
        """Fills the free memory: reads its files again (the pages of theirs the kernel
        took for the brokers' data), then makes and reads new ones. How much memory it took
        (``bytes``), the bytes of new files (``made``), and at what rate (``mb_s``: the cost
        of first touching that memory, where the host took it back)."""
        if self.room() < CHUNK:
            return {"bytes": 0, "made": 0, "seconds": 0.0, "mb_s": None}
        self.folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        before = meminfo("MemFree")
        buf = bytearray(CHUNK)
        for n in range(len(self.sizes)):
            if self.room() < CHUNK:
                break
            self._read(self._path(n), buf)
        made = 0
        # Bounded by the memory itself, should reading ever leave nothing cached.
        memory = meminfo("MemTotal")
        while (want := self.room()) >= CHUNK and sum(self.sizes) < memory:
            size = min(FILE_BYTES, want // CHUNK * CHUNK)
            if self.limit is not None:
                size = min(size, (self.limit - sum(self.sizes)) // CHUNK * CHUNK)
            if size <= 0:
                break
            path = self._path(len(self.sizes))
            with open(path, "wb") as f:
                f.truncate(size)  # a hole: no disk space, reads as zeroes
            self.sizes.append(size)
            self._read(path, buf)
            made += size
        elapsed = time.perf_counter() - start
        filled = max(0, before - meminfo("MemFree"))
        return {
            "bytes": filled,
            "made": made,
            "seconds": round(elapsed, 2),
            "mb_s": round(filled / 1e6 / elapsed) if filled else None,
        }

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.sizes = []

    def __enter__(self) -> Ballast:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def add_option(ap: argparse.ArgumentParser, default: str | None = "fill") -> None:
    """A benchmark's ``--page-cache fill|as-is``."""
    ap.add_argument(
        "--page-cache",
        choices=["fill", "as-is"],
        default=default,
        help="fill: before each row, fill the free memory with cached file pages, so that "
        "the brokers write into a full page cache (bench/pagecache.py); as-is: leave memory "
        f"as it is [{default or 'fill; as-is with --quick'}]",
    )


def _say(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


def fill(ballast: Ballast | None, say: Callable[[str], None] = _say) -> dict[str, Any]:
    """Tops ``ballast`` up (untimed: before a row) and says how much; the row's note of it
    (nothing without a ballast)."""
    if ballast is None:
        return {}
    filled = ballast.top_up()
    if filled["bytes"] or filled["made"]:
        say(
            f"page cache: {filled['bytes'] >> 20:,} MiB of free memory filled "
            f"({filled['made'] >> 20:,} MiB of new ballast) in {filled['seconds']} s "
            f"({filled['mb_s']} MB/s)"
        )
    return {"pagecache_filled_mb": filled["bytes"] >> 20}


@contextmanager
def filler(choice: str, folder: Path) -> Iterator[Callable[[], dict[str, Any]]]:
    """For ``--page-cache choice``: what to call before each row (`fill` of a ballast in
    ``folder``, or nothing with as-is); the ballast goes at the end."""
    ballast = Ballast(folder) if choice == "fill" else None
    try:
        yield lambda: fill(ballast)
    finally:
        if ballast is not None:
            ballast.close()
