"""kbroker and Apache Kafka side by side, in one run.

    python -m bench [--quick] [--out DIR] [--data-dir DIR] [--systems kbroker,kafka]
                    [--reps N] [--only PREFIX,...] [--pin split|none] [--flush-messages M]
    python -m bench --security plaintext,ssl,sasl_ssl [--quick] [--reps N] ...
                                                 (the cost of TLS and SASL; Kafka 3.9.1)
    python -m bench --transactions [--quick] [--reps N] [--transaction-producers P] ...
                                                 (transactional produce, one node and RF 3;
                                                  Kafka 3.9.1)
    python -m bench --report-only --out DIR      (re-render report.md and plots)

Measures the disk first, then runs every workload of bench/workloads.py on
each system, alternating, and writes DIR/results.jsonl, DIR/report.md and
PNG plots. Kafka's jars come from bench/kafka/fetch.sh (Maven, cached); a
--quick run without them runs kbroker alone. See bench/README.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from . import cluster, pagecache, report, systems
from .harness import Options, run, sizes_for
from .security import PROTOCOLS
from .workloads import Sizes

# The Kafka version the security rows compare with (the one the security work is checked
# against); the other rows use systems.KAFKA_VERSION.
SECURITY_KAFKA_VERSION = "3.9.1"


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds through every launcher's cleanup


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--quick", action="store_true", help="small sizes, one repetition (under 2 minutes)"
    )
    ap.add_argument(
        "--out", type=Path, help="results folder [bench/results; a temporary one with --quick]"
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        help="where brokers keep data: the disk under test [a temporary folder]",
    )
    ap.add_argument("--systems", default="kbroker,kafka")
    ap.add_argument("--reps", type=int, help="repetitions [3; 1 with --quick]")
    ap.add_argument(
        "--only", help="comma-separated workload name prefixes (e.g. kreps.produce,catchup)"
    )
    ap.add_argument(
        "--pin",
        choices=["split", "none"],
        default="split",
        help="split: broker on the first CPU, load generator on the others",
    )
    ap.add_argument("--flush-messages", type=int, default=10_000, help="M for the flush session")
    ap.add_argument(
        "--catchup-gib", type=float, help="catch-up data set size [3; 0.05 with --quick]"
    )
    ap.add_argument(
        "--security-gib",
        type=float,
        help="GiB of records per protocol in the sec.* rows [2M records; 40k with --quick]",
    )
    ap.add_argument(
        "--security-producers",
        type=int,
        default=2,
        help="producer processes of the sec.* produce rows [2]; more need more client CPUs",
    )
    ap.add_argument(
        "--security-record-bytes",
        type=int,
        default=1024,
        help="record size of the sec.* rows [1024]; larger records cost the producers less "
        "CPU per GB",
    )
    ap.add_argument(
        "--rate", type=float, default=0, help="records/s for omb.rate50 [50%% of the lower omb.max]"
    )
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument(
        "--no-wire", action="store_true", help="leave out the wire.* rows (bench/wire.py)"
    )
    pagecache.add_option(ap, default=None)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="perf-record kbroker during every run into OUT/profile-*.perf.data",
    )
    ap.add_argument(
        "--security",
        help="comma-separated security protocols (plaintext,ssl,sasl_ssl): run the sec.* rows "
        "for each on one broker with a listener of every protocol, instead of the other "
        "workloads [results in bench/results/security]",
    )
    ap.add_argument(
        "--transactions",
        action="store_true",
        help="transactions of 1, 100 and 10,000 records on a single node and on three brokers "
        "(replication factor 3), instead of the other workloads [results in "
        "bench/results/transactions]",
    )
    ap.add_argument(
        "--transaction-producers",
        type=int,
        default=8,
        help="transactional producer processes of each txn.* row [8]",
    )
    ap.add_argument(
        "--kafka-version",
        help=f"Apache Kafka version [{systems.KAFKA_VERSION}; "
        f"{SECURITY_KAFKA_VERSION} with --security]",
    )
    ap.add_argument(
        "--report-only", action="store_true", help="re-render DIR/report.md from DIR/results.jsonl"
    )
    args = ap.parse_args(argv)

    security = None
    if args.security:
        security = [p.strip().upper() for p in args.security.split(",") if p.strip()]
        unknown = [p for p in security if p not in PROTOCOLS]
        if unknown or not security:
            ap.error(
                f"--security: {', '.join(unknown) or 'nothing given'}: choose from "
                + ",".join(p.lower() for p in PROTOCOLS)
            )
    if security and args.transactions:
        ap.error("--security and --transactions are separate runs: give one")
    if args.transaction_producers <= 0:
        ap.error("--transaction-producers: give a positive number")
    # The three-broker transactional rows run Kafka in ZooKeeper mode: 3.9.1, the version
    # kbroker's transactions are checked against; its single node is the same version.
    kafka_version = (
        cluster.KAFKA_ZK_VERSION
        if args.transactions
        else args.kafka_version or (SECURITY_KAFKA_VERSION if security else systems.KAFKA_VERSION)
    )
    if args.transactions and args.kafka_version not in (None, kafka_version):
        ap.error(f"--transactions compares with Kafka {kafka_version} only")
    results = Path(__file__).resolve().parent / "results"
    out = args.out or (
        Path(tempfile.gettempdir()) / "kbroker-bench-quick"
        if args.quick
        else results / "security"
        if security
        else results / "transactions"
        if args.transactions
        else results
    )
    if args.report_only:
        print(report.render(report.load(out / "results.jsonl"), out, plots=not args.no_plots))
        return 0
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if args.transactions and not cluster.ZOOKEEPER_JAR.exists():
        ap.error("--transactions: the three-broker rows need ZooKeeper (deploy/setup.sh cluster)")
    if "kafka" in names and not systems.kafka_available(kafka_version):
        if args.quick:
            print(
                f"[bench] Kafka {kafka_version}'s jars are absent (bench/kafka/fetch.sh "
                f"{kafka_version} fetches them): kbroker only",
                file=sys.stderr,
            )
            names.remove("kafka")
        else:
            systems.fetch_kafka(kafka_version)
    sizes = sizes_for(args.quick)
    if args.security_record_bytes <= 0 or args.security_producers <= 0:
        ap.error("--security-record-bytes and --security-producers: give positive numbers")
    if args.reps or args.catchup_gib or args.security_gib or args.security_record_bytes != 1024:
        sizes = Sizes(
            **{
                **sizes.__dict__,
                "reps": args.reps or sizes.reps,
                "catchup_records": int((args.catchup_gib or 0) * (1 << 30) / 1024)
                or sizes.catchup_records,
                "security_record_bytes": args.security_record_bytes,
                "security_records": int(
                    (args.security_gib or 0) * (1 << 30) / args.security_record_bytes
                )
                or sizes.security_records * 1024 // args.security_record_bytes,
            }
        )
    data_parent = args.data_dir or Path(tempfile.gettempdir())
    data_parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-", dir=data_parent) as data_root:
        opts = Options(
            out=out,
            data_root=Path(data_root),
            systems=names,
            sizes=sizes,
            pin=args.pin,
            flush_messages=args.flush_messages,
            only=args.only.split(",") if args.only else None,
            disk_bytes=(64 if args.quick else 1024) << 20,
            plots=not args.no_plots,
            rate=args.rate,
            profile=args.profile,
            security=security,
            security_producers=args.security_producers,
            kafka_version=kafka_version,
            transactions=args.transactions,
            transaction_producers=args.transaction_producers,
            wire=not args.no_wire,
            pagecache=(args.page_cache or ("as-is" if args.quick else "fill")) == "fill",
        )
        try:
            rows = run(opts)
        except KeyboardInterrupt:
            print("[bench] interrupted; brokers and load processes stopped", file=sys.stderr)
            return 130
    path = report.render(rows, out, plots=opts.plots)
    print(path.read_text())
    print(f"[bench] results in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
