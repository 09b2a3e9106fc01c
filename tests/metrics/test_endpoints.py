"""/metrics, /healthz and /readyz: served off the event loop, so they answer while the loop is
stuck or saturated, and /healthz then says so; readiness and systemd's READY=1; the switch
that bounds per-partition series."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kbroker.metrics.core import AccumulatorCollector, BrokerMetrics, Histogram
from kbroker.metrics.http import LoopWatch, MetricsServer, Readiness
from kbroker.metrics.requests import RequestTiming
from kbroker.tools.cluster import Cluster
from kbroker.tools.configs import Resource, alter
from tests.helpers import create_topic, produce, topic_name, wait_for
from tests.metrics.prom import get, sample, start_metrics_broker

# -- in process: a loop we can block ---------------------------------------------------


@pytest.fixture
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_healthz_says_unhealthy_while_the_loop_is_stuck_and_metrics_still_answer(
    loop_in_thread: asyncio.AbstractEventLoop,
) -> None:
    loop = loop_in_thread
    metrics = BrokerMetrics()
    watch = LoopWatch(metrics, interval_s=0.05)
    loop.call_soon_threadsafe(watch.start)
    readiness = Readiness()
    registry = CollectorRegistry()
    registry.register(AccumulatorCollector(metrics))
    server = MetricsServer(registry, watch, readiness, stall_s=0.5)
    host, port = server.start("127.0.0.1", 0)
    base = f"http://{host}:{port}"
    try:
        wait_for(lambda: get(base + "/healthz")[0] == 200, "healthy", timeout=5)
        assert get(base + "/readyz") == (200, "ready\n")
        release = threading.Event()
        # The loop is stuck (a handler that blocks): the endpoints still answer.
        loop.call_soon_threadsafe(release.wait, 10)
        try:
            status, body = wait_for(
                lambda: (r := get(base + "/healthz", timeout=2))[0] == 503 and r,
                "healthz to say unhealthy",
                timeout=5,
            )
            assert "event loop stalled" in body
            status, body = get(base + "/metrics", timeout=2)
            assert status == 200 and "kbroker_event_loop_lag_seconds_bucket" in body
        finally:
            release.set()
        wait_for(lambda: get(base + "/healthz")[0] == 200, "healthy again", timeout=5)
        # The stall shows in the loop lag histogram: an observation above half a second.
        text = get(base + "/metrics")[1]
        below = sample(text, "kbroker_event_loop_lag_seconds_bucket", le="0.5")
        total = sample(text, "kbroker_event_loop_lag_seconds_bucket", le="+Inf")
        assert below is not None and total is not None and total > below
        # Readiness names the checks that fail.
        readiness.add_check("registered with the cluster", lambda: False)
        assert get(base + "/readyz") == (503, "not ready: registered with the cluster\n")
        assert get(base + "/nothing")[0] == 404
    finally:
        server.stop()
        loop.call_soon_threadsafe(watch.stop)


def test_histogram_buckets_and_request_phases() -> None:
    h = Histogram((0.001, 0.01))
    for ns in (500_000, 1_000_000, 5_000_000, 50_000_000):
        h.observe_ns(ns)
    assert h.buckets() == [("0.001", 2.0), ("0.01", 3.0), ("+Inf", 4.0)]
    assert h.sum_ns == 56_500_000
    metrics = BrokerMetrics()
    stats = metrics.request_stats("Produce")
    t = RequestTiming(stats, "Produce", 9, 1, received_ns=1_000, dispatched_ns=3_000)
    t.local_done = 10_000
    t.completed = 2_010_000  # waited 2 ms (acks=all)
    t.sent(2_020_000, 2_021_000)
    sums = [p.sum_ns for p in stats.phases]
    assert sums == [2_000, 7_000, 2_000_000, 10_000, 1_000]
    assert stats.total.sum_ns == 2_020_000


# -- a broker process ----------------------------------------------------------------


def test_endpoints_answer_while_the_broker_is_saturated(tmp_path: Path) -> None:
    broker, base = start_metrics_broker(tmp_path / "data")
    topic = topic_name("flood")
    loaders: list[subprocess.Popen[bytes]] = []
    try:
        create_topic(broker.bootstrap, topic, partitions=4)
        assert get(base + "/readyz") == (200, "ready\n")
        flood = (
            "import sys, time\n"
            "from confluent_kafka import Producer\n"
            "p = Producer({'bootstrap.servers': sys.argv[1], 'linger.ms': 0, 'acks': 1,"
            " 'queue.buffering.max.messages': 200000})\n"
            "end = time.time() + 120\n"
            "while time.time() < end:\n"
            "    try:\n"
            "        p.produce(sys.argv[2], b'x' * 200)\n"
            "    except BufferError:\n"
            "        p.poll(0.01)\n"
            "    p.poll(0)\n"
        )
        # Small requests (no linger) from more producers than CPUs: the broker's loop is
        # never idle, however fast this machine runs it.
        for _ in range(4):
            loaders.append(
                subprocess.Popen(
                    [sys.executable, "-c", flood, broker.bootstrap, topic],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        def wanting_cpu_s() -> float:
            """Seconds the event loop thread ran or waited, runnable, for a CPU."""
            assert broker.proc is not None
            pid = broker.proc.pid
            run_ns, wait_ns, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
            return (int(run_ns) + int(wait_ns)) / 1e9

        def saturated() -> bool:
            before, t0 = wanting_cpu_s(), time.monotonic()
            time.sleep(1.5)
            return (wanting_cpu_s() - before) / (time.monotonic() - t0) > 0.9

        # Saturated: the event loop thread is never idle (running, or runnable and waiting
        # for one of the CPUs shared with the load).
        wait_for(saturated, "the load to saturate the broker", timeout=60, interval=0)
        for _ in range(10):
            for path in ("/healthz", "/readyz", "/metrics"):
                status, body = get(base + path, timeout=10)
                assert status == 200, (path, body)
        text = get(base + "/metrics")[1]
        produced = sample(text, "kafka_network_requestmetrics_requests_total", request="Produce")
        assert produced is not None and produced > 100
        conns = sample(
            text, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT"
        )
        assert conns is not None and conns >= 3
    finally:
        for p in loaders:
            p.kill()
            p.wait()
        broker.kill()


def test_ready_after_start_and_systemd_hears_ready(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(30)
    old = os.environ.get("NOTIFY_SOCKET")
    os.environ["NOTIFY_SOCKET"] = str(sock_path)
    try:
        broker, base = start_metrics_broker(tmp_path / "data")
    finally:
        if old is None:
            del os.environ["NOTIFY_SOCKET"]
        else:
            os.environ["NOTIFY_SOCKET"] = old
    try:
        message = sock.recv(4096).decode()
        assert message.splitlines()[0] == "READY=1"
        assert get(base + "/readyz") == (200, "ready\n")
        assert broker.stop() == 0
        assert sock.recv(4096).decode() == "STOPPING=1"
    finally:
        broker.kill()
        sock.close()


def test_partition_level_series_can_be_turned_off_at_runtime(tmp_path: Path) -> None:
    broker, base = start_metrics_broker(tmp_path / "data")
    try:
        topic = topic_name("card")
        create_topic(broker.bootstrap, topic, partitions=3)
        produce(broker.bootstrap, topic, [(None, b"v" * 100, None, p) for p in range(3)])
        text = get(base + "/metrics")[1]
        assert sample(text, "kafka_log_log_size", topic=topic, partition="2") is not None
        total = sample(text, "kbroker_log_topic_size_bytes", topic=topic)
        assert total is not None and total > 300
        _set_broker_config(broker.bootstrap, "metrics.partition.level.enable", "false")
        text = get(base + "/metrics")[1]
        assert "kafka_log_log_size{" not in text
        assert "kafka_log_log_logendoffset{" not in text
        assert sample(text, "kbroker_log_topic_size_bytes", topic=topic) == total
    finally:
        broker.kill()


def _set_broker_config(bootstrap: str, name: str, value: str) -> None:
    cluster = Cluster(bootstrap)
    try:
        alter(cluster, Resource(4, "0"), {name: value})
    finally:
        cluster.close()
