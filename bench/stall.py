"""Does a flushing topic stall the others? A probe's latency beside a flush.messages=1 load.

One kbroker node per setting of ``num.io.threads`` (default: 8, then 0, alternating
over ``--reps``): a topic of ``--partitions`` partitions with ``flush.messages=1`` (an
fdatasync after every append) written at full rate by the wire-level load generator
(`bench.wire produce`), and a one-partition probe topic written by another
`bench.wire produce` on its own connection: one record per request, one request in
flight, ``--probe-rate`` requests a second, acks=1. The probe runs first alone
(unloaded), then beside the load. One JSON line per phase: the probe's p50/p99/p99.9
(ms) and the load's MB/s.

    python -m bench.stall [--io-threads 8,0] [--seconds 10] [--reps 1] [--data-dir DIR]

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

from bench.systems import kbroker_node

HERE = Path(__file__).resolve().parent.parent


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


def run_one(data_root: Path, io_threads: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with kbroker_node(data_root, {"num.io.threads": str(io_threads)}, None) as broker:
        b = broker.bootstrap
        _create(b, "load", args.partitions, "flush.messages=1")
        _create(b, "probe", 1)
        probe = _result(_wire(b, "probe", *_probe_args(args.seconds, args.probe_rate)), 120)
        load = _wire(b, "load", "--seconds", str(args.seconds + 4), "--connections", "2")
        time.sleep(2)
        loaded = _result(_wire(b, "probe", *_probe_args(args.seconds, args.probe_rate)), 120)
        load_result = _result(load, 120)
        for phase, p, mb in (("unloaded", probe, None), ("loaded", loaded, load_result["mb_s"])):
            rows.append(
                {
                    "io_threads": io_threads,
                    "phase": phase,
                    "probe_p50_ms": p["publish_p50_ms"],
                    "probe_p99_ms": p["publish_p99_ms"],
                    "probe_p999_ms": p["publish_p999_ms"],
                    "probe_requests": p["requests"],
                    "probe_errors": p["errors"],
                    "load_mb_s": mb,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--io-threads", default="8,0")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--probe-rate", type=float, default=200.0)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = [int(x) for x in args.io_threads.split(",")]
    with tempfile.TemporaryDirectory(dir=args.data_dir) as root:
        for rep in range(args.reps):
            order = settings if rep % 2 == 0 else settings[::-1]
            for n in order:
                for row in run_one(Path(root), n, args):
                    print(json.dumps({"rep": rep, **row}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
