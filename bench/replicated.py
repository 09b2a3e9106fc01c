"""Replicated produce: Kreps 2014's replication rows on three-broker clusters, kbroker and Kafka.

    python -m bench.replicated [--quick] [--systems kbroker,kafka] [--reps N] [--only PREFIX,...]
                               [--rate-fraction 0.5] [--pin split|none] [--dir D] [--logs D]

Each system runs as three brokers on a ZooKeeper of its own (bench/cluster.py:
``kbroker serve --broker-id N --zookeeper``, Apache Kafka 3.9.1 in ZooKeeper
mode), started afresh for every session. Every row writes to a fresh topic of 6
partitions with replication factor 3 and min.insync.replicas 2 from 3 producer
processes (bench/loadgen.py):

- ``repl.p3.acks{1,all}.{100b,1kib}``, at full speed: acks=1 ("async
  replication") and acks=all ("sync replication"), 100-byte and 1 KiB records:
  records/s, MB/s, the brokers' CPU seconds per GB written (all three brokers
  summed, until every follower has caught up), each broker's peak RSS, and
  replication health;
- ``repl.rate.*``: the same four at a fixed rate, ``--rate-fraction`` (50%) of the
  lower of the systems' median maxima for that row, so both get the same rate,
  with the latency probe (1000 records/s of the row's size and acks on a
  one-partition topic of its own, also replication factor 3): publish and
  end-to-end latency p50/p99/p99.9.

Replication health, measured from outside the brokers the same way for both
(neither exposes a follower's log end offset to clients): every ``--sample-s``
seconds, the size of each replica's log files on disk (followers copy the
leader's batches byte for byte, so the largest minus the smallest replica of a
partition is the slowest follower's lag in bytes, converted to records and to
milliseconds of that partition's writes), and the ISR of every partition in
Metadata; after the run, how many times each partition's state znode in
ZooKeeper changed (every ISR shrink or expansion and leader change is a new
version), how long the followers took to catch up once the producers were
done, and the brokers' log lines about the ISR and at WARN or above.

``--quick``: smaller sizes, one repetition, and the last system's max-rate
session goes on with the fixed-rate rows (one cluster start fewer).

Results print as tables and append as JSON lines to bench/results/replicated.jsonl;
broker logs stay in --logs (bench/out/replicated/, one folder per session).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import cluster, loadgen, pagecache, systems
from .harness import cpu_split, latency_summary, loadavg

MB = 1_000_000
PARTITIONS = 6
REPLICATION_FACTOR = 3
PRODUCERS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}  # only acks=all writes look at it
RESULTS = systems.REPO / "bench" / "results" / "replicated.jsonl"
LOGS = systems.REPO / "bench" / "out" / "replicated"


@dataclass(frozen=True)
class Sizes:
    small_records: int  # records per 100-byte max-rate row
    large_records: int  # records per 1 KiB max-rate row
    rate_seconds: float  # length of each fixed-rate row
    warmup_records: int  # untimed, at the start of every session
    reps: int


FULL = Sizes(
    small_records=5_000_000,
    large_records=1_000_000,
    rate_seconds=15,
    warmup_records=400_000,
    reps=3,
)
QUICK = Sizes(
    small_records=400_000,
    large_records=100_000,
    rate_seconds=3,
    warmup_records=20_000,
    reps=1,
)


@dataclass(frozen=True)
class Row:
    name: str
    record_bytes: int
    acks: str

    def records(self, s: Sizes) -> int:
        return s.small_records if self.record_bytes <= 100 else s.large_records

    @property
    def rate_name(self) -> str:
        return self.name.replace("repl.p3.", "repl.rate.")


ROWS = [
    Row("repl.p3.acks1.100b", 100, "1"),
    Row("repl.p3.acksall.100b", 100, "all"),
    Row("repl.p3.acks1.1kib", 1024, "1"),
    Row("repl.p3.acksall.1kib", 1024, "all"),
]


@dataclass
class Options:
    systems: list[str]
    sizes: Sizes
    rows: list[Row]
    pin: str = "split"
    broker_cpus: set[int] | None = None  # from ``pin``, set once by run()
    client_cpus: set[int] | None = None
    stop_timeout: float = 15
    share_last: bool = False  # the last max-rate session also runs the fixed-rate rows
    rate_fraction: float = 0.5
    sample_s: float = 0.5
    session_timeout_ms: int = 6000
    data_root: Path | None = None
    logs: Path = LOGS
    results: Path = RESULTS
    run_id: str = ""
    mode: str = "full"
    page_cache: str = "fill"  # bench/pagecache.py's choice
    # Before each row: the page cache filled (from ``page_cache``, set once by run()).
    fill_page_cache: Callable[[], dict[str, Any]] | None = None


# -- replication health -----------------------------------------------------------------------


def _replica_bytes(c: cluster.Cluster, topic: str) -> dict[int, list[int]]:
    """Partition -> the bytes of its log segments on brokers 1, 2, 3 (0 where absent)."""
    out: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        sizes = []
        for b in sorted(c.procs):
            total = 0
            try:
                with os.scandir(c.data_dir(b) / f"{topic}-{p}") as it:
                    for entry in it:
                        if entry.name.endswith(".log"):
                            total += entry.stat().st_size
            except OSError:
                pass
            sizes.append(total)
        out[p] = sizes
    return out


class Health:
    """Samples replica log sizes and Metadata ISRs while a row runs; ``finish()`` waits for the
    followers to catch up and reads the partition state versions in ZooKeeper."""

    def __init__(self, c: cluster.Cluster, topic: str, interval: float) -> None:
        self.c = c
        self.topic = topic
        self.interval = interval
        self.stop_event = threading.Event()
        self.lags: list[int] = []  # per sample, the largest partition lag in bytes
        self.isr_min = REPLICATION_FACTOR
        self.isr_samples = 0
        self.metadata_changes = 0
        self.metadata_errors = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.zk_versions0: dict[int, int] = {}

    def _zk_states(self) -> dict[int, tuple[int, dict[str, Any]]]:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.c.zk, timeout=10)
        zk.start(timeout=10)
        try:
            out = {}
            for p in range(PARTITIONS):
                data, stat = zk.get(f"/brokers/topics/{self.topic}/partitions/{p}/state")
                out[p] = (stat.version, json.loads(data))
            return out
        finally:
            zk.stop()
            zk.close()

    def __enter__(self) -> Health:
        self.zk_versions0 = {p: v for p, (v, _) in self._zk_states().items()}
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(10)

    def _run(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.c.bootstrap})
        last: dict[int, tuple[int, tuple[int, ...]]] = {}
        while not self.stop_event.wait(self.interval):
            sizes = _replica_bytes(self.c, self.topic)
            self.lags.append(max(max(s) - min(s) for s in sizes.values()))
            try:
                md = admin.list_topics(self.topic, timeout=5).topics[self.topic]
            except Exception:
                self.metadata_errors += 1
                continue
            self.isr_samples += 1
            for p, pm in md.partitions.items():
                state = (pm.leader, tuple(sorted(pm.isrs)))
                self.isr_min = min(self.isr_min, len(pm.isrs))
                if p in last and last[p] != state:
                    self.metadata_changes += 1
                last[p] = state

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """Stops sampling, waits until every replica of every partition holds the same bytes."""
        self.stop_event.set()
        self.thread.join(10)
        start = time.monotonic()
        caught_up_s: float | None = None
        while time.monotonic() - start < timeout:
            sizes = _replica_bytes(self.c, self.topic)
            if all(max(s) == min(s) for s in sizes.values()):
                caught_up_s = round(time.monotonic() - start, 2)
                break
            time.sleep(0.05)
        states = self._zk_states()
        return {
            "caught_up_s": caught_up_s,
            "replica_bytes": sizes,
            "zk_state_changes": sum(
                v - self.zk_versions0.get(p, v) for p, (v, _) in states.items()
            ),
            "isr_end": {p: s.get("isr") for p, (_, s) in states.items()},
            "isr_min_metadata": self.isr_min,
            "isr_samples": self.isr_samples,
            "metadata_isr_changes": self.metadata_changes,
            "metadata_errors": self.metadata_errors,
            "lag_bytes_samples": self.lags,
        }


class LogWatch:
    """New lines of the brokers' logs since the last ``read()``: about the ISR, and at WARN or
    above."""

    ISR = re.compile(r"\bISR\b|[Ss]hrinking|[Ee]xpanding")
    BAD = re.compile(r"\b(WARN|WARNING|ERROR|CRITICAL|FATAL|Traceback)\b")

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.offsets = {p: 0 for p in paths}

    def read(self) -> dict[str, list[str]]:
        isr: list[str] = []
        bad: list[str] = []
        for path in self.paths:
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[path])
                    text = f.read()
                    self.offsets[path] = f.tell()
            except OSError:
                continue
            for line in text.decode(errors="replace").splitlines():
                tagged = f"{path.stem}: {line.strip()}"
                if self.BAD.search(line):
                    bad.append(tagged)
                elif self.ISR.search(line):
                    isr.append(tagged)
        return {"isr": isr, "warn": bad}


# -- sessions ---------------------------------------------------------------------------------


def _topic(prefix: str) -> str:
    return f"{prefix.replace('.', '-')}-{uuid.uuid4().hex[:6]}"


def _say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def warm_up(c: cluster.Cluster, records: int) -> None:
    """Untimed traffic first, as bench/harness.py does: JIT compilation, connections, replica
    fetchers, and the probe's group coordinator (__consumer_offsets)."""
    for size, acks in ((100, "all"), (1024, "1")):
        topic = _topic(f"warmup-{size}")
        loadgen.create_topic(c.bootstrap, topic, PARTITIONS, REPLICATION_FACTOR, TOPIC_CONFIG, 60)
        n = records if size == 100 else records // 4
        loadgen.produce(c.bootstrap, topic, n, size, acks, PRODUCERS)
        loadgen.consume(c.bootstrap, topic, 1, timeout=300)
    probe_topic = _topic("warmup-probe")
    loadgen.create_topic(c.bootstrap, probe_topic, 1, REPLICATION_FACTOR, TOPIC_CONFIG, 60)
    with loadgen.LatencyProbe(c.bootstrap, probe_topic, 100, "all") as probe:
        time.sleep(1)
        probe.stop()


def run_row(
    c: cluster.Cluster, row: Row, opts: Options, rate: float, n_client: int
) -> dict[str, Any]:
    s = opts.sizes
    name = row.rate_name if rate else row.name
    records = int(rate * s.rate_seconds) if rate else row.records(s)
    topic = _topic(name)
    loadgen.create_topic(c.bootstrap, topic, PARTITIONS, REPLICATION_FACTOR, TOPIC_CONFIG, 60)
    probe = None
    if rate:
        probe_topic = _topic("probe")
        loadgen.create_topic(c.bootstrap, probe_topic, 1, REPLICATION_FACTOR, TOPIC_CONFIG, 60)
        probe = loadgen.LatencyProbe(c.bootstrap, probe_topic, row.record_bytes, row.acks)
    latencies: dict[str, list[float]] = {}
    pids = {b: p.pid for b, p in sorted(c.procs.items())}
    before: dict[int, dict[str, float]] = {}

    def started() -> None:
        # From the moment the producers start: not the brokers' idle time while they connect.
        before.update({b: systems.proc_usage(pid) for b, pid in pids.items()})

    with probe or nullcontext():
        for pid in pids.values():
            systems.reset_peak_rss(pid)
        with Health(c, topic, opts.sample_s) as health:
            r = loadgen.produce(
                c.bootstrap, topic, records, row.record_bytes, row.acks, PRODUCERS, rate, started
            )
            h = health.finish()
        # CPU until the followers have caught up: the replication of every record is included.
        after = {b: systems.proc_usage(pid) for b, pid in pids.items()}
        if probe is not None:
            latencies = probe.stop()
    dead = [b for b, p in c.procs.items() if p.poll() is not None]
    cpu = sum(after[b].get("cpu_s", 0) - before[b].get("cpu_s", 0) for b in pids)
    gb = r.records * row.record_bytes / 1e9
    leader_bytes = sum(max(v) for v in h["replica_bytes"].values())
    disk_per_record = leader_bytes / r.records if r.records else 0
    lags = h.pop("lag_bytes_samples")
    lag_max = max(lags, default=0)
    # One partition's share of the write rate, in bytes on disk per second.
    part_bytes_s = r.records / r.elapsed / PARTITIONS * disk_per_record if r.elapsed else 0
    out: dict[str, Any] = {
        "system": c.system,
        "version": systems.kbroker_version() if c.system == "kbroker" else cluster.KAFKA_ZK_VERSION,
        "workload": name,
        "record_bytes": row.record_bytes,
        "acks": row.acks,
        "partitions": PARTITIONS,
        "replication_factor": REPLICATION_FACTOR,
        "topic_config": TOPIC_CONFIG,
        "producers": PRODUCERS,
        "records": r.records,
        "errors": r.errors,
        "elapsed_s": round(r.elapsed, 3),
        "records_s": round(r.records / r.elapsed),
        "mb_s": round(r.records * row.record_bytes / r.elapsed / MB, 1),
        **(
            {"target_rate": round(rate), "rate_met": r.records / r.elapsed >= 0.95 * rate}
            if rate
            else {}
        ),
        "broker_cpu_s": round(cpu, 2),
        "broker_cpu_s_each": [
            round(after[b].get("cpu_s", 0) - before[b].get("cpu_s", 0), 2) for b in pids
        ],
        "broker_cpu_s_per_gb": round(cpu / gb, 2) if gb else None,
        "broker_peak_rss_mb": [round(after[b].get("peak_rss_mb", 0), 1) for b in pids],
        "client_cpu_s": round(r.client_cpu_s, 2),
        "client_cpu_util": round(r.client_cpu_s / r.elapsed / n_client, 2),
        "disk_bytes_per_record": round(disk_per_record, 1),
        "follower_lag_max_bytes": lag_max,
        "follower_lag_median_bytes": round(statistics.median(lags)) if lags else None,
        "follower_lag_max_records": round(lag_max / disk_per_record) if disk_per_record else None,
        "follower_lag_max_ms": round(lag_max / part_bytes_s * 1000, 1) if part_bytes_s else None,
        "lag_samples": len(lags),
        **h,
        "brokers_exited": dead,
        **latency_summary("publish", latencies.get("publish_ms", [])),
        **latency_summary("e2e", latencies.get("e2e_ms", [])),
        "loadavg": loadavg(),
    }
    return out


def session(
    system: str,
    rows: list[Row],
    opts: Options,
    rep: int,
    rates: dict[str, float] | None = None,
    then_rates: Callable[[], dict[str, float]] | None = None,
) -> Iterator[dict[str, Any]]:
    """A fresh cluster of ``system``: warm-up, then ``rows`` at full speed (``rates`` None) or
    at ``rates[row.name]`` records/s, then (``then_rates``) the rows again at the rates it
    returns; yields each result row, then a ``session`` line."""
    broker_cpus, client_cpus = opts.broker_cpus, opts.client_cpus
    n_client = len(client_cpus or os.sched_getaffinity(0))
    kind = "rate" if rates else "max+rate" if then_rates else "max"
    log_dir = opts.logs / f"{opts.run_id}-{system}-rep{rep}-{kind}"
    root = Path(tempfile.mkdtemp(prefix="kbroker-repl-bench-", dir=opts.data_root))
    try:
        _say(f"{system} rep {rep} ({kind}): starting ZooKeeper and three brokers ...")
        t0 = time.monotonic()
        with cluster.three_brokers(
            system,
            root,
            opts.session_timeout_ms,
            cpus=broker_cpus,
            log_dir=log_dir,
            stop_timeout=opts.stop_timeout,
        ) as c:
            started_s = time.monotonic() - t0
            logs = LogWatch(sorted(log_dir.glob(f"{system}-*.log")))
            warm_up(c, opts.sizes.warmup_records)
            warm = logs.read()
            if warm["warn"]:
                _say(f"{system}: {len(warm['warn'])} WARN+ log lines during the warm-up")

            def measure(row: Row, rate: float) -> dict[str, Any]:
                filled = opts.fill_page_cache() if opts.fill_page_cache else {}
                result = run_row(c, row, opts, rate, n_client)
                result.update(filled)
                noted = logs.read()
                result.update(
                    rep=rep,
                    run_id=opts.run_id,
                    mode=opts.mode,
                    pin={
                        "brokers": sorted(broker_cpus or []),
                        "clients": sorted(client_cpus or []),
                    },
                    log_isr_lines=len(noted["isr"]),
                    log_warn_lines=len(noted["warn"]),
                    log_examples=(noted["warn"] + noted["isr"])[:10],
                    time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    logs=str(log_dir),
                )
                _say(_progress_line(result))
                return result

            for row in rows:
                if rates is None:
                    yield measure(row, 0)
                elif rates.get(row.name, 0) > 0:
                    yield measure(row, rates[row.name])
            if then_rates is not None:
                later = then_rates()
                for row in rows:
                    if later.get(row.name, 0) > 0:
                        yield measure(row, later[row.name])
            end = time.monotonic()
        noted = logs.read()
        info = {
            "type": "session",
            "run_id": opts.run_id,
            "system": system,
            "rep": rep,
            "kind": kind,
            "start_s": round(started_s, 1),
            "stop_s": c.stop_s,
            "killed_after_timeout": c.killed,
            "teardown_s": round(time.monotonic() - end, 1),
            "warmup_warn_lines": len(warm["warn"]),
            "shutdown_warn_lines": len(noted["warn"]),
            "examples": (warm["warn"] + noted["warn"])[:10],
            "logs": str(log_dir),
        }
        _say(
            f"{system} rep {rep} ({kind}): started in {info['start_s']} s; brokers stopped in "
            f"{c.stop_s} s"
            + (f", killed after {opts.stop_timeout} s: {c.killed}" if c.killed else "")
        )
        yield info
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _progress_line(r: dict[str, Any]) -> str:
    text = (
        f"{r['system']:<7} {r['workload']:<22} {r['records_s']:>9,} rec/s {r['mb_s']:>7.1f} MB/s"
        f"  cpu {r['broker_cpu_s_per_gb']} s/GB  errors {r['errors']}"
        f"  lag max {r['follower_lag_max_records']} rec  zk changes {r['zk_state_changes']}"
        f"  isr min {r['isr_min_metadata']}  caught up {r['caught_up_s']} s"
    )
    if "publish_p99_ms" in r:
        text += f"  publish p99 {r['publish_p99_ms']} ms  e2e p99 {r.get('e2e_p99_ms')} ms"
    if r["log_warn_lines"] or r["log_isr_lines"]:
        text += f"  log: {r['log_warn_lines']} WARN+, {r['log_isr_lines']} ISR"
    return text


# -- the whole run ----------------------------------------------------------------------------


def _median_rows(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(system, workload) -> the median of each number over repetitions (peak RSS: the largest
    per broker; flags: any)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], r["workload"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        m: dict[str, Any] = dict(rs[0])
        for k, v in rs[0].items():
            if isinstance(v, bool) or v is None:
                continue
            if isinstance(v, int | float):
                vals = [r[k] for r in rs if isinstance(r.get(k), int | float)]
                m[k] = statistics.median(vals)
        m["broker_peak_rss_mb"] = [
            max(x) for x in zip(*(r["broker_peak_rss_mb"] for r in rs), strict=True)
        ]
        m["zk_state_changes"] = sum(r["zk_state_changes"] for r in rs)
        m["isr_min_metadata"] = min(r["isr_min_metadata"] for r in rs)
        m["errors"] = sum(r["errors"] for r in rs)
        m["log_warn_lines"] = sum(r["log_warn_lines"] for r in rs)
        m["caught_up_s"] = max(
            (r["caught_up_s"] for r in rs), key=lambda x: float("inf") if x is None else x
        )
        if "rate_met" in rs[0]:
            m["rate_met"] = all(r["rate_met"] for r in rs)
        m["reps"] = len(rs)
        out[key] = m
    return out


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)


def tables(rows: list[dict[str, Any]]) -> str:
    med = _median_rows(rows)
    lines = [
        "Max rate (3 producers, 6 partitions, RF 3, min.insync.replicas 2; medians over reps):",
        "",
        "| workload | system | records/s | MB/s | broker CPU s/GB (3 summed) |"
        " peak RSS per broker (MiB) | client CPU util | errors | ISR: zk changes / min in"
        " Metadata | follower lag max (records, ms) | caught up after (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        for (system, workload), m in med.items():
            if workload != row.name:
                continue
            lines.append(
                f"| {workload} | {system} | {_fmt(m['records_s'])} | {_fmt(m['mb_s'], 1)} | "
                f"{_fmt(m['broker_cpu_s_per_gb'], 1)} | "
                f"{' / '.join(_fmt(x) for x in m['broker_peak_rss_mb'])} | "
                f"{_fmt(m['client_cpu_util'], 2)} | {m['errors']} | "
                f"{m['zk_state_changes']} / {m['isr_min_metadata']} | "
                f"{_fmt(m['follower_lag_max_records'])}, {_fmt(m['follower_lag_max_ms'], 1)} | "
                f"{_fmt(m['caught_up_s'], 2)} |"
            )
    rate_lines = []
    for row in ROWS:
        for (system, workload), m in med.items():
            if workload != row.rate_name:
                continue
            rate_lines.append(
                f"| {workload} | {system} | {_fmt(m.get('target_rate'))} | "
                f"{_fmt(m['records_s'])}{'' if m.get('rate_met') else ' (short)'} | "
                f"{_fmt(m['mb_s'], 1)} | "
                f"{_fmt(m.get('publish_p50_ms'), 2)} / {_fmt(m.get('publish_p99_ms'), 2)} / "
                f"{_fmt(m.get('publish_p999_ms'), 2)} | "
                f"{_fmt(m.get('e2e_p50_ms'), 2)} / {_fmt(m.get('e2e_p99_ms'), 2)} / "
                f"{_fmt(m.get('e2e_p999_ms'), 2)} | {_fmt(m['broker_cpu_s_per_gb'], 1)} | "
                f"{m['errors']} | {m['zk_state_changes']} / {m['isr_min_metadata']} |"
            )
    if rate_lines:
        lines += [
            "",
            "Fixed rate (the same rate for every system; probe 1000 records/s, RF 3; (short): the"
            " records/s fell more than 5% below the target, so the latencies are those of an"
            " overloaded cluster):",
            "",
            "| workload | system | target records/s | records/s | MB/s |"
            " publish p50 / p99 / p99.9 (ms) | end-to-end p50 / p99 / p99.9 (ms) |"
            " broker CPU s/GB | errors | ISR: zk changes / min in Metadata |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rate_lines,
        ]
    return "\n".join(lines)


def run(opts: Options) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        opts.results.parent.mkdir(parents=True, exist_ok=True)
        with open(opts.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    opts.broker_cpus, opts.client_cpus = cpu_split(opts.pin)
    if opts.client_cpus:
        # The harness, ZooKeeper and every load process inherit the client CPUs.
        os.sched_setaffinity(0, opts.client_cpus)
    emit(
        {
            "type": "run",
            "run_id": opts.run_id,
            "mode": opts.mode,
            "sizes": asdict(opts.sizes),
            "systems": opts.systems,
            "rows": [r.name for r in opts.rows],
            "rate_fraction": opts.rate_fraction,
            "share_last": opts.share_last,
            "pin": opts.pin,
            "broker_cpus": sorted(opts.broker_cpus or []),
            "client_cpus": sorted(opts.client_cpus or []),
            "cpus": os.cpu_count(),
            "loadavg": loadavg(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    rates: dict[str, float] = {}

    def fixed_rates() -> dict[str, float]:
        """Once every maximum is known: the fraction of the lower median per row."""
        if not rates:
            med = _median_rows([r for r in rows if "workload" in r])
            for row in opts.rows:
                maxima = [
                    med[(s, row.name)]["records_s"] for s in opts.systems if (s, row.name) in med
                ]
                rates[row.name] = opts.rate_fraction * min(maxima) if maxima else 0
            _say("fixed rates: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items()))
        return rates

    with (
        tempfile.TemporaryDirectory(prefix="kbroker-repl-ballast-", dir=opts.data_root) as tmp,
        pagecache.filler(opts.page_cache, Path(tmp) / "pagecache-ballast") as opts.fill_page_cache,
    ):
        _sessions(opts, emit, fixed_rates)
    return rows


def _sessions(
    opts: Options,
    emit: Callable[[dict[str, Any]], None],
    fixed_rates: Callable[[], dict[str, float]],
) -> None:
    """Every session: each rep's at full speed, then (``rate_fraction``) at fixed rates."""
    reps = opts.sizes.reps
    shared: tuple[str, int] | None = None
    for rep in range(1, reps + 1):
        order = opts.systems if rep % 2 else list(reversed(opts.systems))
        for i, system in enumerate(order):
            # --quick: the last max-rate session goes on with the fixed-rate rows (one cluster
            # start fewer); otherwise every fixed-rate session is a fresh cluster.
            share = (
                opts.share_last and opts.rate_fraction > 0 and rep == reps and i == len(order) - 1
            )
            if share:
                shared = (system, rep)
            for row in session(
                system, opts.rows, opts, rep, then_rates=fixed_rates if share else None
            ):
                emit(row)
    if opts.rate_fraction <= 0:
        return
    rates = fixed_rates()
    for rep in range(1, reps + 1):
        order = opts.systems if rep % 2 else list(reversed(opts.systems))
        for system in order:
            if (system, rep) == shared:
                continue
            for row in session(system, opts.rows, opts, rep, rates):
                emit(row)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds through every cluster's cleanup


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.replicated",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition (~3 min)")
    ap.add_argument("--systems", default="kbroker,kafka")
    ap.add_argument("--reps", type=int, help="repetitions [3; 1 with --quick]")
    ap.add_argument("--only", help="comma-separated row name prefixes (e.g. repl.p3.acks1)")
    ap.add_argument(
        "--rate-fraction",
        type=float,
        default=0.5,
        help="fixed rate as a fraction of the lower median maximum per row; 0: no fixed rate",
    )
    ap.add_argument(
        "--pin",
        choices=["split", "none"],
        default="split",
        help="split: the three brokers on the first CPU, ZooKeeper and the load on the others",
    )
    ap.add_argument("--sample-s", type=float, default=0.5, help="health sampling interval")
    ap.add_argument(
        "--stop-timeout",
        type=float,
        default=15,
        help="seconds each broker gets to stop on SIGTERM before SIGKILL",
    )
    ap.add_argument("--dir", type=Path, help="where brokers keep data [a temporary folder]")
    ap.add_argument("--logs", type=Path, default=LOGS, help="broker logs, one folder per session")
    ap.add_argument("--results", type=Path, default=RESULTS, help="JSON lines appended here")
    pagecache.add_option(ap, default=None)
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = Sizes(**{**asdict(sizes), "reps": args.reps})
    rows = ROWS
    if args.only:
        prefixes = args.only.split(",")
        rows = [r for r in ROWS if any(r.name.startswith(p) for p in prefixes)]
    system_list = args.systems.split(",")
    if not cluster.ZOOKEEPER_JAR.exists():
        sys.exit("bench.replicated: needs ZooKeeper (deploy/setup.sh cluster)")
    if "kafka" in system_list and not systems.kafka_available(cluster.KAFKA_ZK_VERSION):
        systems.fetch_kafka(cluster.KAFKA_ZK_VERSION)
    opts = Options(
        systems=system_list,
        sizes=sizes,
        rows=rows,
        pin=args.pin,
        rate_fraction=args.rate_fraction,
        sample_s=args.sample_s,
        stop_timeout=args.stop_timeout,
        data_root=args.dir,
        logs=args.logs,
        results=args.results,
        run_id=time.strftime("%Y%m%d-%H%M%S"),
        mode="quick" if args.quick else "full",
        share_last=args.quick,
        page_cache=args.page_cache or ("as-is" if args.quick else "fill"),
    )
    signal.signal(signal.SIGTERM, _terminate)
    # kazoo's retries while ZooKeeper starts are expected; its warnings are noise here.
    logging.getLogger("kazoo.client").setLevel(logging.CRITICAL)
    t0 = time.monotonic()
    try:
        rows_out = run(opts)
    except KeyboardInterrupt:
        print("bench.replicated: interrupted; every broker and ZooKeeper stopped", file=sys.stderr)
        return 130
    print()
    print(tables([r for r in rows_out if "workload" in r]))
    print(f"\n{time.monotonic() - t0:.0f} s; rows appended to {opts.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
