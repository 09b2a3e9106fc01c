"""What kbroker's metrics cost at the benchmark's maximum produce rate, measured directly.

    python -m bench.metrics_cost [--records 400000] [--producers 2]

A whole-broker A/B (python -m bench with KBROKER_BENCH_METRICS=1 and without) cannot
resolve a few percent on a shared machine: broker CPU per GB varies by 2x between runs.
So this measures the parts instead:

1. a broker with metrics on takes omb.max's load (1 KiB records, 16 partitions, producers
   at full speed, acks=1, linger.ms=5, batch.size=1000000, as bench/loadgen.py), scraped
   every second; its /metrics then gives the requests, appends and fetches it handled and
   the CPU seconds it used (process_cpu_seconds_total);
2. the hot-path hooks (a request's timing and its 6 histogram observations, a per-topic
   append count, the server's write timestamps) and a scrape of that broker are timed in a
   loop, in CPU seconds;
3. the cost = hooks per event x events + scrape CPU x scrapes, as a share of the broker's CPU.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.systems import free_port

LOAD = """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": 1, "linger.ms": 5,
              "batch.size": 1000000, "queue.buffering.max.kbytes": 262144})
value = b"x" * 1024
n = int(sys.argv[3])
for i in range(n):
    while True:
        try:
            p.produce(sys.argv[2], value, partition=i % 16)
            break
        except BufferError:
            p.poll(0.005)
    if i % 1000 == 0:
        p.poll(0)
p.flush(120)
"""


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _cpu_per_call(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    start = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - start) / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--producers", type=int, default=2)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="kbroker-metrics-cost-"))
    port, mport = free_port(), free_port()
    broker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kbroker.cli",
            "serve",
            "--data-dir",
            str(data / "d"),
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics",
            f"127.0.0.1:{mport}",
            "--log-level",
            "WARNING",
        ],
    )
    url = f"http://127.0.0.1:{mport}/metrics"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kbroker.cli",
                "topic",
                "create",
                "cost",
                "-p",
                "16",
                "-b",
                f"127.0.0.1:{port}",
            ],
            check=True,
            capture_output=True,
        )
        stop = threading.Event()
        scrapes = [0]

        def scrape() -> None:
            while not stop.wait(1.0):
                urllib.request.urlopen(url, timeout=10).read()
                scrapes[0] += 1

        threading.Thread(target=scrape, daemon=True).start()
        t0 = time.monotonic()
        loads = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    LOAD,
                    f"127.0.0.1:{port}",
                    "cost",
                    str(args.records // args.producers),
                ]
            )
            for _ in range(args.producers)
        ]
        for p in loads:
            p.wait()
        elapsed = time.monotonic() - t0
        stop.set()
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        s = _samples(text)
        cpu = s["process_cpu_seconds_total"]
        requests = sum(
            v for k, v in s.items() if k.startswith("kafka_network_requestmetrics_requests_total")
        )
        produces = s.get('kafka_network_requestmetrics_requests_total{request="Produce"}', 0)
        # Partition appends: each produce request carries up to 16 partitions.
        appends = produces * 16
        # Scrape cost: the broker's CPU for one /metrics (measured from outside: 20 scrapes).
        before = _samples(urllib.request.urlopen(url, timeout=10).read().decode())[
            "process_cpu_seconds_total"
        ]
        for _ in range(20):
            urllib.request.urlopen(url, timeout=10).read()
        after = _samples(urllib.request.urlopen(url, timeout=10).read().decode())[
            "process_cpu_seconds_total"
        ]
        scrape_cpu = (after - before) / 21
    finally:
        broker.terminate()
        broker.wait(30)
        subprocess.run(["rm", "-rf", str(data)])

    # Hot-path hooks, timed here (same Python, same code).
    from kbroker.metrics.core import BrokerMetrics
    from kbroker.metrics.requests import new_timing

    m = BrokerMetrics()

    def request() -> None:
        now = time.monotonic_ns()
        t = new_timing(m, "Produce", 9, 1, now, now)
        assert t is not None
        t.client_id = "c"
        t.peer = "p"
        t.listener = "PLAINTEXT"
        t.principal = "User:ANONYMOUS"
        t.handled()
        t.sent(time.monotonic_ns(), time.monotonic_ns())

    per_request = _cpu_per_call(request, 200_000)
    per_append = _cpu_per_call(lambda: m.appended("cost", 1_000_000, 1000), 500_000)
    hooks = per_request * requests + per_append * appends
    scraping = scrape_cpu * scrapes[0]
    share = (hooks + scraping) / cpu
    print(
        f"load: {args.records} x 1 KiB records, {args.producers} producers, {elapsed:.1f} s "
        f"({args.records / elapsed:,.0f} records/s); {multiprocessing.cpu_count()} CPUs"
    )
    print(
        f"broker CPU {cpu:.2f} s; {requests:.0f} requests ({produces:.0f} Produce), "
        f"{scrapes[0]} scrapes"
    )
    print(
        f"per request {per_request * 1e6:.2f} us, per partition append {per_append * 1e6:.2f} us,"
        f" per scrape {scrape_cpu * 1e3:.1f} ms of broker CPU"
    )
    print(
        f"metrics cost: hooks {hooks:.3f} s + scrapes {scraping:.3f} s = {share:.2%} "
        "of the broker's CPU"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
