"""The disk's own speed, measured before any broker runs on it.

Every broker figure in the harness is also reported as a fraction of these:
  * buffered sequential write: write() in 1 MiB pieces, then one fdatasync;
  * O_DIRECT sequential write (None where the filesystem refuses O_DIRECT, e.g. tmpfs);
  * small-append fsync latency: 4 KiB append + fdatasync, p50/p99.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path
from typing import Any

MB = 1 << 20


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (nan when empty)."""
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def raw_buffered_write(path: Path, total: int, chunk: int = MB) -> float:
    """MB/s of write() in ``chunk`` pieces then one fdatasync."""
    buf = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // chunk):
            os.write(fd, buf)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return total / MB / elapsed


def raw_direct_write(path: Path, total: int, chunk: int = MB) -> float | None:
    """MB/s of O_DIRECT writes (None where the filesystem refuses O_DIRECT)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError:
        return None
    buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT requires
    buf.write(os.urandom(chunk))
    try:
        start = time.perf_counter()
        for _ in range(total // chunk):
            os.write(fd, buf)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    except OSError:
        return None
    finally:
        os.close(fd)
        buf.close()
        path.unlink(missing_ok=True)
    return total / MB / elapsed


def fsync_latency(path: Path, count: int, size: int = 4096) -> tuple[float, float]:
    """p50 and p99 milliseconds of one ``size``-byte append followed by fdatasync."""
    buf = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    samples: list[float] = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    samples.sort()
    return percentile(samples, 0.5) * 1000, percentile(samples, 0.99) * 1000


def baseline(directory: Path, total: int, runs: int = 1, fsyncs: int = 2000) -> dict[str, Any]:
    """All three measurements on ``directory``'s disk (best of ``runs`` for the writes)."""
    directory.mkdir(parents=True, exist_ok=True)
    scratch = directory / f".kbroker-disk-{os.getpid()}"
    buffered = max(raw_buffered_write(scratch, total) for _ in range(runs))
    directs = [raw_direct_write(scratch, total) for _ in range(runs)]
    direct = None if None in directs else max(d for d in directs if d is not None)
    p50, p99 = fsync_latency(scratch, fsyncs)
    return {
        "dir": str(directory),
        "bytes": total,
        "buffered_write_mb_s": round(buffered, 1),
        "direct_write_mb_s": None if direct is None else round(direct, 1),
        "fsync_4k_p50_ms": round(p50, 3),
        "fsync_4k_p99_ms": round(p99, 3),
    }
