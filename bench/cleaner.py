"""Log cleaner throughput: one compaction pass over a freshly written keyed log.

    python -m bench.cleaner [--dir DIR] [--size-mb N] [--keys K] [--codec C]
                            [--record-bytes B] [--dedupe-mb M]

Writes N MiB of records over K keys (each key rewritten many times) in 16 KiB
batches to a log with 64 MiB segments, rolls, then times `Log.clean` and
prints MB/s of log read (the cleaner's input) and written, with the records
removed. The page cache is warm, as it is for a log written moments before.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from kbroker._kbroker import CleanerConfig, Log, LogConfig, build_batch

MB = 1 << 20
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def run(
    path: Path, size_mb: int, keys: int, codec: int, record_bytes: int, dedupe_mb: int
) -> dict[str, float]:
    now = int(time.time() * 1000)
    config = LogConfig(
        segment_bytes=64 * MB, cleanup_compact=True, cleanup_delete=False, segment_ms=1
    )
    log = Log(str(path), config, now)
    value = os.urandom(record_bytes // 2).hex().encode()[:record_bytes]
    per_batch = max(1, 16 * 1024 // (record_bytes + 20))
    written = 0
    i = 0
    while written < size_mb * MB:
        records = [(f"key-{(i + j) % keys}".encode(), value, []) for j in range(per_batch)]
        i += per_batch
        batch = build_batch(records, codec=codec, timestamp=now)
        log.append(batch, 0, None, now)
        written += len(batch)
    log.maybe_roll(now + 10)
    stats = log.clean(now + 10, CleanerConfig(dedupe_buffer_bytes=dedupe_mb * MB))
    log.close()
    seconds = max(stats.elapsed_ms, 1) / 1000
    return {
        "read_mb": stats.bytes_read / MB,
        "written_mb": stats.bytes_written / MB,
        "seconds": seconds,
        "read_mb_s": stats.bytes_read / MB / seconds,
        "records_read": stats.records_read,
        "records_removed": stats.records_removed,
        "records_per_s": stats.records_read / seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--codec", choices=sorted(CODECS), default="none")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--dedupe-mb", type=int, default=128)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kbroker-cleaner-", dir=args.dir))
    try:
        r = run(
            base / "bench-0",
            args.size_mb,
            args.keys,
            CODECS[args.codec],
            args.record_bytes,
            args.dedupe_mb,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"codec={args.codec} keys={args.keys} record={args.record_bytes}B: "
        f"read {r['read_mb']:.0f} MB, wrote {r['written_mb']:.1f} MB in {r['seconds']:.2f} s = "
        f"{r['read_mb_s']:.0f} MB/s, {r['records_per_s'] / 1e6:.2f} M records/s "
        f"({r['records_removed']:.0f} of {r['records_read']:.0f} removed)"
    )


if __name__ == "__main__":
    main()
