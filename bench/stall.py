"""Does a flushing topic stall the others? A probe's latency beside a flush.messages=1 load.

One kbroker node per setting of ``num.io.threads`` (default: 8, then 0, alternating
over ``--reps``), and with ``--systems kbroker,kafka`` an Apache Kafka node (KRaft, its
default settings) in the same turns: a topic of ``--partitions`` partitions with
``flush.messages=1`` (an fdatasync after every append) written at full rate by the
wire-level load generator (`bench.wire produce`), and a one-partition probe topic
written by another `bench.wire produce` on its own connection: one record per request,
one request in flight, ``--probe-rate`` requests a second, acks=1; ``--load-rate``
holds the load at that many records a second (to compare at the same load). The probe runs first
alone (unloaded), then beside the load. One JSON line per phase: the probe's
p50/p99/p99.9 (ms) and the load's MB/s, also appended to ``--results``
(``bench/results/stall.jsonl``).

    python -m bench.stall [--io-threads 8,0] [--systems kbroker,kafka] [--seconds 10]
                          [--reps 1] [--load-rate RECORDS_S] [--data-dir DIR]

The issue's goal: with the load running, the probe's p99 within 2x of its unloaded
p99.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import pagecache
from bench.stats import emit
from bench.systems import kafka_available, launcher

HERE = Path(__file__).resolve().parent.parent
RESULTS = HERE / "bench" / "results" / "stall.jsonl"


def _wire(bootstrap: str, topic: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.wire", "produce", "--bootstrap", bootstrap,
         "--topic", topic, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )  # fmt: skip


def _result(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    if not out.strip():
        raise RuntimeError(f"bench.wire failed: {err[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _create(bootstrap: str, topic: str, partitions: int, *configs: str) -> None:
    cmd = [sys.executable, "-m", "kbroker.cli", "topic", "create", "-b", bootstrap,
           "-p", str(partitions), topic]  # fmt: skip
    for c in configs:
        cmd += ["--config", c]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def _probe_args(seconds: float, rate: float) -> list[str]:
    return ["--seconds", str(seconds), "--rate", str(rate), "--connections", "1",
            "--in-flight", "1", "--records-per-batch", "1", "--partitions-per-request", "1",
            "--record-bytes", "100"]  # fmt: skip


def run_one(
    data_root: Path, system: str, io_threads: int | None, args: argparse.Namespace
) -> list[dict[str, Any]]:
    rows = []
    settings = {} if io_threads is None else {"num.io.threads": str(io_threads)}
    with launcher(system)(data_root, settings, None) as broker:
        b = broker.bootstrap
        _create(b, "load", args.partitions, "flush.messages=1")
        _create(b, "probe", 1)
        probe = _result(_wire(b, "probe", *_probe_args(args.seconds, args.probe_rate)), 120)
        load = _wire(
            b, "load", "--seconds", str(args.seconds + 4), "--connections", "2",
            "--rate", str(args.load_rate),
        )  # fmt: skip
        time.sleep(2)
        loaded = _result(_wire(b, "probe", *_probe_args(args.seconds, args.probe_rate)), 120)
        load_result = _result(load, 120)
        for phase, p, mb in (("unloaded", probe, None), ("loaded", loaded, load_result["mb_s"])):
            rows.append(
                {
                    "system": system,
                    "io_threads": io_threads,
                    "phase": phase,
                    "probe_p50_ms": p["publish_p50_ms"],
                    "probe_p99_ms": p["publish_p99_ms"],
                    "probe_p999_ms": p["publish_p999_ms"],
                    "probe_requests": p["requests"],
                    "probe_errors": p["errors"],
                    "load_mb_s": mb,
                    "load_rate": args.load_rate or None,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--io-threads", default="8,0", help="kbroker's settings to compare")
    parser.add_argument("--systems", default="kbroker", help="kbroker, kafka or both")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--probe-rate", type=float, default=200.0)
    parser.add_argument(
        "--load-rate", type=float, default=0, help="the load's records/s (0: as fast as it goes)"
    )
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON lines appended here")
    pagecache.add_option(parser)
    args = parser.parse_args(argv)
    if args.load_rate < 0:
        parser.error("--load-rate must be 0 (as fast as it goes) or more")
    runs: list[tuple[str, int | None]] = []
    for system in args.systems.split(","):
        if system == "kbroker":
            runs += [("kbroker", int(n)) for n in args.io_threads.split(",")]
        elif system == "kafka" and kafka_available():
            runs.append(("kafka", None))
        else:
            parser.error(f"--systems: {system!r} is not kbroker, or kafka with its jars fetched")
    with (
        tempfile.TemporaryDirectory(dir=args.data_dir) as root,
        pagecache.filler(args.page_cache, Path(root) / "pagecache-ballast") as fill,
    ):
        for rep in range(args.reps):
            for system, n in runs if rep % 2 == 0 else runs[::-1]:
                filled = fill()
                for row in run_one(Path(root), system, n, args):
                    now = time.strftime("%Y-%m-%d %H:%M")
                    emit(args.results, {"rep": rep, **row, **filled, "time": now})
    return 0


if __name__ == "__main__":
    sys.exit(main())
