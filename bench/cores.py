"""How kbroker's produce throughput uses the machine's cores.

The wire generator (bench/wire.py) writes 1 KiB records at full rate (acks=1, about 64 KiB
batches, 4 partitions a request, ``--connections`` in all, 8 requests in flight each) to
a fresh topic of ``--partitions`` partitions, in each setup, alternating over ``--reps``:

* ``1broker-1core``: one kbroker node pinned to CPU 0 (``taskset``), the generator on
  the other CPUs;
* ``1broker-all``: one node, neither pinned;
* ``2brokers-all``: two kbroker brokers on a ZooKeeper of their own (the same machine),
  the topic's partitions led half by each (replication factor 1), the generator
  talking to both leaders (half of the connections each), nothing pinned.

Each run: ``--seconds`` after an untimed warm-up of 2 s on the same topic. Reported:
MB/s, the brokers' CPU in cores (all their threads, from /proc, summed over brokers),
the generator's CPU in cores, and the machine's idle share (/proc/stat) over the run.

    python -m bench.cores [--seconds 10] [--reps 2] [--partitions 16]
                          [--setups 1broker-1core,1broker-all,2brokers-all]
                          [--data-dir DIR] [--results bench/results/cores.jsonl]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kbroker.tools.client import ClientError

from . import cluster, loadgen, pagecache, systems, wire
from .stats import emit

RESULTS = Path(__file__).resolve().parent / "results" / "cores.jsonl"
SETUPS = ("1broker-1core", "1broker-all", "2brokers-all")


def _idle_ticks() -> tuple[int, int]:
    """(idle + iowait ticks, all ticks) of the machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


@contextmanager
def _brokers(setup: str, root: Path) -> Iterator[tuple[str, list[int]]]:
    """(bootstrap, the brokers' pids) for ``setup``."""
    cpus = sorted(os.sched_getaffinity(0))
    if setup == "2brokers-all":
        with cluster.three_brokers("kbroker", root, count=2, log_dir=root / "logs") as c:
            yield c.bootstrap, [p.pid for p in c.procs.values()]
        return
    pin = {cpus[0]} if setup == "1broker-1core" else None
    (root / "logs").mkdir(parents=True, exist_ok=True)
    with systems.kbroker_node(root, {}, pin, root / "logs" / f"{setup}.log") as b:
        yield b.bootstrap, [b.proc.pid]


def run_one(setup: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    # The generator's processes: off the broker's CPU when the broker is pinned.
    mine = set(cpus[1:]) if setup == "1broker-1core" and len(cpus) > 1 else set(cpus)
    os.sched_setaffinity(0, mine)
    try:
        with _brokers(setup, root) as (bootstrap, pids):
            topic = f"cores-{uuid.uuid4().hex[:6]}"
            loadgen.create_topic(bootstrap, topic, args.partitions, timeout=120)
            info = wire.describe_topic(bootstrap, topic)
            leaders = len(info.by_leader())
            per_leader = max(1, args.connections // leaders)
            shape = ["--record-bytes", "1024", "--connections", str(per_leader)]
            shape += ["--in-flight", "8"]
            with wire.WireProcess("produce", bootstrap, topic, *shape, "--seconds", "2") as w:
                w.started()
                w.row()
            with wire.WireProcess(
                "produce", bootstrap, topic, *shape, "--seconds", str(args.seconds)
            ) as w:
                w.started()
                cpu0 = sum(systems.proc_usage(p).get("cpu_s", 0) for p in pids)
                idle0 = _idle_ticks()
                row = w.row()
                cpu1 = sum(systems.proc_usage(p).get("cpu_s", 0) for p in pids)
                idle1 = _idle_ticks()
    finally:
        os.sched_setaffinity(0, set(cpus))
    if row["errors"]:
        raise RuntimeError(f"{setup}: produce errors {row['error_codes']}")
    elapsed = row["elapsed_s"]
    return {
        "setup": setup,
        "version": systems.kbroker_version(),
        "cpus": len(cpus),
        "brokers": len(pids),
        "leaders": leaders,
        "partitions": args.partitions,
        "connections": row["connections"],
        "mb_s": row["mb_s"],
        "broker_cores": round((cpu1 - cpu0) / elapsed, 2),
        "broker_cpu_s_per_gb": round((cpu1 - cpu0) / (row["mb_s"] * elapsed / 1000), 2)
        if row["mb_s"]
        else None,
        "generator_cores": row["client_cpu_util"],
        "machine_idle": round((idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]), 3),
        "elapsed_s": elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cores", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--connections", type=int, default=4, help="in all, over the leaders")
    ap.add_argument("--setups", default=",".join(SETUPS))
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=RESULTS)
    pagecache.add_option(ap)
    args = ap.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not setups or set(setups) - set(SETUPS):
        ap.error(f"--setups: choose from {','.join(SETUPS)}")
    if min(args.seconds, args.reps, args.partitions, args.connections) <= 0:
        ap.error("--seconds, --reps, --partitions and --connections must be positive")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="kbroker-cores-", dir=args.data_dir) as tmp,
        pagecache.filler(args.page_cache, Path(tmp) / "pagecache-ballast") as fill,
    ):
        for rep in range(1, args.reps + 1):
            for setup in setups if rep % 2 else setups[::-1]:
                try:
                    filled = fill()
                    row = run_one(setup, args, Path(tmp) / f"{setup}-{rep}")
                except (RuntimeError, OSError, wire.WireError, ClientError) as exc:
                    print(f"bench.cores: {setup}: {exc}", file=sys.stderr)
                    return 1
                row = {"rep": rep, **row, **filled, "time": time.strftime("%H:%M:%S")}
                emit(args.results, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
