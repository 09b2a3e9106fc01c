"""Storage micro-benchmarks: the disk's raw speed, then kbroker's append and sendfile.

    python -m bench.storage [--dir DIR] [--size-mb N] [--quick] [--json OUT]

Measures, on the same disk and in the same run:
  * raw sequential write: buffered (write + one fdatasync at the end) and O_DIRECT,
    and 4 KiB append + fdatasync latency (bench/disk.py, shared with the harness);
  * Log.append throughput for 100 B and 1 KiB records in batches of 16 KiB..1 MiB,
    as MB/s, records/s and a fraction of the buffered raw speed (same fdatasync at the end);
  * CRC-32C GB/s through the binding at 1 KiB and 1 MiB;
  * read-slice + sendfile throughput to a loopback socket.
Prints a table and writes JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbroker._kbroker import Log, LogConfig, build_batch, crc32c

from .disk import MB, fsync_latency, raw_buffered_write, raw_direct_write


def _best_of(runs: int, fn: Callable[[], float]) -> float:
    return max(fn() for _ in range(runs))


def make_batch(record_size: int, batch_bytes: int) -> tuple[bytes, int]:
    n = max(1, batch_bytes // (record_size + 12))
    value = os.urandom(record_size)
    data = build_batch([(None, value, [])] * n, timestamp=int(time.time() * 1000))
    return data, n


def append_throughput(
    base: Path, total: int, record_size: int, batch_bytes: int
) -> dict[str, float]:
    """Appends ``total`` bytes of batches to a fresh log, then flushes."""
    path = Path(tempfile.mkdtemp(dir=base))
    try:
        log = Log(str(path / "bench-0"), LogConfig(), int(time.time() * 1000))
        batch, n = make_batch(record_size, batch_bytes)
        count = max(1, total // len(batch))
        now = int(time.time() * 1000)
        start = time.perf_counter()
        for _ in range(count):
            log.append(batch, 0, None, now)
        log.flush()
        elapsed = time.perf_counter() - start
        log.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {
        "mb_s": count * len(batch) / MB / elapsed,
        "records_s": count * n / elapsed,
        "batch_bytes": len(batch),
    }


def crc_gbs(size: int, seconds: float = 0.5) -> float:
    data = os.urandom(size)
    reps = 0
    start = time.perf_counter()
    while True:
        for _ in range(64):
            crc32c(data)
        reps += 64
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return reps * size / elapsed / 1e9


def sendfile_throughput(base: Path, total: int) -> float:
    """MB/s of read-slice + sendfile from a log to a loopback socket."""
    path = Path(tempfile.mkdtemp(dir=base))
    try:
        log = Log(str(path / "bench-0"), LogConfig(), int(time.time() * 1000))
        batch, per_batch = make_batch(1024, MB)
        for _ in range(max(1, total // len(batch))):
            log.append(batch, 0, None, int(time.time() * 1000))
        log.flush()
        end = log.log_end_offset
        server = socket.create_server(("127.0.0.1", 0))
        received = 0

        def drain() -> None:
            nonlocal received
            conn, _ = server.accept()
            with conn:
                while chunk := conn.recv(1 << 20):
                    received += len(chunk)

        reader = threading.Thread(target=drain)
        reader.start()
        client = socket.create_connection(server.getsockname())
        sent_total = 0
        start = time.perf_counter()
        offset = 0
        while offset < end:
            sl = log.read(offset, 4 * MB)
            if sl is None:
                break
            sent = 0
            while sent < len(sl):
                n = sl.sendfile(client.fileno(), sent, len(sl) - sent)
                sent += n or 0
            sent_total += sent
            # Every batch is the same, so the slice holds whole batches of per_batch records.
            offset += len(sl) // len(batch) * per_batch
        client.close()
        reader.join()
        elapsed = time.perf_counter() - start
        server.close()
        log.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return sent_total / MB / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="a directory on the disk to measure",
    )
    parser.add_argument("--size-mb", type=int, default=1024, help="bytes written per measurement")
    parser.add_argument("--runs", type=int, default=3, help="repetitions; the best is reported")
    parser.add_argument("--quick", action="store_true", help="small sizes, one run (for tests)")
    parser.add_argument("--json", type=Path, help="append JSON lines here")
    args = parser.parse_args(argv)
    total = (16 if args.quick else args.size_mb) * MB
    runs = 1 if args.quick else args.runs
    args.dir.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        results.append(row)
        print(json.dumps(row), flush=True)

    scratch = args.dir / f".kbroker-bench-{os.getpid()}"
    buffered = _best_of(runs, lambda: raw_buffered_write(scratch, total))
    emit({"bench": "disk.buffered_write", "mb_s": round(buffered, 1), "dir": str(args.dir)})
    direct = raw_direct_write(scratch, total)
    emit({"bench": "disk.direct_write", "mb_s": None if direct is None else round(direct, 1)})
    p50, p99 = fsync_latency(scratch, 200 if args.quick else 2000)
    emit({"bench": "disk.fsync_4k", "p50_ms": round(p50, 3), "p99_ms": round(p99, 3)})
    for record_size in (100, 1024):
        for batch_kib in (16, 256, 1024):
            best: dict[str, float] = {}
            for _ in range(runs):
                r = append_throughput(args.dir, total, record_size, batch_kib * 1024)
                if r["mb_s"] > best.get("mb_s", 0):
                    best = r
            emit(
                {
                    "bench": "log.append",
                    "record_bytes": record_size,
                    "batch_bytes": int(best["batch_bytes"]),
                    "mb_s": round(best["mb_s"], 1),
                    "records_s": round(best["records_s"]),
                    "fraction_of_disk": round(best["mb_s"] / buffered, 3),
                }
            )
    for size in (1024, MB):
        emit(
            {
                "bench": "crc32c",
                "bytes": size,
                "gb_s": round(crc_gbs(size, 0.2 if args.quick else 1.0), 2),
            }
        )
    emit(
        {
            "bench": "log.read+sendfile",
            "mb_s": round(_best_of(runs, lambda: sendfile_throughput(args.dir, total)), 1),
        }
    )
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            for row in results:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
