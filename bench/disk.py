"""The disk's own speed, measured before any broker runs on it.

Every broker figure in the harness is also reported as a fraction of these:
  * buffered sequential write: write() in 1 MiB pieces, then one fdatasync;
  * O_DIRECT sequential write (None where the filesystem refuses O_DIRECT, e.g. tmpfs);
  * small-append fsync latency: 4 KiB append + fdatasync, p50/p99;
  * sendfile to a loopback socket: a file in the page cache sent with sendfile(2)
    over a 127.0.0.1 TCP connection to a reader that receives into one reused
    buffer (what a catch-up consumer's bytes cost the kernel, without a broker).
"""

from __future__ import annotations

import mmap
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from .stats import percentile

MB = 1 << 20


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


def sendfile_loopback(
    path: Path,
    total: int,
    sender_cpus: set[int] | None = None,
    reader_cpus: set[int] | None = None,
    chunk: int = 8 * MB,
) -> float:
    """MB/s of sendfile(2) of a ``total``-byte file already in the page cache to a loopback
    TCP socket, read on the other end with recv_into into one 1 MiB buffer; the sending
    thread on ``sender_cpus`` (the broker's) and the reader on ``reader_cpus``."""
    block = os.urandom(MB)
    with open(path, "wb") as f:
        for _ in range(total // MB):
            f.write(block)
    server = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def read(conn: socket.socket) -> None:
        if reader_cpus:
            os.sched_setaffinity(0, reader_cpus)  # this thread
        buf = memoryview(bytearray(MB))
        with conn:
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    return
                received[0] += n

    try:
        sender = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        reader = threading.Thread(target=read, args=(conn,), daemon=True)
        reader.start()
        mask = os.sched_getaffinity(0)
        if sender_cpus:
            os.sched_setaffinity(0, sender_cpus)
        fd = os.open(path, os.O_RDONLY)
        try:
            start = time.perf_counter()
            offset = 0
            while offset < total:
                offset += os.sendfile(sender.fileno(), fd, offset, min(chunk, total - offset))
            sender.shutdown(socket.SHUT_WR)
            reader.join(120)
            elapsed = time.perf_counter() - start
        finally:
            os.close(fd)
            sender.close()
            os.sched_setaffinity(0, mask)
    finally:
        server.close()
        path.unlink(missing_ok=True)
    return received[0] / MB / elapsed


def baseline(
    directory: Path,
    total: int,
    runs: int = 1,
    fsyncs: int = 2000,
    sender_cpus: set[int] | None = None,
    reader_cpus: set[int] | None = None,
) -> dict[str, Any]:
    """All four measurements on ``directory``'s disk (best of ``runs`` for the writes and
    of two sendfile runs: the first after writing the file, both from the page cache)."""
    directory.mkdir(parents=True, exist_ok=True)
    scratch = directory / f".kbroker-disk-{os.getpid()}"
    buffered = max(raw_buffered_write(scratch, total) for _ in range(runs))
    directs = [raw_direct_write(scratch, total) for _ in range(runs)]
    direct = None if None in directs else max(d for d in directs if d is not None)
    p50, p99 = fsync_latency(scratch, fsyncs)
    sendfile = max(
        sendfile_loopback(scratch, total, sender_cpus, reader_cpus) for _ in range(max(2, runs))
    )
    return {
        "dir": str(directory),
        "bytes": total,
        "buffered_write_mb_s": round(buffered, 1),
        "direct_write_mb_s": None if direct is None else round(direct, 1),
        "fsync_4k_p50_ms": round(p50, 3),
        "fsync_4k_p99_ms": round(p99, 3),
        "sendfile_loopback_mb_s": round(sendfile, 1),
    }
