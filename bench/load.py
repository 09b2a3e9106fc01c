"""Produce/consume load through the real protocol, with librdkafka clients.

    python -m bench.load [--bootstrap HOST:PORT] [--producers 2] [--records 500000]
                         [--size 1024] [--acks 1|all] [--partitions 6] [--json OUT]

Without --bootstrap it starts a kbroker on a fresh data directory (--data-dir
or a temporary one) and stops it afterwards, recording its CPU time and
peak RSS. Load: --producers processes, each producing its share of
--records as fast as librdkafka allows; produce latency is measured per
record from send to delivery report (p50/p99/p99.9). Then one consumer
reads the whole topic from offset 0 (catch-up, the sendfile path).
Prints one JSON line per phase.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def _producer(bootstrap: str, topic: str, count: int, size: int, acks: str, out: Any) -> None:
    """Produces ``count`` records as fast as librdkafka takes them; reports only errors."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "queue.buffering.max.messages": 1_000_000,
        "compression.type": "none",
        "enable.idempotence": acks == "all",
        # No Python callback per record: only failed deliveries are reported.
        "delivery.report.only.error": True,
        "on_delivery": lambda err, msg: errors.append(err),
    })
    payload = os.urandom(size)
    start = time.perf_counter()
    produce = p.produce
    for i in range(count):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:  # the client's queue is full: let it drain
                p.poll(0.005)
        if i & 1023 == 0:
            p.poll(0)
    p.flush(120)
    out.put({"elapsed": time.perf_counter() - start, "errors": len(errors)})


def _latency_probe(bootstrap: str, topic: str, size: int, acks: str, stop: Any, out: Any) -> None:
    """Sends one record per millisecond and measures each send-to-acknowledgement time."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                  "enable.idempotence": acks == "all"})
    payload = os.urandom(size)
    latencies: list[float] = []

    def report(err: Any, msg: Any, sent_at: float) -> None:
        if err is None:
            latencies.append(time.perf_counter() - sent_at)

    while not stop.is_set():
        sent_at = time.perf_counter()
        p.produce(topic, payload, on_delivery=lambda err, msg, t=sent_at: report(err, msg, t))
        p.poll(0.001)
    p.flush(30)
    out.put(latencies)


def _consume(bootstrap: str, topic: str, partitions: int, total: int) -> tuple[float, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "queued.max.messages.kbytes": 262_144,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    nbytes = 0
    start = time.perf_counter()
    deadline = start + 300
    while seen < total and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                seen += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed, nbytes if seen == total else -seen


def _broker_usage(pid: int) -> dict[str, float]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
        return {"broker_cpu_s": round(cpu, 2), "broker_peak_rss_mb": round(rss / 1024, 1)}
    except (OSError, StopIteration, IndexError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acks", choices=["0", "1", "all"], default="1")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="a small run (for tests)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 20_000)

    proc = None
    tmp = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        port = _free_port()
        bootstrap = f"127.0.0.1:{port}"
        data = args.data_dir or Path(tempfile.mkdtemp(prefix="kbroker-bench-"))
        tmp = None if args.data_dir else data
        proc = subprocess.Popen(
            [sys.executable, "-m", "kbroker.cli", "serve", "--data-dir", str(data), "--listen", bootstrap,
             "--log-level", "WARNING"],
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("broker did not start") from None
                time.sleep(0.1)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"bench-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        per = args.records // args.producers
        ctx = mp.get_context("spawn")
        queue: Any = ctx.Queue()
        lat_queue: Any = ctx.Queue()
        stop = ctx.Event()
        probe = ctx.Process(target=_latency_probe, args=(bootstrap, topic, args.size, args.acks, stop, lat_queue))
        workers = [
            ctx.Process(target=_producer, args=(bootstrap, topic, per, args.size, args.acks, queue))
            for _ in range(args.producers)
        ]
        probe.start()
        start = time.perf_counter()
        for w in workers:
            w.start()
        results = [queue.get(timeout=600) for _ in workers]
        elapsed = time.perf_counter() - start
        stop.set()
        lat = sorted(lat_queue.get(timeout=60))
        for w in [*workers, probe]:
            w.join(30)
        total = per * args.producers + len(lat)
        row: dict[str, Any] = {
            "system": "kbroker", "phase": "produce", "record_bytes": args.size, "acks": args.acks,
            "producers": args.producers, "partitions": args.partitions, "records": total,
            "errors": sum(r["errors"] for r in results),
            "records_s": round(total / elapsed), "mb_s": round(total * args.size / elapsed / 1e6, 1),
            "latency_samples": len(lat),
            "p50_ms": round(_percentile(lat, 0.5) * 1000, 2), "p99_ms": round(_percentile(lat, 0.99) * 1000, 2),
            "p999_ms": round(_percentile(lat, 0.999) * 1000, 2),
        }
        print(json.dumps(row), flush=True)
        rows = [row]
        c_elapsed, nbytes = _consume(bootstrap, topic, args.partitions, total)
        crow = {
            "system": "kbroker", "phase": "catch-up consume", "record_bytes": args.size, "records": total,
            "complete": nbytes >= 0, "records_s": round(total / c_elapsed),
            "mb_s": round(max(nbytes, 0) / c_elapsed / 1e6, 1),
        }
        if proc is not None:
            crow.update(_broker_usage(proc.pid))
        print(json.dumps(crow), flush=True)
        rows.append(crow)
        if args.json:
            with open(args.json, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
