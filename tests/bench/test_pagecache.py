"""bench.pagecache: the ballast caches what it is asked to, within its limits, reads back
what the kernel took, and leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bench.pagecache import CHUNK, Ballast, meminfo


def cached_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (util-linux's fincore)."""
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    return int(out.split()[0])


def test_meminfo_reads_bytes() -> None:
    total = meminfo("MemTotal")
    assert total > 64 << 20 and total % 1024 == 0
    assert 0 < meminfo("MemFree") <= total
    assert meminfo("NoSuchField") == 0


def test_top_up_caches_sparse_files_to_its_limit_then_makes_no_more(tmp_path: Path) -> None:
    folder = tmp_path / "ballast"
    ballast = Ballast(folder, reserve=0, limit=2 * CHUNK + CHUNK // 2)
    assert meminfo("MemFree") > 3 * CHUNK, "the machine has too little free memory to test"
    first = ballast.top_up()
    # Whole chunks only: the half chunk past the limit is not made.
    assert first["made"] == 2 * CHUNK
    files = list(folder.iterdir())
    assert sum(f.stat().st_size for f in files) == 2 * CHUNK
    assert sum(f.stat().st_blocks for f in files) == 0  # holes: no disk space
    if shutil.which("fincore"):
        assert sum(cached_bytes(f) for f in files) == 2 * CHUNK
    assert ballast.top_up()["made"] == 0
    ballast.close()
    assert not folder.exists()


def evict(files: list[Path]) -> None:
    """Drops the files' clean cached pages, as the kernel does when other writes need them."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux's fincore")
def test_top_up_reads_back_the_pages_the_kernel_took(tmp_path: Path) -> None:
    with Ballast(tmp_path / "ballast", reserve=0, limit=2 * CHUNK) as ballast:
        ballast.top_up()
        files = sorted(ballast.folder.iterdir())
        assert sum(cached_bytes(f) for f in files) == 2 * CHUNK
        # As the kernel does when a broker's writes need the memory: the clean pages go.
        evict(files)
        assert sum(cached_bytes(f) for f in files) == 0
        assert ballast.top_up()["made"] == 0
        assert sum(cached_bytes(f) for f in files) == 2 * CHUNK


def test_nothing_is_made_within_the_reserve(tmp_path: Path) -> None:
    with Ballast(tmp_path / "ballast", reserve=meminfo("MemTotal"), limit=CHUNK) as ballast:
        assert ballast.room() == 0
        assert ballast.top_up() == {"bytes": 0, "made": 0, "seconds": 0.0, "mb_s": None}
        assert not ballast.folder.exists()


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux's fincore")
def test_reading_back_stops_at_the_reserve(tmp_path: Path) -> None:
    with Ballast(tmp_path / "ballast", reserve=0, limit=4 * CHUNK) as ballast:
        ballast.top_up()
        files = sorted(ballast.folder.iterdir())
        evict(files)
        # Free memory for two chunks only, as this ballast's own pages tell it: reading the
        # whole file back would have the kernel evict other data for the other two.
        room = 2 * CHUNK
        ballast.room = lambda: max(0, room - sum(cached_bytes(f) for f in files))  # type: ignore[method-assign]
        assert ballast.top_up()["made"] == 0
        # Within a chunk of the room (the kernel may give a read less than a chunk).
        assert room - CHUNK < sum(cached_bytes(f) for f in files) <= room
