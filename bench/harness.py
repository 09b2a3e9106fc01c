"""Runs the workloads on every system, alternating A/B, and writes the results.

Order: the disk baseline; then, for each repetition, the base session (see
bench/workloads.py) and the flush session on each system, the first system
alternating between repetitions; then the fixed-rate session, whose rate is
50% of the lower of the systems' median ``omb.max`` rates. Each session
starts a fresh broker on a fresh data directory and stops it afterwards.

With ``security`` (a list of security protocols) the run is the cost of
security instead: certificates made for the run (bench/security.py), and for
each repetition one session per system, the first system alternating, on a
broker with a listener of every protocol, running ``sec.*`` for each protocol
asked (bench/workloads.py).

With ``transactions`` the run is transactional produce instead
(bench/transactions.py): for each repetition, a single-node session per
system, then a session per system on three brokers (replication factor 3),
each running transactions of 1, 100 and 10,000 records.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import disk, loadgen, pagecache, systems, transactions, wire
from .pagecache import Ballast, meminfo
from .profile import perf_record
from .security import Security
from .stats import latency_percentiles, percentile
from .workloads import (
    FULL,
    QUICK,
    WIRE_IN_FLIGHT,
    WIRE_REFERENCE,
    Sizes,
    Workload,
    base_session,
    flush_session,
    rate_session,
    security_session,
    transactions_session,
    wire_rate_session,
    wire_session,
)

MB = 1_000_000  # throughput in MB/s is decimal, as Kafka's tools print it
QUANTILES = [q / 100 for q in range(0, 100)] + [0.995, 0.999, 0.9999, 1.0]


@dataclass
class Options:
    out: Path
    data_root: Path
    systems: list[str]
    sizes: Sizes
    pin: str = "split"  # split: broker on CPU 0, clients on the rest; none: no pinning
    flush_messages: int = 10_000
    only: list[str] | None = None  # workload name prefixes to run
    disk_bytes: int = 1 << 30
    plots: bool = True
    rate: float = 0  # omb.rate50's records/s; 0: 50% of the lower median omb.max
    profile: bool = False  # perf on every kbroker run (bench/profile.py)
    # Security protocols whose sec.* rows to run (instead of the other workloads); None: none.
    security: list[str] | None = None
    security_producers: int = 2  # producer processes of the sec.* produce rows
    kafka_version: str = systems.KAFKA_VERSION
    transactions: bool = False  # the txn.* rows instead of the other workloads
    transaction_producers: int = 8  # transactional producer processes of each txn.* row
    wire: bool = True  # the wire.* rows (bench/wire.py's generator) in the table
    # Fill the free memory with cached file pages before the disk baseline and each row
    # (bench/pagecache.py): rows then write into a full page cache, as on a server.
    pagecache: bool = True


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def cpu_split(pin: str) -> tuple[set[int] | None, set[int] | None]:
    """(broker CPUs, client CPUs)."""
    cpus = sorted(os.sched_getaffinity(0))
    if pin == "none" or len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


class Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.t0 = time.monotonic()

    def step(self, text: str) -> None:
        self.done += 1
        self.say(f"[{self.done}/{self.total}] {text}")

    def say(self, text: str) -> None:
        mins, secs = divmod(int(time.monotonic() - self.t0), 60)
        print(f"{mins:3d}:{secs:02d} {text}", file=sys.stderr, flush=True)


def latency_summary(prefix: str, samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {}
    s = sorted(samples)
    return {
        f"{prefix}_samples": len(s),
        **latency_percentiles(prefix, s),
        f"{prefix}_max_ms": round(s[-1], 3),
        f"{prefix}_quantiles_ms": [round(percentile(s, q), 3) for q in QUANTILES],
    }


class Runner:
    def __init__(
        self, opts: Options, emit: Callable[[dict[str, Any]], None], progress: Progress
    ) -> None:
        self.opts = opts
        self.emit = emit
        self.progress = progress
        self.broker_cpus, self.client_cpus = cpu_split(opts.pin)
        self.disk: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []
        # The run's certificates and SASL user when it measures security.
        self.security: Security | None = None
        self.ballast = Ballast(opts.data_root / "pagecache-ballast") if opts.pagecache else None

    def fill_page_cache(self) -> dict[str, Any]:
        """Tops the ballast up (untimed); the row's note of it."""
        return pagecache.fill(self.ballast, self.progress.say)

    def wanted(self, w: Workload) -> bool:
        return self.opts.only is None or any(w.name.startswith(p) for p in self.opts.only)

    @contextmanager
    def broker(
        self, system: str, settings: dict[str, str], replicas: int = 1
    ) -> Iterator[systems.Broker]:
        """One broker, or with ``replicas`` 3 three brokers on a ZooKeeper of their own."""
        log = self.opts.out / "logs" / f"{system}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        if replicas > 1:
            with transactions.three_brokers(
                system, self.opts.data_root, self.broker_cpus, log.parent
            ) as cluster:
                yield cluster
            return
        extra: dict[str, Any] = {"security": self.security}
        if system == "kafka":
            extra["version"] = self.opts.kafka_version
        with systems.launcher(system)(
            self.opts.data_root, settings, self.broker_cpus, log, **extra
        ) as b:
            yield b

    def profiled(self, b: systems.Broker, label: str) -> AbstractContextManager[None]:
        """perf on kbroker while one workload runs, with --profile."""
        if self.opts.profile and b.system == "kbroker":
            return perf_record(b.proc.pid, self.opts.out / f"profile-{label}.perf.data")
        return nullcontext()

    def session(
        self,
        system: str,
        rep: int,
        workloads: list[Workload],
        settings: dict[str, str],
        policy: str,
        rates: dict[str, float] | None = None,
        replicas: int = 1,
    ) -> None:
        todo = [w for w in workloads if self.wanted(w)]
        if not todo:
            return
        topics: dict[str, str] = {}
        with self.broker(system, settings, replicas) as b:
            if all(w.kind == "transactions" for w in todo):
                # Each size for a third of a row's time: the JIT (three JVMs on one core in
                # the RF 3 session), the transaction state topic and its coordinators.
                sizes = self.opts.sizes
                transactions.warm_up(
                    b,
                    replicas,
                    sizes.warmup_records // 20,
                    todo[0].producers,
                    sizes.transaction_seconds / 3,
                )
            else:
                self.warm_up(b)
            tls = self.negotiated(b)
            for w in todo:
                with self.profiled(b, f"{system}-rep{rep}-{w.name}"):
                    row = self.run_one(b, w, topics, (rates or {}).get(w.name, 0.0))
                row.update(rep=rep, flush_policy=policy)
                if w.security != "PLAINTEXT":
                    row["tls"] = tls
                self.rows.append(row)
                self.emit(row)
                self.progress.step(
                    f"{system:<7} rep {rep} {w.name:<30} {row.get('records_s', 0):>10,.0f} rec/s "
                    f"{row.get('mb_s', 0):>8.1f} MB/s"
                    + (
                        f"  publish p99 {row['publish_p99_ms']} ms"
                        if "publish_p99_ms" in row
                        else ""
                    )
                    + (f"  e2e p99 {row['e2e_p99_ms']} ms" if "e2e_p99_ms" in row else "")
                    + (
                        f"  generator CPU {row['client_cpu_util']:.2f}"
                        if w.kind.startswith("wire.")
                        else ""
                    )
                    + (
                        f"  {row['transactions_s']:,.0f} txn/s  commit p50 "
                        f"{row['commit_p50_ms']} ms p99 {row['commit_p99_ms']} ms  visible "
                        f"{row['visible_records']:,}  CPU {row['broker_cpu_s_per_gb']} s/GB"
                        if "commit_p50_ms" in row
                        else ""
                    )
                )

    def client(self, protocol: str) -> dict[str, str]:
        """librdkafka settings for the listener of ``protocol``."""
        return {} if self.security is None else self.security.client_settings(protocol)

    def negotiated(self, b: systems.Broker) -> str | None:
        """What a default OpenSSL client negotiates with the broker's SSL listener."""
        if self.security is None or "SSL" not in b.endpoints:
            return None
        return self.security.negotiated(b.endpoint("SSL"))

    def warm_up(self, b: systems.Broker) -> None:
        """Untimed traffic first (as OMB's warm-up phase): JIT compilation, page faults,
        connections; on a secured broker, 1 KiB records through every listener."""
        n = self.opts.sizes.warmup_records
        if self.security is not None:
            for protocol, address in b.endpoints.items():
                client = self.client(protocol)
                topic = f"warmup-{protocol.lower()}-{uuid.uuid4().hex[:6]}"
                loadgen.create_topic(address, topic, 6, client=client)
                loadgen.produce(address, topic, n // 4, 1024, "1", 1, client=client)
                loadgen.consume(address, topic, 1, client=client)
            return
        for size in (100, 1024):
            topic = f"warmup-{size}-{uuid.uuid4().hex[:6]}"
            loadgen.create_topic(b.bootstrap, topic, 6)
            loadgen.produce(b.bootstrap, topic, n if size == 100 else n // 4, size, "1", 1)
            loadgen.consume(b.bootstrap, topic, 1)

    def run_one(
        self, b: systems.Broker, w: Workload, topics: dict[str, str], rate: float
    ) -> dict[str, Any]:
        topic = f"{w.name.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
        address, client = b.endpoint(w.security), self.client(w.security)
        if w.kind in ("consume", "wire.consume"):
            topic = topics[w.source]
        else:
            loadgen.create_topic(
                address,
                topic,
                w.partitions,
                w.replicas,
                transactions.topic_config(w.replicas),
                60,
                client=client,
            )
            topics[w.name] = topic
        probe_topic = f"probe-{uuid.uuid4().hex[:6]}"
        if w.probe:
            loadgen.create_topic(b.bootstrap, probe_topic, 1)
        latencies: dict[str, list[float]] = {}
        row: dict[str, Any] = {}
        probe = (
            loadgen.LatencyProbe(b.bootstrap, probe_topic, w.record_bytes, w.acks)
            if w.probe
            else None
        )
        # Untimed: the free memory filled (the host's first touch of it paid here, not in the
        # row), then the earlier rows' dirty pages written back, so that every wire row
        # writes into a page cache with none waiting (not throttled by the rows before it).
        row.update(self.fill_page_cache())
        if w.kind.startswith("wire."):
            os.sync()
        with probe or nullcontext():
            b.reset_peak_rss()
            before = b.usage()
            if w.kind == "produce":
                r = loadgen.produce(
                    address, topic, w.records, w.record_bytes, w.acks, w.producers, client=client
                )
                records, elapsed, client_cpu = r.records, r.elapsed, r.client_cpu_s
                row["errors"] = r.errors
            elif w.kind == "rate":
                total = int(rate * w.seconds)
                r = loadgen.produce(
                    b.bootstrap, topic, total, w.record_bytes, w.acks, w.producers, rate
                )
                records, elapsed, client_cpu = r.records, r.elapsed, r.client_cpu_s
                row.update(errors=r.errors, target_rate=round(rate))
            elif w.kind == "consume":
                c = loadgen.consume(address, topic, w.consumers, client=client)
                records, elapsed, client_cpu = c.records, c.elapsed, c.client_cpu_s
                row["complete"] = (
                    all(n == c.per_consumer[0] for n in c.per_consumer) and c.records > 0
                )
            elif w.kind == "prodcons":
                with loadgen.KcatConsumers(
                    b.bootstrap, topic, w.consumers, count=w.records
                ) as group:
                    r = loadgen.produce(
                        b.bootstrap, topic, w.records, w.record_bytes, w.acks, w.producers
                    )
                    c = group.wait(900)
                records, elapsed = r.records, r.elapsed
                client_cpu = (
                    (r.client_cpu_s + c.client_cpu_s) * r.elapsed / max(r.elapsed, c.elapsed)
                )
                row.update(
                    errors=r.errors,
                    consumed_records_s=round(c.records / c.elapsed),
                    consumed_mb_s=round(c.records * w.record_bytes / c.elapsed / MB, 1),
                )
            elif w.kind == "transactions":
                t = loadgen.produce_transactions(
                    address,
                    topic,
                    w.partitions,
                    w.records,
                    w.transaction_records,
                    w.record_bytes,
                    w.producers,
                    w.seconds,
                    # The brokers' CPU from the moment the producers start: not their
                    # InitProducerId calls and connections.
                    on_start=lambda: before.update(b.usage()),
                    client=client,
                )
                records, elapsed, client_cpu = t.records, t.elapsed, t.client_cpu_s
                row.update(
                    errors=t.errors,
                    records_per_transaction=w.transaction_records,
                    replicas=w.replicas,
                    transactions=t.transactions,
                    transactions_s=round(t.transactions / t.elapsed, 1),
                    failed_transactions=t.failed_transactions,
                    # Until every follower holds every record and marker (0 on one node).
                    caught_up_s=transactions.settle(b, topic, w.partitions),
                )
                latencies["commit_ms"] = t.commit_ms
            elif w.kind.startswith("wire."):
                records, elapsed, client_cpu, generator = self.run_wire(b, w, topic, rate, before)
                row.update(generator)
            elif w.kind == "e2e":
                t0 = time.perf_counter()
                time.sleep(w.seconds)
                records, elapsed, client_cpu = 0, time.perf_counter() - t0, 0.0
            else:
                raise ValueError(w.kind)
            after = b.usage()
            if probe is not None:
                latencies = probe.stop()
        if w.kind == "transactions":
            row["visible_records"] = transactions.committed_visible(address, topic, records)
            if isinstance(b, transactions.ThreeBrokers):
                row["broker_peak_rss_mb_each"] = b.peak_rss_each()
            row["broker_cpu_ms_per_transaction"] = (
                round(
                    (after.get("cpu_s", 0) - before.get("cpu_s", 0)) / row["transactions"] * 1e3, 3
                )
                if row["transactions"]
                else None
            )
        broker_cpu = after.get("cpu_s", 0) - before.get("cpu_s", 0)
        mb_s = records * w.record_bytes / elapsed / MB if records else 0.0
        if w.kind == "wire.consume":  # what was read: the batches' bytes, headers and all
            mb_s = row["bytes"] / elapsed / MB if records else 0.0
        n_client = len(self.client_cpus or os.sched_getaffinity(0))
        if w.kind.startswith("wire."):
            n_client = 1  # one process: its CPU as a fraction of one core
        row = {
            "system": b.system,
            "version": b.version,
            "workload": w.name,
            "security": w.security,
            "settings": {k: v for k, v in asdict(w).items() if v not in ("", 0, False)}
            | {"broker": b.settings},
            "records": records,
            "elapsed_s": round(elapsed, 3),
            "records_s": round(records / elapsed) if records else 0,
            "mb_s": round(mb_s, 1),
            **row,
            "disk_fraction": round(mb_s * MB / (self.disk["buffered_write_mb_s"] * (1 << 20)), 3)
            if self.disk.get("buffered_write_mb_s")
            and w.kind in ("produce", "rate", "prodcons", "wire.produce", "wire.prodcons")
            else None,
            "sendfile_fraction": round(
                mb_s * MB / (self.disk["sendfile_loopback_mb_s"] * (1 << 20)), 3
            )
            if self.disk.get("sendfile_loopback_mb_s") and w.kind == "wire.consume"
            else None,
            "broker_cpu_s": round(broker_cpu, 2),
            "broker_cpu_util": round(broker_cpu / elapsed, 2),
            "broker_cpu_s_per_gb": round(broker_cpu / (records * w.record_bytes / 1e9), 2)
            if records
            else None,
            "broker_peak_rss_mb": round(after.get("peak_rss_mb", 0), 1),
            "client_cpu_s": round(client_cpu, 2),
            "client_cpu_util": round(client_cpu / elapsed / n_client, 2),
            "client_cpu_s_per_gb": round(client_cpu / (records * w.record_bytes / 1e9), 2)
            if records
            else None,
            "pin": {
                "broker": sorted(self.broker_cpus or []),
                "clients": sorted(self.client_cpus or []),
            },
            **latency_summary("publish", latencies.get("publish_ms", [])),
            **latency_summary("e2e", latencies.get("e2e_ms", [])),
            **latency_summary("commit", latencies.get("commit_ms", [])),
            "loadavg": loadavg(),
        }
        return row

    def run_wire(
        self, b: systems.Broker, w: Workload, topic: str, rate: float, before: dict[str, float]
    ) -> tuple[int, float, float, dict[str, Any]]:
        """A wire.* row through ``python -m bench.wire`` processes: (records, elapsed, the
        generator's CPU seconds, the row's own fields). The broker's CPU is counted from the
        moment the generator's timed part starts (``before`` is refreshed then)."""
        acks = "-1" if w.acks == "all" else w.acks
        produce = [
            "--record-bytes",
            str(w.record_bytes),
            "--acks",
            acks,
            "--connections",
            str(w.producers),
            "--in-flight",
            str(WIRE_IN_FLIGHT),
            "--seconds",
            str(w.seconds),
        ]
        if w.records:
            produce += ["--records", str(w.records)]
        if w.kind == "wire.rate":
            produce += ["--rate", str(round(rate))]
        fields: dict[str, Any] = {}
        if w.kind == "wire.consume":
            with wire.WireProcess("consume", b.bootstrap, topic) as c:
                got = _timed(b, before, c)
            fields.update(
                complete=got["complete"],
                bytes=got["bytes"],
                fetches=got["fetches"],
                errors=got["errors"],
            )
        elif w.kind == "wire.prodcons":
            # The producer starts only once the consumer has taken its start offsets.
            with wire.WireProcess("consume", b.bootstrap, topic, "--follow-stdin") as c:
                c.started()
                with wire.WireProcess("produce", b.bootstrap, topic, *produce) as p:
                    got = _timed(b, before, p)
                c.end_follow()
                read = c.row()
            fields.update(
                errors=got["errors"] + read["errors"],
                consumed_records=read["records"],
                consumed_mb_s=round(read["records"] * w.record_bytes / read["elapsed_s"] / MB, 1),
                consumer_drain_s=read["drain_s"],
                consumer_cpu_util=read["client_cpu_util"],
                complete=read["complete"] and read["records"] == got["records"],
            )
        else:
            with wire.WireProcess("produce", b.bootstrap, topic, *produce) as p:
                got = _timed(b, before, p)
            fields.update(
                errors=got["errors"],
                generator_connections=got["connections"],
                generator_in_flight=got["in_flight"],
                generator_requests=got["requests"],
                # Each request's time to its answer (the probe's are publish_*).
                **{f"generator_{k}": v for k, v in got.items() if k.startswith("publish_")},
            )
            if w.kind == "wire.rate":
                fields["target_rate"] = round(rate)
        if got.get("error_codes"):
            fields["error_codes"] = got["error_codes"]
        if got.get("fatal"):
            fields["fatal"] = got["fatal"]
        fields["generator_cpu_util"] = got["client_cpu_util"]
        return got["records"], got["elapsed_s"], got["client_cpu_s"], fields

    def median_of(self, system: str, workload: str, key: str = "records_s") -> float:
        vals = [r[key] for r in self.rows if r["system"] == system and r["workload"] == workload]
        return statistics.median(vals) if vals else 0.0


def _timed(b: systems.Broker, before: dict[str, float], proc: wire.WireProcess) -> dict[str, Any]:
    """A generator process's row, with the broker's CPU counted from its timed part."""
    proc.started()
    before.update(b.usage())
    return proc.row()


def run(opts: Options) -> list[dict[str, Any]]:
    """Runs everything; returns the rows also written to ``out/results.jsonl``."""
    opts.out.mkdir(parents=True, exist_ok=True)
    jsonl = opts.out / "results.jsonl"
    jsonl.write_text("")
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        with open(jsonl, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    progress = Progress(0)
    runner = Runner(opts, emit, progress)
    try:
        _measure(runner)
    finally:
        if runner.ballast is not None:
            runner.ballast.close()
    return rows


def _measure(runner: Runner) -> None:
    opts, emit, progress, s = runner.opts, runner.emit, runner.progress, runner.opts.sizes
    if opts.transactions:
        per_rep = [
            w
            for replicas in (1, 3)
            for w in transactions_session(s, replicas, opts.transaction_producers)
            if runner.wanted(w)
        ]
    elif opts.security is not None:
        per_rep = [
            w
            for w in security_session(s, opts.security, 1, opts.security_producers)
            if runner.wanted(w)
        ]
    else:
        table = base_session(s) + flush_session(s) + rate_session(s)
        if opts.wire:
            table += wire_session(s) + wire_rate_session(s)
        per_rep = [w for w in table if runner.wanted(w)]
    progress.total = len(opts.systems) * s.reps * len(per_rep)
    if runner.client_cpus:
        os.sched_setaffinity(0, runner.client_cpus)  # the harness and its load processes
    filled = runner.fill_page_cache()
    progress.say(f"disk baseline on {opts.data_root} ({opts.disk_bytes >> 20} MiB) ...")
    runner.disk = disk.baseline(
        opts.data_root,
        opts.disk_bytes,
        runs=1 if s.reps == 1 else 2,
        sender_cpus=runner.broker_cpus,
        reader_cpus=runner.client_cpus,
    )
    emit({"type": "disk", **runner.disk})
    emit(
        {
            "type": "machine",
            "cpus": os.cpu_count(),
            "loadavg": loadavg(),
            "pin": opts.pin,
            "broker_cpus": sorted(runner.broker_cpus or []),
            "client_cpus": sorted(runner.client_cpus or []),
            "python": sys.version.split()[0],
            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "security": opts.security,
            "transactions": opts.transactions,
            "memory_mb": meminfo("MemTotal") >> 20,
            **filled,
        }
    )
    progress.say(f"disk: {json.dumps(runner.disk)}")
    if opts.security is not None:
        runner.security = Security.make(opts.data_root / "certs")
        for rep in range(1, s.reps + 1):
            order = opts.systems if rep % 2 else list(reversed(opts.systems))
            for system in order:
                sec_rows = security_session(s, opts.security, rep, opts.security_producers)
                runner.session(system, rep, sec_rows, {}, "page cache")
        return
    if opts.transactions:
        for rep in range(1, s.reps + 1):
            order = opts.systems if rep % 2 else list(reversed(opts.systems))
            for replicas in (1, 3):
                for system in order:
                    txn_rows = transactions_session(s, replicas, opts.transaction_producers)
                    runner.session(system, rep, txn_rows, {}, "page cache", replicas=replicas)
        return
    flush = {"log.flush.interval.messages": str(opts.flush_messages)}
    for rep in range(1, s.reps + 1):
        order = opts.systems if rep % 2 else list(reversed(opts.systems))
        for system in order:
            runner.session(system, rep, base_session(s), {}, "page cache")
        for system in order:
            runner.session(
                system, rep, flush_session(s), flush, f"flush every {opts.flush_messages} messages"
            )
        if opts.wire:
            for system in order:
                runner.session(system, rep, wire_session(s), {}, "page cache")
    maxima = [runner.median_of(system, "omb.max") for system in opts.systems]
    rate = opts.rate or 0.5 * min((m for m in maxima if m > 0), default=0)
    if rate > 0:
        why = "--rate" if opts.rate else "50% of the lower median omb.max"
        progress.say(f"fixed rate: {rate:,.0f} records/s ({why})")
        for rep in range(1, s.reps + 1):
            order = opts.systems if rep % 2 else list(reversed(opts.systems))
            for system in order:
                runner.session(system, rep, rate_session(s), {}, "page cache", {"omb.rate50": rate})
    wire_maxima = [runner.median_of(system, WIRE_REFERENCE) for system in opts.systems]
    wire_max = min((m for m in wire_maxima if m > 0), default=0)
    if opts.wire and wire_max > 0:
        wire_rates = {w.name: w.rate_fraction * wire_max for w in wire_rate_session(s)}
        progress.say(
            "wire fixed rates: "
            + ", ".join(f"{n} {r:,.0f} records/s" for n, r in wire_rates.items())
            + f" (of the lower median {WIRE_REFERENCE})"
        )
        for rep in range(1, s.reps + 1):
            order = opts.systems if rep % 2 else list(reversed(opts.systems))
            for system in order:
                runner.session(system, rep, wire_rate_session(s), {}, "page cache", wire_rates)


def sizes_for(quick: bool) -> Sizes:
    return QUICK if quick else FULL
