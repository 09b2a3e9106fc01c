"""Topic creation at scale, beside a producer that must not notice it.

    python -m bench.topics [--topics 10000] [--systems kbroker,kafka] [--data-dir DIR]

For each system: one broker; a probe producer sends one record every 5 ms
(acks=1) and records each one's delivery latency; then N topics are created
in one CreateTopics request, and N more in N requests (one topic each, sent
together: librdkafka pipelines them). Prints, per phase, the wall time until
every topic is created, the broker's CPU seconds (all threads; user, system,
and its main thread's) and the probe's p50/p99/max latency during it, and
writes them as JSON lines to bench/results/topics.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.systems import kafka_available, launcher

RESULTS = Path(__file__).parent / "results" / "topics.jsonl"


def cpu_times(pid: int) -> dict[str, float]:
    """A process's user and system CPU seconds (all threads), and its main thread's
    (the event loop's, for kbroker); {} once it has gone."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/stat") as f:
            every = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/stat") as f:
            main = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return {}
    return {
        "broker_user_s": int(every[11]) / tick,
        "broker_sys_s": int(every[12]) / tick,
        "main_thread_cpu_s": (int(main[11]) + int(main[12])) / tick,
    }


class Probe(threading.Thread):
    """Produces one record every ``interval`` seconds; keeps (send time, latency) pairs."""

    def __init__(self, bootstrap: str, interval: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "1",
                "linger.ms": 0,
                "socket.nagle.disable": True,
            }
        )
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            sent = time.monotonic()

            def done(err: Any, _msg: Any, sent: float = sent) -> None:
                if err is None:
                    self.samples.append((sent, time.monotonic() - sent))
                else:
                    self.failures += 1

            self.producer.produce("probe", b"x" * 100, on_delivery=done)
            self.producer.poll(0)
            while time.monotonic() - sent < self.interval:
                self.producer.poll(0.001)
        self.producer.flush(30)

    def window(self, start: float, end: float) -> dict[str, float]:
        lat = sorted(ms * 1000 for t, ms in self.samples if start <= t <= end)
        if not lat:
            return {"probe_records": 0}
        return {
            "probe_records": len(lat),
            "probe_p50_ms": round(statistics.median(lat), 2),
            "probe_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
            "probe_max_ms": round(lat[-1], 2),
        }


def _wait(futures: dict[str, Any], timeout: float, errors: list[str]) -> int:
    """Waits for every creation; returns how many failed (the first errors go to ``errors``)."""
    failed = 0
    for f in futures.values():
        try:
            f.result(timeout)
        except Exception as exc:
            failed += 1
            if len(errors) < 3:
                errors.append(str(exc))
    return failed


def run_system(system: str, topics: int, data_root: Path) -> list[dict[str, Any]]:
    rows = []
    with launcher(system)(data_root, {"num.partitions": "1"}, None) as node:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        for f in admin.create_topics([NewTopic("probe", 1, 1)]).values():
            f.result(60)
        probe = Probe(node.bootstrap)
        probe.start()
        time.sleep(2)
        phases = [
            (
                "one request",
                lambda: [
                    admin.create_topics(
                        [NewTopic(f"a{i:05d}", 1, 1) for i in range(topics)], request_timeout=600
                    )
                ],
            ),
            (
                "one request per topic",
                lambda: [
                    admin.create_topics([NewTopic(f"b{i:05d}", 1, 1)], request_timeout=600)
                    for i in range(topics)
                ],
            ),
        ]
        for phase, send in phases:
            cpu_before = node.usage().get("cpu_s", 0.0)
            times_before = cpu_times(node.proc.pid)
            start = time.monotonic()
            batches = send()
            errors: list[str] = []
            failed = sum(_wait(b, 600, errors) for b in batches)
            end = time.monotonic()
            cpu = node.usage().get("cpu_s", 0.0) - cpu_before
            times = {
                k: round(v - times_before.get(k, 0.0), 2)
                for k, v in cpu_times(node.proc.pid).items()
            }
            time.sleep(0.5)
            row = {
                "system": system,
                "version": node.version,
                "phase": phase,
                "topics": topics,
                "failed": failed,
                "seconds": round(end - start, 2),
                "broker_cpu_s": round(cpu, 2),
                **times,
                **probe.window(start, end),
                **({"first_errors": errors} if errors else {}),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        probe.stopping.set()
        probe.join(60)
        rows[-1]["probe_failures"] = probe.failures
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--systems", default="kbroker,kafka")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if "kafka" in systems and not kafka_available():
        print("Apache Kafka is not fetched (bench/kafka/fetch.sh): skipping it")
        systems.remove("kafka")
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        rows = [r for s in systems for r in run_system(s, args.topics, Path(tmp))]
    RESULTS.parent.mkdir(exist_ok=True)
    with open(RESULTS, "a") as out:
        for r in rows:
            out.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **r}) + "\n")
    print(
        f"{'system':8} {'phase':22} {'seconds':>8} {'cpu s':>6} {'sys s':>6} {'main s':>6} "
        f"{'failed':>6} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}"
    )
    for r in rows:
        print(
            f"{r['system']:8} {r['phase']:22} {r['seconds']:8.2f} "
            f"{r.get('broker_cpu_s', 0):6.2f} {r.get('broker_sys_s', 0):6.2f} "
            f"{r.get('main_thread_cpu_s', 0):6.2f} {r['failed']:6d} "
            f"{r.get('probe_p50_ms', 0):7.2f} {r.get('probe_p99_ms', 0):7.2f} "
            f"{r.get('probe_max_ms', 0):7.2f}"
        )


if __name__ == "__main__":
    main()
