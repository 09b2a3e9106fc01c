"""Many connections and many partitions on one broker, kbroker beside Apache Kafka.

For each system (a single node at its defaults; Kafka as a KRaft node), alternating over
``--reps``:

* **connections**: the latency probe (bench/loadgen.py: 1,000 records/s of 100 B, acks=1,
  on its own connection and topic) for ``--seconds`` untimed (warm-up), for ``--seconds``
  alone, then ``--connections`` client
  connections opened, each sending one ApiVersions request (what every client sends
  first) and then staying idle, and the probe again beside them. Reported: the probe's
  publish and end-to-end p50/p99 in both phases, the time to open the connections, the
  broker's RSS before and with them, and its CPU during each probe phase.
* **partitions**: one topic of ``--partitions`` partitions created, 5,000 at a time (one
  CreateTopics, then CreatePartitions: Kafka's KRaft controller refuses an operation of
  over 10,000 records), timed until every partition has a leader and is served; the
  broker's RSS then; ``--metadata-requests`` Metadata requests for the topic (p50/p99
  ms); the wire generator (bench/wire.py) producing 1 KiB records for ``--seconds``
  spread over every partition (16 KiB batches, 50 partitions a request): MB/s and the
  broker's CPU per GB; then a clean stop and a start on the same data, timed until it
  listens and until every partition is served again, and the RSS after it.

    python -m bench.scale [--connections 10000] [--partitions 10000] [--seconds 10]
                          [--reps 1] [--systems kbroker,kafka] [--kafka-version 3.9.1]
                          [--only connections,partitions] [--data-dir DIR]
                          [--results bench/results/scale.jsonl]

Each phase prints one JSON line and appends it to the results file.
"""

from __future__ import annotations

import argparse
import resource
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kbroker.protocol import ApiKey, encode_request
from kbroker.protocol.messages.core import ApiVersionsRequest, MetadataRequest
from kbroker.tools.client import BrokerClient, ClientError, split_host_port

from . import loadgen, systems, wire
from .cluster import KAFKA_ZK_VERSION
from .restart import wait_served
from .stats import emit, latency_percentiles

RESULTS = Path(__file__).resolve().parent / "results" / "scale.jsonl"
_I32 = struct.Struct(">i")


def _probe(bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    probe = loadgen.LatencyProbe(bootstrap, topic, 100, "1")
    with probe:
        time.sleep(seconds)
        got = probe.stop()
    return {
        **latency_percentiles("publish", got["publish_ms"], (0.5, 0.99)),
        **latency_percentiles("e2e", got["e2e_ms"], (0.5, 0.99)),
        "probe_records": len(got["publish_ms"]),
    }


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise ConnectionError("the broker closed the connection")
        buf += got
    return bytes(buf)


def open_idle_connections(bootstrap: str, count: int, batch: int = 100) -> list[socket.socket]:
    """``count`` connections, each having sent ApiVersions (v0) and read its answer."""
    host, port = split_host_port(bootstrap)
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, "bench-idle", ApiVersionsRequest())
    socks: list[socket.socket] = []
    try:
        while len(socks) < count:
            fresh = []
            for _ in range(min(batch, count - len(socks))):
                s = socket.create_connection((host, port), timeout=30)
                s.sendall(frame)
                fresh.append(s)
            for s in fresh:
                (size,) = _I32.unpack(_read_exactly(s, 4))
                if not 0 < size < 1 << 20:
                    raise ConnectionError(f"an ApiVersions answer of {size} bytes")
                _read_exactly(s, size)
            socks += fresh
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def connections_phase(b: systems.Broker, args: argparse.Namespace) -> dict[str, Any]:
    topic = f"probe-{uuid.uuid4().hex[:6]}"
    loadgen.create_topic(b.bootstrap, topic, 1)
    _probe(b.bootstrap, topic, args.seconds)  # untimed: the JIT, the page cache, connections
    alone0 = b.usage()
    alone = _probe(b.bootstrap, topic, args.seconds)
    alone1 = b.usage()
    rss_before = alone1.get("rss_mb", 0)
    t0 = time.monotonic()
    socks = open_idle_connections(b.bootstrap, args.connections)
    opened = time.monotonic() - t0
    try:
        time.sleep(1)
        idle0 = b.usage()
        beside = _probe(b.bootstrap, topic, args.seconds)
        idle1 = b.usage()
    finally:
        for s in socks:
            s.close()
    return {
        "phase": "connections",
        "connections": args.connections,
        "open_s": round(opened, 2),
        "rss_before_mb": round(rss_before, 1),
        "rss_with_connections_mb": round(idle1.get("rss_mb", 0), 1),
        "broker_cpu_util_probe_alone": round(
            (alone1.get("cpu_s", 0) - alone0.get("cpu_s", 0)) / args.seconds, 3
        ),
        "broker_cpu_util_with_connections": round(
            (idle1.get("cpu_s", 0) - idle0.get("cpu_s", 0)) / args.seconds, 3
        ),
        **{f"alone_{k}": v for k, v in alone.items()},
        **{f"beside_{k}": v for k, v in beside.items()},
    }


def _metadata_latency(bootstrap: str, topic: str, partitions: int, count: int) -> list[float]:
    with BrokerClient(bootstrap, 60, "bench-scale") as client:
        version = client.version(ApiKey.METADATA)
        req = MetadataRequest(
            topics=[MetadataRequest.Topic(name=topic)], allow_auto_topic_creation=False
        )
        samples = []
        for _ in range(count):
            t0 = time.perf_counter()
            resp = client.request(ApiKey.METADATA, version, req)
            samples.append((time.perf_counter() - t0) * 1000)
            [t] = resp.topics
            if t.error_code or len(t.partitions) != partitions:
                raise ClientError(
                    f"Metadata {topic}: error {t.error_code}, {len(t.partitions)} partitions"
                )
    return samples


# Partitions a request creates or adds at most: Kafka's KRaft controller refuses one operation
# of more than 10,000 records (a topic of 10,000 partitions is 10,001), POLICY_VIOLATION.
PARTITIONS_PER_STEP = 5000


def create_in_steps(bootstrap: str, topic: str, partitions: int) -> None:
    """``topic`` with ``partitions`` partitions: created with up to PARTITIONS_PER_STEP, then
    grown by as many per CreatePartitions, until every partition has a leader and is served."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    first = min(partitions, PARTITIONS_PER_STEP)
    loadgen.create_topic(bootstrap, topic, first, timeout=600)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    have = first
    while have < partitions:
        have = min(partitions, have + PARTITIONS_PER_STEP)
        for future in admin.create_partitions([NewPartitions(topic, have)]).values():
            future.result(600)
    deadline = time.monotonic() + 600
    while True:
        info = wire.describe_topic(bootstrap, topic, 600)
        if len(info.partitions) == partitions:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: {len(info.partitions)} of {partitions} partitions")
        time.sleep(0.5)
    wire.wait_until_served(info, 600)


def partitions_phase(b: systems.Broker, args: argparse.Namespace) -> dict[str, Any]:
    topic = f"scale-{args.partitions}"
    t0 = time.monotonic()
    create_in_steps(b.bootstrap, topic, args.partitions)
    created = time.monotonic() - t0
    rss_created = b.usage().get("rss_mb", 0)
    metadata = _metadata_latency(b.bootstrap, topic, args.partitions, args.metadata_requests)
    options = [
        "--seconds", str(args.seconds), "--record-bytes", "1024", "--records-per-batch", "16",
        "--partitions-per-request", "50", "--connections", "4", "--in-flight", "8",
        "--distinct-batches", "256",
    ]  # fmt: skip
    with wire.WireProcess("produce", b.bootstrap, topic, *options) as p:
        p.started(300)
        before = b.usage()
        produced = p.row(args.seconds + 300)
        after = b.usage()
    if produced["errors"]:
        raise RuntimeError(f"{b.system}: produce errors {produced['error_codes']}")
    info = wire.describe_topic(b.bootstrap, topic, 60)
    ends = wire.end_offsets(info, 60)
    started = b.kill_and_restart(clean=True)
    port = int(b.bootstrap.rsplit(":", 1)[1])
    systems.wait_for_port(port, b.proc, b.system, timeout=600)
    listening = time.monotonic() - started
    wait_served(b.bootstrap, topic, ends, started + 600)
    served = time.monotonic() - started
    gb = produced["records"] * 1024 / 1e9
    return {
        "phase": "partitions",
        "partitions": args.partitions,
        "create_s": round(created, 2),
        "rss_created_mb": round(rss_created, 1),
        **latency_percentiles("metadata", metadata, (0.5, 0.99)),
        "produce_mb_s": produced["mb_s"],
        "produce_generator_cpu_util": produced["client_cpu_util"],
        "produce_broker_cpu_s_per_gb": round((after["cpu_s"] - before["cpu_s"]) / gb, 2)
        if gb
        else None,
        "partitions_written": sum(1 for p, (a, e) in ends.items() if e > a),
        "restart_listening_s": round(listening, 2),
        "restart_served_s": round(served, 2),
        "rss_after_restart_mb": round(b.usage().get("rss_mb", 0), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--metadata-requests", type=int, default=50)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--systems", default="kbroker,kafka")
    ap.add_argument("--kafka-version", default=KAFKA_ZK_VERSION)
    ap.add_argument("--only", default="connections,partitions")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.only.split(",") if p.strip()]
    if not phases or set(phases) - {"connections", "partitions"}:
        ap.error("--only: connections and/or partitions")
    if min(args.connections, args.partitions, args.reps, args.metadata_requests) <= 0:
        ap.error("--connections, --partitions, --reps and --metadata-requests must be positive")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if "connections" in phases and args.connections + 200 > soft:
        want = min(hard, args.connections + 1000)
        if want < args.connections + 200:
            ap.error(f"--connections {args.connections}: the open-files limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if "kafka" in names and not systems.kafka_available(args.kafka_version):
        systems.fetch_kafka(args.kafka_version)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kbroker-scale-", dir=args.data_dir) as tmp:
        root = Path(tmp)
        for rep in range(1, args.reps + 1):
            for system in names if rep % 2 else names[::-1]:
                extra = {"version": args.kafka_version} if system == "kafka" else {}
                for phase in phases:
                    log = root / f"{system}-{phase}.log"
                    try:
                        with systems.launcher(system)(root, {}, None, log, **extra) as b:
                            run = connections_phase if phase == "connections" else partitions_phase
                            row = {
                                "rep": rep,
                                "system": system,
                                "version": b.version,
                                **run(b, args),
                            }
                    except (RuntimeError, OSError, wire.WireError, ClientError) as exc:
                        print(f"bench.scale: {system} {phase}: {exc}", file=sys.stderr)
                        return 1
                    emit(args.results, {**row, "time": time.strftime("%Y-%m-%d %H:%M:%S")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
