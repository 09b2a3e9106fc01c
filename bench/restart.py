"""Restart after kill -9: how long a broker holding many partitions takes to serve again.

For each system (kbroker, and Apache Kafka as a single KRaft node), alternating over
``--reps``: a fresh node at its defaults, a topic of ``--partitions`` partitions filled
with ``--gib`` GiB of 1 KiB records by the wire generator (bench/wire.py), the end offsets
read, then ``kill -9`` of the broker as soon as the last write is acknowledged (nothing
flushed on purpose: both brokers leave flushing to the OS by default, so the logs past
the recovery point are whatever the writes left) and the same command started again on
the same data directory. Measured from that start:

* ``listening_s``: until the listener accepts a connection;
* ``served_s``: until a Fetch of every partition gets no error and ListOffsets gives
  every partition the end offset it had before the kill (no acknowledged record lost);
* the broker's CPU seconds and peak RSS over that time.

    python -m bench.restart [--gib 20] [--partitions 1000] [--reps 1]
                            [--systems kbroker,kafka] [--kafka-version 3.9.1]
                            [--data-dir DIR] [--results bench/results/restart.jsonl]

The issue's goal: kbroker serving again in at most a quarter of Kafka's time on the same
data (20 GiB in 1,000 partitions).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kbroker.tools.client import ClientError

from . import loadgen, pagecache, systems, wire
from .cluster import KAFKA_ZK_VERSION
from .stats import emit

RESULTS = Path(__file__).resolve().parent / "results" / "restart.jsonl"
RECORD_BYTES = 1024


def wait_served(
    bootstrap: str, topic: str, want: dict[int, tuple[int, int]], deadline: float
) -> None:
    """Returns once every partition is fetched without error and has its end offset back."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            info = wire.describe_topic(bootstrap, topic, 10)
            wire.wait_until_served(info, 10)
            got = wire.end_offsets(info, 10)
            ends = {p: b for p, (_, b) in got.items()}
            if ends == {p: b for p, (_, b) in want.items()}:
                return
            short = {p: (ends.get(p), b) for p, (_, b) in want.items() if ends.get(p) != b}
            last = RuntimeError(
                f"end offsets differ (now, before): {dict(list(short.items())[:5])}"
            )
        except (wire.WireError, ClientError, OSError) as exc:
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"not serving every partition in time: {last}")


def run_one(system: str, args: argparse.Namespace, root: Path, log: Path) -> dict[str, Any]:
    extra = {"version": args.kafka_version} if system == "kafka" else {}
    with systems.launcher(system)(root, {}, None, log, **extra) as b:
        topic = f"restart-{args.partitions}"
        loadgen.create_topic(b.bootstrap, topic, args.partitions, timeout=300)
        records = int(args.gib * (1 << 30)) // RECORD_BYTES
        fill = wire.WireProcess(
            "produce", b.bootstrap, topic,
            "--records", str(records), "--record-bytes", str(RECORD_BYTES),
            "--partitions-per-request", "16", "--connections", "4", "--in-flight", "8",
            "--seconds", "3600",
        )  # fmt: skip
        with fill:
            fill.started(300)
            filled = fill.row(3600)
        if filled["errors"]:
            raise RuntimeError(f"{system}: the fill had errors: {filled['error_codes']}")
        info = wire.describe_topic(b.bootstrap, topic)
        before = wire.end_offsets(info, 60)
        # Bytes the files hold on disk (not their sizes: Kafka's index files are sparse).
        data_bytes = sum(f.stat().st_blocks * 512 for f in b.data_dir.rglob("*") if f.is_file())
        started = b.kill_and_restart()
        port = int(b.bootstrap.rsplit(":", 1)[1])
        systems.wait_for_port(port, b.proc, system, timeout=args.timeout)
        listening = time.monotonic() - started
        wait_served(b.bootstrap, topic, before, started + args.timeout)
        served = time.monotonic() - started
        usage = b.usage()
        return {
            "system": system,
            "version": b.version,
            "partitions": args.partitions,
            "records": filled["records"],
            "value_gib": round(filled["records"] * RECORD_BYTES / (1 << 30), 2),
            "disk_gib": round(data_bytes / (1 << 30), 2),
            "fill_mb_s": filled["mb_s"],
            "listening_s": round(listening, 2),
            "served_s": round(served, 2),
            "restart_cpu_s": round(usage.get("cpu_s", 0), 2),
            "restart_peak_rss_mb": round(usage.get("peak_rss_mb", 0), 1),
            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=20.0)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--systems", default="kbroker,kafka")
    ap.add_argument("--kafka-version", default=KAFKA_ZK_VERSION)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds to serve again")
    ap.add_argument("--data-dir", type=Path, default=None, help="the disk under test [/tmp]")
    ap.add_argument("--results", type=Path, default=RESULTS)
    pagecache.add_option(ap)
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if args.gib <= 0 or args.partitions <= 0 or args.reps <= 0:
        ap.error("--gib, --partitions and --reps must be positive")
    if "kafka" in names and not systems.kafka_available(args.kafka_version):
        systems.fetch_kafka(args.kafka_version)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="kbroker-restart-", dir=args.data_dir) as tmp,
        pagecache.filler(args.page_cache, Path(tmp) / "pagecache-ballast") as fill,
    ):
        root = Path(tmp)
        for rep in range(1, args.reps + 1):
            order = names if rep % 2 else names[::-1]
            for system in order:
                try:
                    filled = fill()
                    row = {"rep": rep, **run_one(system, args, root, root / f"{system}.log")}
                    row.update(filled)
                except (RuntimeError, wire.WireError, ClientError) as exc:
                    print(f"bench.restart: {system}: {exc}", file=sys.stderr)
                    return 1
                emit(args.results, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
