"""The one load generator every system gets, built on librdkafka.

* Producers: confluent-kafka (librdkafka 2.16) in separate processes, one
  per producer, reporting only failed deliveries (no Python callback per
  record). They connect first and start together; an optional rate is
  paced per millisecond.
* Consumers: kcat (C, librdkafka), printing one byte per record into a
  pipe that the harness counts; `-e` ends it at the end of every partition.
  Python's per-message objects cap a confluent-kafka consumer at ~0.4 GB/s
  of 1 KiB records on one core, below what either broker serves.
* Transactional producers (`produce_transactions`): confluent-kafka again,
  one process and transactional id each, committing transactions of n
  records one after another and timing each ``commit_transaction()``.
* Latency probe: one process with a linger-0 producer and a consumer on a
  topic of its own, sending timestamped records at a fixed rate while the
  load runs (linger 1 ms): publish latency (send to acknowledgement) and end-to-end
  latency (send to receipt by the consumer).

Every function takes the client's extra librdkafka settings (``client``: the
security protocol, CA and SASL user of a secured listener, bench/security.py);
kcat reads them from a private file, so no password is on a command line.

Every process here runs on the client CPUs (inherited from the harness,
which pins itself there), producers at nice 5 below the probe; client CPU seconds are
returned with each result so a report can show whether the client was the bottleneck.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One configuration for every system (librdkafka names).
PRODUCER_CONF: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "queue.buffering.max.messages": 1_000_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "delivery.report.only.error": True,
}
KCAT_CONF = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "10485760",
    "queued.max.messages.kbytes": "262144",
    "queued.min.messages": "1000000",
}
CTX = mp.get_context("spawn")


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
    timeout: float = 30,
    client: dict[str, str] | None = None,
) -> None:
    """Creates ``topic`` and waits until every partition has a leader (and, when replicated, all
    its replicas in the ISR), as the brokers' Metadata reports it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    new = NewTopic(topic, partitions, replication_factor, config=config or {})
    admin.create_topics([new])[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
            and (
                replication_factor == 1
                or all(len(p.isrs) == replication_factor for p in md.partitions.values())
            )
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders (or not a full ISR) after {timeout:.0f} s")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _producer_proc(
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    acks: str,
    rate: float,
    client: dict[str, str],
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    from confluent_kafka import Producer

    # Below the latency probe, which shares the client CPUs: its samples then show the broker's
    # latency rather than the load processes' CPU queue.
    os.nice(5)
    errors = 0

    def on_error(err: Any, msg: Any) -> None:
        nonlocal errors
        errors += 1

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            **PRODUCER_CONF,
            **client,
            "on_delivery": on_error,
        }
    )
    p.list_topics(topic, timeout=30)
    payload = os.urandom(size)
    produce, poll = p.produce, p.poll
    ready.release()
    go.wait()
    cpu0 = _cpu_seconds()
    start = time.perf_counter()
    sent = 0
    while sent < count:
        # Release records in millisecond steps at a fixed rate, in chunks when unthrottled.
        due = count if rate <= 0 else min(count, int((time.perf_counter() - start) * rate) + 1)
        if due <= sent:
            poll(0.0005)
            continue
        for _ in range(min(due - sent, 1024)):
            while True:
                try:
                    produce(topic, payload)
                    break
                except BufferError:  # the client's queue is full: let it drain
                    poll(0.002)
            sent += 1
        poll(0)
    p.flush(300)
    end = time.perf_counter()
    out.put({"start": start, "end": end, "errors": errors + len(p), "cpu_s": _cpu_seconds() - cpu0})


@dataclass
class ProduceResult:
    records: int
    elapsed: float
    errors: int
    client_cpu_s: float


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    acks: str,
    producers: int,
    rate: float = 0,
    on_start: Callable[[], None] | None = None,
    client: dict[str, str] | None = None,
) -> ProduceResult:
    """``records`` in all from ``producers`` processes, at ``rate`` records/s in all (0: max).
    ``on_start`` runs once they are connected, as they are told to start (e.g. to read the
    brokers' CPU time without the processes' start-up)."""
    per = records // producers
    ready = CTX.Semaphore(0)
    go = CTX.Event()
    out: Any = CTX.Queue()
    procs = [
        CTX.Process(
            target=_producer_proc,
            daemon=True,
            args=(
                bootstrap,
                topic,
                per,
                size,
                acks,
                rate / producers,
                client or {},
                ready,
                go,
                out,
            ),
        )
        for _ in range(producers)
    ]
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            _await_ready(ready, procs, "a producer")
        if on_start is not None:
            on_start()
        go.set()
        results = [out.get(timeout=900) for _ in procs]
    finally:
        _reap(procs)
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return ProduceResult(
        per * producers,
        elapsed,
        sum(r["errors"] for r in results),
        sum(r["cpu_s"] for r in results),
    )


# -- transactional producers ---------------------------------------------------


def _transactional_proc(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    per_transaction: int,
    size: int,
    max_seconds: float,
    transactional_id: str,
    client: dict[str, str],
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    from confluent_kafka import KafkaException, Producer

    os.nice(5)
    errors = 0

    def on_error(err: Any, msg: Any) -> None:
        nonlocal errors
        errors += 1

    conf = {k: v for k, v in PRODUCER_CONF.items() if k != "enable.idempotence"}
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            **conf,
            **client,
            "acks": "all",  # a transactional producer is idempotent: acks=all
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60_000,
            "on_delivery": on_error,
        }
    )
    p.list_topics(topic, timeout=30)
    p.init_transactions(60)
    payload = os.urandom(size)
    produce, poll = p.produce, p.poll
    commit_ms: list[float] = []
    failed = 0
    ready.release()
    go.wait()
    cpu0 = _cpu_seconds()
    start = time.perf_counter()
    deadline = start + max_seconds if max_seconds > 0 else float("inf")
    committed = 0
    # Record i of the producer goes to partition i % partitions: a transaction of n records
    # spans min(n, partitions) partitions, and consecutive one-record transactions rotate.
    i = 0
    while committed < count and time.perf_counter() < deadline:
        p.begin_transaction()
        for _ in range(per_transaction):
            while True:
                try:
                    produce(topic, payload, partition=i % partitions)
                    break
                except BufferError:  # the client's queue is full: let it drain
                    poll(0.002)
            i += 1
        poll(0)
        t0 = time.perf_counter()
        try:
            p.commit_transaction(120)
        except KafkaException as exc:
            failed += 1
            if exc.args[0].txn_requires_abort():
                p.abort_transaction(120)
                continue
            raise
        commit_ms.append((time.perf_counter() - t0) * 1000)
        committed += per_transaction
    end = time.perf_counter()
    cpu = _cpu_seconds() - cpu0
    out.put(
        {
            "start": start,
            "end": end,
            "records": committed,
            "transactions": len(commit_ms),
            "failed_transactions": failed,
            "errors": errors,
            "commit_ms": commit_ms,
            "cpu_s": cpu,
        }
    )


@dataclass
class TransactionsResult:
    records: int  # committed
    transactions: int  # committed
    failed_transactions: int  # aborted after an error the client could abort on
    elapsed: float
    errors: int  # failed deliveries
    client_cpu_s: float
    commit_ms: list[float]  # each commit_transaction() call, every producer


def produce_transactions(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    per_transaction: int,
    size: int,
    producers: int,
    max_seconds: float = 0,
    on_start: Callable[[], None] | None = None,
    client: dict[str, str] | None = None,
) -> TransactionsResult:
    """Transactions of ``per_transaction`` records of ``size`` bytes from ``producers``
    processes (confluent-kafka, a transactional id each, acks=all), up to ``records`` in all;
    a producer begins no transaction after ``max_seconds`` (0: no limit), so a slow system
    commits fewer. Each times its ``commit_transaction()`` calls. ``on_start`` as in
    `produce`."""
    per = max(1, records // producers // per_transaction) * per_transaction
    ready = CTX.Semaphore(0)
    go = CTX.Event()
    out: Any = CTX.Queue()
    run = uuid.uuid4().hex[:8]
    procs = [
        CTX.Process(
            target=_transactional_proc,
            daemon=True,
            args=(
                bootstrap,
                topic,
                partitions,
                per,
                per_transaction,
                size,
                max_seconds,
                f"bench-{run}-{n}",
                client or {},
                ready,
                go,
                out,
            ),
        )
        for n in range(producers)
    ]
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            _await_ready(ready, procs, "a transactional producer", timeout=120)
        if on_start is not None:
            on_start()
        go.set()
        results = [_get_result(out, procs, max_seconds + 300) for _ in procs]
    finally:
        _reap(procs)
    return TransactionsResult(
        records=sum(r["records"] for r in results),
        transactions=sum(r["transactions"] for r in results),
        failed_transactions=sum(r["failed_transactions"] for r in results),
        elapsed=max(r["end"] for r in results) - min(r["start"] for r in results),
        errors=sum(r["errors"] for r in results),
        client_cpu_s=sum(r["cpu_s"] for r in results),
        commit_ms=[ms for r in results for ms in r["commit_ms"]],
    )


def _get_result(out: Any, procs: list[Any], timeout: float) -> dict[str, Any]:
    """The next result a process puts on ``out``; an error as soon as one has failed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result: dict[str, Any] = out.get(timeout=0.5)
            return result
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError(
                    f"a load process failed (exit codes {[p.exitcode for p in procs]})"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"no result within {timeout:.0f} s") from None


def _await_ready(ready: Any, procs: list[Any], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready.acquire(timeout=0.2):
        if any(p.exitcode not in (None, 0) for p in procs):
            raise RuntimeError(f"{what} failed (exit codes {[p.exitcode for p in procs]})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} was not ready within {timeout:.0f} s")


def _reap(procs: list[Any]) -> None:
    for proc in procs:
        if proc.pid is None:  # never started (an earlier one failed to)
            continue
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


@dataclass
class ConsumeResult:
    records: int
    elapsed: float
    client_cpu_s: float
    per_consumer: list[int] = field(default_factory=list)


def _kcat_cmd(
    bootstrap: str, topic: str, count: int | None, config: Path | None = None
) -> list[str]:
    cmd = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-q", "-f", "."]
    cmd += ["-c", str(count)] if count else ["-e"]
    if config is not None:
        cmd += ["-F", str(config)]
    for key, value in KCAT_CONF.items():
        cmd += ["-X", f"{key}={value}"]
    return cmd


class KcatConsumers:
    """``n`` kcat consumers, each reading all of ``topic`` from the beginning."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        n: int,
        count: int | None = None,
        client: dict[str, str] | None = None,
    ) -> None:
        # The client's settings go to kcat in a file only this user can read.
        self.config_dir: tempfile.TemporaryDirectory[str] | None = None
        config = None
        if client:
            self.config_dir = tempfile.TemporaryDirectory(prefix="kbroker-bench-kcat-")
            config = Path(self.config_dir.name) / "client.conf"
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in client.items())
        self.cmds = [_kcat_cmd(bootstrap, topic, count, config) for _ in range(n)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.counts = [0] * n
        self.readers: list[threading.Thread] = []
        self.cpu = 0.0
        self.start = 0.0

    def _drain(self, i: int, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 1 << 16):
            self.counts[i] += len(chunk)

    def __enter__(self) -> KcatConsumers:
        self.start = time.perf_counter()
        for i, cmd in enumerate(self.cmds):
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            self.procs.append(proc)
            t = threading.Thread(target=self._drain, args=(i, proc), daemon=True)
            t.start()
            self.readers.append(t)
        return self

    def wait(self, timeout: float) -> ConsumeResult:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            while True:
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    self.cpu += rusage.ru_utime + rusage.ru_stime
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"kcat did not finish within {timeout:.0f} s "
                        f"(read {sum(self.counts)} records)"
                    )
                time.sleep(0.005)
        elapsed = time.perf_counter() - self.start
        for t in self.readers:
            t.join(10)
        bad = [p.returncode for p in self.procs if p.returncode]
        if bad:
            raise RuntimeError(f"kcat exited with {bad}")
        return ConsumeResult(sum(self.counts), elapsed, self.cpu, list(self.counts))

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.returncode is None and proc.poll() is None:
                proc.kill()
                proc.wait(5)
        if self.config_dir is not None:
            self.config_dir.cleanup()


def consume(
    bootstrap: str,
    topic: str,
    consumers: int,
    timeout: float = 900,
    client: dict[str, str] | None = None,
) -> ConsumeResult:
    """Catch-up: each consumer reads the whole topic from offset 0 to its end."""
    with KcatConsumers(bootstrap, topic, consumers, client=client) as group:
        return group.wait(timeout)


# -- latency probe ---------------------------------------------------------

_STAMP = struct.Struct(">q")


def _probe_proc(
    bootstrap: str, topic: str, size: int, acks: str, rate: float, ready: Any, stop: Any, out: Any
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    # linger.ms=1 as OMB's Kafka driver: with linger 0 librdkafka sends one request per record, and
    # Kafka, which serves one request per connection at a time, then queues them (~0.2 s at 1000/s).
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 1, "enable.idempotence": False}
    )
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-probe",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 1,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    p.list_topics(topic, timeout=30)
    publish: list[float] = []
    e2e: list[float] = []
    done = threading.Event()

    def receive() -> None:
        while not done.is_set():
            # poll, not consume(n): a batch call waits for n records or its timeout.
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                e2e.append((time.perf_counter_ns() - _STAMP.unpack_from(m.value() or b"")[0]) / 1e6)

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            publish.append(
                (time.perf_counter_ns() - _STAMP.unpack_from(msg.value() or b"")[0]) / 1e6
            )

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    padding = os.urandom(max(0, size - _STAMP.size))
    # Warm up until a record has gone all the way round (connections, metadata, first fetch).
    deadline = time.monotonic() + 30
    while not e2e and time.monotonic() < deadline:
        p.produce(topic, _STAMP.pack(time.perf_counter_ns()) + padding, on_delivery=acked)
        p.poll(0.05)
    p.flush(10)
    time.sleep(0.2)
    publish.clear()
    e2e.clear()
    ready.release()
    interval = 1 / rate
    next_at = time.perf_counter()
    while not stop.is_set():
        p.produce(topic, _STAMP.pack(time.perf_counter_ns()) + padding, on_delivery=acked)
        next_at += interval
        p.poll(max(0.0, next_at - time.perf_counter()))
    p.flush(30)
    time.sleep(0.5)  # let the consumer see the last records
    done.set()
    reader.join(5)
    c.close()
    out.put({"publish_ms": publish, "e2e_ms": e2e})


class LatencyProbe:
    """Runs the probe process from ``__enter__`` until ``stop()``; ``result`` holds the samples."""

    def __init__(
        self, bootstrap: str, topic: str, size: int, acks: str, rate: float = 1000
    ) -> None:
        self.ready = CTX.Semaphore(0)
        self.stop_event = CTX.Event()
        self.out: Any = CTX.Queue()
        self.proc = CTX.Process(
            target=_probe_proc,
            daemon=True,
            args=(bootstrap, topic, size, acks, rate, self.ready, self.stop_event, self.out),
        )
        self.result: dict[str, list[float]] = {"publish_ms": [], "e2e_ms": []}

    def __enter__(self) -> LatencyProbe:
        self.proc.start()
        _await_ready(self.ready, [self.proc], "the latency probe")
        return self

    def stop(self) -> dict[str, list[float]]:
        self.stop_event.set()
        self.result = self.out.get(timeout=60)
        return self.result

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        _reap([self.proc])
