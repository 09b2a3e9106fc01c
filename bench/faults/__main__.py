"""python -m bench.faults [--system kbroker|kafka] [--workload idempotent|txn] [--minutes 30] ...

Runs a cluster in network namespaces under faults (see bench/faults/nemesis.py) with a
recording workload (idempotent producers, bench/faults/workload.py, or transactional
ones with read_committed readers, bench/faults/txn_workload.py), checks the history
(bench/faults/checker.py, bench/faults/txn_checker.py), and writes history.jsonl, anomalies.json,
summary.txt and timeline.png to a results folder. Exit status: 0 when the checker
found nothing (or, with acks=1 or unclean election, whatever it found: those runs
report the loss rather than fail), 1 on an anomaly or when the run's process died (a
client library aborting it; what it started is removed all the same), 2 when the
harness itself could not run (not root, no Kafka jars for --system kafka, a cluster
that did not start) or was interrupted.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path

from bench.faults.nemesis import KINDS
from bench.faults.run import RunConfig, in_child, new_run_id, run


def _range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    low, high = float(lo), float(hi or lo)
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: want LOW,HIGH seconds, 0 < LOW <= HIGH")
    return low, high


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"unknown fault kinds {unknown}; known: {','.join(KINDS)}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[2])
    ap.add_argument("--system", choices=("kbroker", "kafka"), default="kbroker")
    ap.add_argument("--minutes", type=float, default=30.0, help="faults for this long [30]")
    ap.add_argument("--seed", type=int, help="replay a run (printed by every run)")
    ap.add_argument(
        "--each-once", action="store_true", help="every fault kind once, then stop (CI's size)"
    )
    ap.add_argument("--faults", type=_kinds, default=list(KINDS), help=",".join(KINDS))
    ap.add_argument("--brokers", type=int, choices=(3, 5), default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument(
        "--workload",
        choices=("idempotent", "txn"),
        default="idempotent",
        help="idempotent producers, or transactional ones committing and aborting "
        "transactions across partitions under read_committed readers [idempotent]",
    )
    ap.add_argument(
        "--rate",
        type=float,
        help="sends/s per producer [100]; with --workload txn transactions/s per producer [10]",
    )
    ap.add_argument("--acks", choices=("all", "1"), default="all")
    ap.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable")
    ap.add_argument("--hold", type=_range, default=(5.0, 20.0), help="fault length [5,20] s")
    ap.add_argument("--gap", type=_range, default=(5.0, 15.0), help="healthy gap [5,15] s")
    ap.add_argument("--out", type=Path, default=Path("bench/out/faults"))
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="only remove what crashed runs left (namespaces, their processes, mounts under --out)",
    )
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)
    if args.workload == "txn" and args.acks != "all":
        ap.error("--workload txn: a transactional producer writes with acks=all only")
    if args.sweep:
        from bench.faults.disk import sweep_mounts
        from bench.faults.net import sweep

        for line in [*sweep("kbf"), *sweep_mounts(args.out.resolve())]:
            print(f"removed {line}")
        return 0
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    if not args.verbose:  # a refused connection while a broker is down is the point
        logging.getLogger("bench.faults.rdkafka").setLevel(logging.CRITICAL)
    from bench.faults.net import available

    reason = available()
    if reason is not None:
        print(f"bench.faults: cannot run here: {reason}", file=sys.stderr)
        return 2
    if args.system == "kafka":
        from bench.cluster import KAFKA_ZK_VERSION
        from bench.systems import kafka_available

        if not kafka_available(KAFKA_ZK_VERSION):
            print(
                f"bench.faults: Kafka {KAFKA_ZK_VERSION} is not fetched: "
                f"bash bench/kafka/fetch.sh {KAFKA_ZK_VERSION}",
                file=sys.stderr,
            )
            return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    cfg = RunConfig(
        system=args.system,
        seconds=args.minutes * 60,
        seed=seed,
        brokers=args.brokers,
        partitions=args.partitions,
        producers=args.producers,
        rate=args.rate if args.rate is not None else (10.0 if args.workload == "txn" else 100.0),
        workload=args.workload,
        acks=args.acks,
        unclean=args.unclean,
        faults=args.faults,
        each_once=args.each_once,
        hold_s=args.hold,
        gap_s=args.gap,
        out=args.out,
    )
    run_id = new_run_id()
    return in_child(lambda: _run(cfg, run_id), cfg, run_id)


def _run(cfg: RunConfig, run_id: str) -> int:
    try:
        outcome = run(cfg, run_id)
    except KeyboardInterrupt:
        print("bench.faults: interrupted; everything it started is removed", file=sys.stderr)
        return 2
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"bench.faults: the run could not go on: {exc}", file=sys.stderr)
        return 2
    if outcome.problems:  # the cluster did not heal, a client died: a finding too
        return 1
    return 0 if outcome.report.ok() or not cfg.strict else 1


if __name__ == "__main__":
    sys.exit(main())
