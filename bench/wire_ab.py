"""Full-rate produce on one kbroker node, the broker's CPU split by thread, A/B.

    python -m bench.wire_ab [--io-threads 8,0] [--cpus 0,1] [--gen-cpu 1] [--reps 2]
        [--seconds 8] [--pythons old=/path/to/venv/bin/python,new=.venv/bin/python]
        [-- bench.wire produce arguments]

For each repetition, each broker Python (``--pythons``: NAME=PYTHON, e.g. a venv built
from an earlier commit; default this one) and each ``num.io.threads`` in turn (the
order kept, so the settings alternate): a fresh node pinned to ``--cpus``, a
16-partition topic, and `bench.wire produce` (3 connections and whatever follows
``--``) pinned to ``--gen-cpu`` for ``--seconds``. One JSON line per run: MB/s, the
generator's own CPU, the broker's event-loop thread and its other threads (the I/O
threads) in cores over the run, and the event loop's CPU microseconds per MB, which is
what decides how far one loop can go.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stall import HERE, _create, _result
from bench.systems import kbroker_node, pin

_TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid``."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def run_one(
    root: Path, python: str, io_threads: int, args: argparse.Namespace, wire: list[str]
) -> dict[str, Any]:
    os.environ["KBROKER_BENCH_PYTHON"] = python
    cpus = {int(c) for c in args.cpus.split(",")}
    with kbroker_node(root, {"num.io.threads": str(io_threads)}, cpus) as broker:
        _create(broker.bootstrap, "load", 16)
        pid = broker.proc.pid
        before, started = thread_cpu(pid), time.monotonic()
        load = subprocess.Popen(
            [sys.executable, "-m", "bench.wire", "produce", "--bootstrap", broker.bootstrap,
             "--topic", "load", "--seconds", str(args.seconds), "--connections", "3", *wire],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE,
            preexec_fn=pin({int(args.gen_cpu)}),
        )  # fmt: skip
        result = _result(load, args.seconds + 120)
        after, elapsed = thread_cpu(pid), time.monotonic() - started
    used = {tid: cpu - before.get(tid, 0.0) for tid, cpu in after.items()}
    loop = used.get(pid, 0.0) / elapsed
    others = sum(v for tid, v in used.items() if tid != pid) / elapsed
    mb_s = result["mb_s"]
    return {
        "io_threads": io_threads,
        "mb_s": mb_s,
        "errors": result["errors"],
        "publish_p99_ms": result["publish_p99_ms"],
        "generator_cpu": result["client_cpu_util"],
        "loop_cores": round(loop, 2),
        "other_threads_cores": round(others, 2),
        "loop_us_per_mb": round(loop / mb_s * 1e6) if mb_s else None,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    wire: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, wire = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--io-threads", default="8,0")
    parser.add_argument("--cpus", default="0,1", help="the broker's CPUs")
    parser.add_argument("--gen-cpu", default="1", help="the generator's CPU")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--pythons", default=f"this={sys.executable}")
    args = parser.parse_args(argv)
    pythons = [p.split("=", 1) for p in args.pythons.split(",")]
    settings = [int(x) for x in args.io_threads.split(",")]
    with tempfile.TemporaryDirectory() as root:
        for rep in range(args.reps):
            for name, python in pythons:
                for n in settings:
                    row = run_one(Path(root), python, n, args, wire)
                    print(json.dumps({"rep": rep, "code": name, **row}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
