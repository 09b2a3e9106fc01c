"""A wire-level load generator: Produce and Fetch on the Kafka protocol, no client library.

librdkafka's producer and consumer saturate their core before either broker does
in most of the benchmark's rows, so those rows compare clients. This generator
costs far less per byte, so that a row measures the broker:

* **produce**: record batches are built once (``kbroker._kbroker.build_batch``,
  random payloads, unique per record of the set), ``--distinct-batches`` of them,
  and encoded once into Produce request bodies, each carrying one batch for each
  of a group of ``--partitions-per-request`` partitions; the groups and batches
  are cycled. Per send only the 12 bytes of size, API key, version and
  correlation id are packed; ``sendmsg`` writes them and the pre-encoded body
  without joining them. ``--connections`` threads, one blocking socket each,
  keep up to ``--in-flight`` requests pipelined (answers come back in order per
  connection). Every answer is decoded and every partition's error code checked:
  errors are counted by name, a non-retriable one stops the run, and the records
  of the partitions without error are counted as acknowledged. An optional
  ``--rate`` paces the requests (records/s in all); each request's time to its
  answer is kept for publish-latency percentiles.
* **consume**: catch-up reading from the log start to the end offsets
  ListOffsets reports when it starts. One Fetch in flight per connection (the
  partitions dealt round-robin to the connections), ``--max-bytes`` and
  ``--partition-max-bytes`` large, the answer received with ``recv_into`` into
  one buffer the connection reuses. Records are never decoded: the batch headers
  are walked (base offset, length, last offset delta, record count) to count
  records and bytes and to set the next fetch offset. With ``--follow-seconds S``
  it follows a topic being written instead: from the end offsets it finds when it
  starts, for S seconds (or with ``--follow-stdin`` until a line on standard input),
  then to the end offsets it finds then.

Both report their own CPU time over the timed part (``getrusage`` of the process, user
and system, and each connection thread's ``time.thread_time``) as a fraction of one
core, next to records/s and MB/s (MB = 10^6 bytes; produce counts record value bytes,
consume the bytes of the batches read). On a cluster it finds each partition's leader in
the bootstrap broker's Metadata and talks to each leader on connections of its own
(``--connections`` per leader); the leaders must not change during a run (an answer
NOT_LEADER_OR_FOLLOWER is counted as an error).

    python -m bench.wire produce --bootstrap 127.0.0.1:9092 --topic t --seconds 10
    python -m bench.wire consume --bootstrap 127.0.0.1:9092 --topic t
    python -m bench.wire consume --bootstrap 127.0.0.1:9092 --topic t --follow-seconds 11

Each prints one JSON line; the exit code is 1 when any answer carried an error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode, decode_response, encode_request
from kbroker.protocol.messages.core import (
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from kbroker.tools.client import BrokerClient, ClientError, split_host_port

from .stats import latency_percentiles

# Size, API key, version and correlation id: the only bytes built per request sent.
_REQUEST_HEAD = struct.Struct(">ihhi")
_I32 = struct.Struct(">i")
# A v2 record batch: base offset, batch length, partition leader epoch, magic, CRC,
# attributes, last offset delta; the record count is at byte 57 of the 61-byte header.
_BATCH_HEAD = struct.Struct(">qiibIhi")
_BATCH_HEADER_BYTES = 61
_RECORDS_COUNT_AT = 57
_CONTROL_BATCH = 0x20
MAX_FRAME_BYTES = 256 << 20
CLIENT_ID = "kbroker-wire"
UNKNOWN_TOPIC_WAIT_S = 5.0


class WireError(Exception):
    """The broker could not be reached, or answered out of step with the protocol."""


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def fatal(code: int) -> bool:
    """A produce or fetch error the same request would meet again (not worth going on)."""
    try:
        return not ErrorCode(code).retriable
    except ValueError:
        return True


class Connection:
    """A blocking socket with a reused receive buffer that cuts size-prefixed frames."""

    def __init__(self, address: str, timeout: float, buffer_bytes: int = 1 << 20) -> None:
        host, port = split_host_port(address)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise WireError(f"cannot connect to {address}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(buffer_bytes)
        self.start = 0
        self.end = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, head: bytes, body: bytes) -> None:
        sent = self.sock.sendmsg([head, body])
        total = len(head) + len(body)
        if sent < total:  # a full socket buffer: the rest as it drains
            rest = memoryview(head + body if sent < len(head) else body)
            self.sock.sendall(rest[sent if sent < len(head) else sent - len(head) :])

    def read_frame(self) -> memoryview:
        """The next frame's bytes (size prefix stripped), a view valid until the next read."""
        self._fill(4)
        (size,) = _I32.unpack_from(self.buf, self.start)
        if not 0 <= size <= MAX_FRAME_BYTES:
            raise WireError(f"a frame of {size} bytes")
        self._fill(4 + size)
        at = self.start + 4
        self.start = at + size
        return memoryview(self.buf)[at : at + size]

    def _fill(self, n: int) -> None:
        have = self.end - self.start
        if have >= n:
            return
        if n > len(self.buf):  # a larger frame than any before: a larger buffer, kept
            bigger = bytearray(max(n, 2 * len(self.buf)))
            bigger[:have] = self.buf[self.start : self.end]
            self.buf, self.start, self.end = bigger, 0, have
        elif self.start + n > len(self.buf):  # move the partial frame to the front
            self.buf[:have] = self.buf[self.start : self.end]
            self.start, self.end = 0, have
        view = memoryview(self.buf)
        while self.end - self.start < n:
            got = self.sock.recv_into(view[self.end :])
            if got == 0:
                raise WireError("the broker closed the connection")
            self.end += got


@dataclass
class TopicInfo:
    name: str
    topic_id: Any
    partitions: list[int]
    versions: dict[ApiKey, int]
    # partition -> HOST:PORT of its leader (every one the bootstrap broker on a single node)
    leaders: dict[int, str] = field(default_factory=dict)

    def by_leader(self) -> dict[str, list[int]]:
        """Leader address -> its partitions (sorted), the leaders in address order."""
        out: dict[str, list[int]] = {}
        for p in self.partitions:
            out.setdefault(self.leaders[p], []).append(p)
        return dict(sorted(out.items()))

    def only(self, partitions: list[int]) -> TopicInfo:
        """The same topic restricted to ``partitions`` (one leader's, say)."""
        return TopicInfo(
            self.name,
            self.topic_id,
            partitions,
            self.versions,
            {p: self.leaders[p] for p in partitions},
        )


@contextmanager
def _first_reachable(bootstrap: str, timeout: float) -> Iterator[tuple[str, BrokerClient]]:
    """A client of the first broker of a comma-separated ``bootstrap`` list that answers."""
    failures = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        try:
            client = BrokerClient(address, timeout, CLIENT_ID)
        except ClientError as exc:
            failures.append(str(exc))
            continue
        with client:
            yield address, client
        return
    raise WireError("; ".join(failures) or f"no broker address in {bootstrap!r}")


def describe_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> TopicInfo:
    """The topic's partitions, id and each partition's leader, and the versions of Produce,
    Fetch and ListOffsets the bootstrap broker and this generator both speak (the other
    brokers of a cluster are taken to speak them too)."""
    with _first_reachable(bootstrap, timeout) as (address, client):
        versions = {
            k: client.version(k)
            for k in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA)
        }
        md_version = versions[ApiKey.METADATA]
        topics = [MetadataRequest.Topic(name=topic)]
        started = time.monotonic()
        deadline = started + timeout
        while True:
            md = client.request(
                ApiKey.METADATA,
                md_version,
                MetadataRequest(topics=topics, allow_auto_topic_creation=False),
            )
            [t] = md.topics
            waiting = t.error_code == ErrorCode.LEADER_NOT_AVAILABLE or (
                t.error_code == ErrorCode.NONE and any(p.leader_id < 0 for p in t.partitions)
            )
            # A topic just created elsewhere in a cluster reaches this broker's metadata a
            # moment later: unknown is waited out briefly, not for the whole timeout.
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                waiting = time.monotonic() < started + min(timeout, UNKNOWN_TOPIC_WAIT_S)
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if t.error_code != ErrorCode.NONE:
            raise WireError(f"topic {topic}: {error_name(t.error_code)}")
        addresses = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
        if len(md.brokers) == 1:  # a single node: reached the way the caller reaches it
            addresses = dict.fromkeys(addresses, address)
        missing = sorted({p.leader_id for p in t.partitions} - set(addresses))
        if missing:
            raise WireError(f"topic {topic}: leaders {missing} are not among the brokers")
        return TopicInfo(
            topic,
            getattr(t, "topic_id", None),
            sorted(p.partition_index for p in t.partitions),
            versions,
            {p.partition_index: addresses[p.leader_id] for p in t.partitions},
        )


def wait_until_served(info: TopicInfo, timeout: float = 30.0) -> None:
    """Waits until a Fetch of every partition gets no error: a just-created topic's
    partitions can be in the metadata before the broker serves them (Kafka answers
    NOT_LEADER_OR_FOLLOWER for a moment), which would count as errors of the run."""
    version = info.versions[ApiKey.FETCH]
    deadline = time.monotonic() + timeout
    for leader, partitions in info.by_leader().items():
        with BrokerClient(leader, timeout, CLIENT_ID) as client:
            while True:
                req = _fetch_request(info, dict.fromkeys(partitions, 0), 1, 1, max_wait_ms=0)
                resp = client.request(ApiKey.FETCH, version, req)
                codes = {p.error_code for t in resp.responses for p in t.partitions}
                codes.add(resp.error_code if version >= 7 else 0)
                if codes == {0}:
                    break
                if time.monotonic() > deadline:
                    names = sorted(error_name(c) for c in codes if c)
                    raise WireError(
                        f"topic {info.name} is not served after {timeout:.0f} s: {names}"
                    )
                time.sleep(0.1)


# -- produce ---------------------------------------------------------------------


@dataclass
class ProduceTemplate:
    """One pre-encoded Produce request: everything after the correlation id."""

    body: bytes
    size: int  # the frame's size field
    partitions: tuple[int, ...]
    records_per_partition: int


@dataclass
class BatchSet:
    """The distinct batches (and their record values) the requests are made of."""

    batches: list[bytes]
    values: list[list[bytes]]
    records_per_batch: int
    record_bytes: int


def build_batches(count: int, records_per_batch: int, record_bytes: int) -> BatchSet:
    """``count`` v2 batches of random values, each value distinct (16 random bytes lead)."""
    now = int(time.time() * 1000)
    batches, values = [], []
    for _ in range(count):
        vals = [os.urandom(record_bytes) for _ in range(records_per_batch)]
        records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]
        records = [(None, v, []) for v in vals]
        batches.append(build_batch(records, timestamp=now))
        values.append(vals)
    return BatchSet(batches, values, records_per_batch, record_bytes)


def produce_templates(
    info: TopicInfo, batches: BatchSet, acks: int, partitions_per_request: int
) -> list[ProduceTemplate]:
    """Requests covering every partition equally, each batch used in turn: one group of
    partitions per request, enough requests that every distinct batch appears."""
    parts = info.partitions
    per = max(1, min(partitions_per_request, len(parts)))
    groups = [tuple(parts[i : i + per]) for i in range(0, len(parts), per)]
    count = max(len(groups), math.ceil(len(batches.batches) / per))
    count = math.ceil(count / len(groups)) * len(groups)
    version = info.versions[ApiKey.PRODUCE]
    out, used = [], 0
    for i in range(count):
        group = groups[i % len(groups)]
        data = []
        for p in group:
            data.append(
                ProduceRequest.Topic.Partition(
                    index=p, records=batches.batches[used % len(batches.batches)]
                )
            )
            used += 1
        req = ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=30_000,
            topic_data=[ProduceRequest.Topic(name=info.name, partition_data=data)],
        )
        frame = encode_request(ApiKey.PRODUCE, version, 0, CLIENT_ID, req)
        (size,) = _I32.unpack_from(frame, 0)
        out.append(ProduceTemplate(frame[12:], size, group, batches.records_per_batch))
    return out


@dataclass
class ProduceResult:
    records_sent: int = 0
    acked: int = 0
    requests: int = 0
    errors: int = 0
    error_codes: Counter[str] = field(default_factory=Counter)
    acked_by_partition: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    thread_cpu_s: list[float] = field(default_factory=list)
    fatal: str | None = None


def _produce_connection(
    conn: Connection,
    templates: Sequence[ProduceTemplate],
    first: int,
    version: int,
    in_flight: int,
    max_requests: int,
    rate_requests: float,
    stop: threading.Event,
    result: ProduceResult,
    lock: threading.Lock,
    ready: threading.Barrier,
) -> None:
    mine = ProduceResult()
    pack, perf = _REQUEST_HEAD.pack, time.perf_counter
    pending: deque[tuple[int, ProduceTemplate, float]] = deque()
    corr = 0
    n = len(templates)
    ready.wait()
    cpu0 = time.thread_time()
    start = perf()
    try:
        while True:
            going = not stop.is_set() and corr < max_requests
            while going and len(pending) < in_flight:
                if rate_requests > 0 and corr >= (perf() - start) * rate_requests + 1:
                    if not pending:
                        time.sleep(max(0.0, (corr - 1) / rate_requests - (perf() - start)))
                        continue
                    break
                t = templates[(first + corr) % n]
                corr += 1
                conn.send(pack(t.size, ApiKey.PRODUCE, version, corr), t.body)
                pending.append((corr, t, perf()))
                mine.requests += 1
                mine.records_sent += t.records_per_partition * len(t.partitions)
                going = corr < max_requests and not stop.is_set()
            if not pending:
                break
            frame = conn.read_frame()
            got, resp = decode_response(ApiKey.PRODUCE, version, frame)
            want, t, sent_at = pending.popleft()
            mine.latencies_ms.append((perf() - sent_at) * 1000)
            if got != want:
                raise WireError(f"answer to request {got}, expected {want}")
            for topic in resp.responses:
                for p in topic.partition_responses:
                    if p.error_code == 0:
                        mine.acked += t.records_per_partition
                        mine.acked_by_partition[p.index] += t.records_per_partition
                    else:
                        mine.errors += 1
                        mine.error_codes[error_name(p.error_code)] += 1
                        if fatal(p.error_code) and mine.fatal is None:
                            mine.fatal = error_name(p.error_code)
                            stop.set()
    except Exception as exc:  # counted and reported: the run ends, the others stop too
        mine.errors += 1
        mine.error_codes[type(exc).__name__] += 1
        mine.fatal = mine.fatal or f"{type(exc).__name__}: {exc}"
        stop.set()
    finally:
        conn.close()
        mine.thread_cpu_s.append(time.thread_time() - cpu0)
        with lock:
            _merge(result, mine)


def _merge(into: ProduceResult, mine: ProduceResult) -> None:
    into.records_sent += mine.records_sent
    into.acked += mine.acked
    into.requests += mine.requests
    into.errors += mine.errors
    into.error_codes.update(mine.error_codes)
    into.acked_by_partition.update(mine.acked_by_partition)
    into.latencies_ms.extend(mine.latencies_ms)
    into.thread_cpu_s.extend(mine.thread_cpu_s)
    into.fatal = into.fatal or mine.fatal


def produce(
    bootstrap: str,
    topic: str,
    *,
    seconds: float = 10.0,
    max_records: int = 0,
    record_bytes: int = 1024,
    records_per_batch: int = 0,
    distinct_batches: int = 64,
    partitions_per_request: int = 4,
    acks: int = 1,
    connections: int = 2,
    in_flight: int = 8,
    rate: float = 0.0,
    timeout: float = 30.0,
    batches: BatchSet | None = None,
    on_start: Callable[[], object] | None = None,
) -> tuple[dict[str, Any], ProduceResult]:
    """Produces for ``seconds`` (or until ``max_records``, rounded to whole requests, are
    sent); the summary row and the full result (acknowledged records per partition).
    ``on_start`` is called as the clock starts."""
    if acks not in (1, -1):
        raise WireError("acks must be 1 or -1 (all): acks=0 has no answers to count")
    if records_per_batch <= 0:  # about 64 KiB batches
        records_per_batch = max(1, 65536 // max(1, record_bytes))
    info = describe_topic(bootstrap, topic, timeout)
    wait_until_served(info, timeout)
    if batches is None:
        batches = build_batches(distinct_batches, records_per_batch, record_bytes)
    # Each leader's partitions in requests of their own, sent on ``connections`` connections
    # to that leader.
    plan = [
        (leader, produce_templates(info.only(parts), batches, acks, partitions_per_request))
        for leader, parts in info.by_leader().items()
    ]
    every = [t for _, ts in plan for t in ts]
    # Records a request carries, on average over the cycle (the last group of partitions may
    # be smaller than the others).
    per_request = sum(t.records_per_partition * len(t.partitions) for t in every) / len(every)
    n = connections * len(plan)
    max_requests = math.ceil(max_records / per_request) if max_records > 0 else 1 << 62
    rate_requests = rate / per_request / n if rate > 0 else 0.0
    result = ProduceResult()
    stop, lock = threading.Event(), threading.Lock()
    ready = threading.Barrier(n + 1)
    threads = []
    requests_each = [max_requests // n + (1 if i < max_requests % n else 0) for i in range(n)]
    # The threads connect, then wait at the barrier; the clock starts when all are there.
    for i in range(n):
        leader, templates = plan[i // connections]
        th = threading.Thread(
            target=_produce_connection,
            name=f"wire-produce-{i}",
            args=(
                Connection(leader, timeout),
                templates,
                (i % connections) * len(templates) // connections,
                info.versions[ApiKey.PRODUCE],
                in_flight,
                requests_each[i],
                rate_requests,
                stop,
                result,
                lock,
                ready,
            ),
            daemon=True,
        )
        threads.append(th)
        th.start()
    if on_start is not None:
        on_start()
    ready.wait(timeout)
    cpu0, start = _process_cpu(), time.perf_counter()
    timer = threading.Timer(seconds, stop.set)
    timer.daemon = True
    timer.start()
    for th in threads:
        th.join()
    timer.cancel()
    elapsed = time.perf_counter() - start
    cpu1 = _process_cpu()
    row = {
        "mode": "produce",
        "topic": topic,
        "partitions": len(info.partitions),
        "record_bytes": record_bytes,
        "records_per_batch": batches.records_per_batch,
        "partitions_per_request": len(every[0].partitions),
        "distinct_batches": len(batches.batches),
        "acks": acks,
        "brokers": len(plan),
        "connections": n,
        "in_flight": in_flight,
        "rate": rate,
        "produce_version": info.versions[ApiKey.PRODUCE],
        "requests": result.requests,
        "records_sent": result.records_sent,
        "records": result.acked,
        "elapsed_s": round(elapsed, 3),
        "records_s": round(result.acked / elapsed, 1),
        "mb_s": round(result.acked * record_bytes / elapsed / 1e6, 2),
        "errors": result.errors,
        "error_codes": dict(result.error_codes),
        "fatal": result.fatal,
        **latency_percentiles("publish", result.latencies_ms),
        **_cpu_fields(cpu0, cpu1, elapsed, result.thread_cpu_s),
    }
    return row, result


# -- consume ----------------------------------------------------------------------


def end_offsets(info: TopicInfo, timeout: float) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, end offset), from ListOffsets (-2 earliest, -1 latest)
    to each partition's leader. A leader that does not know it leads yet (a topic just
    created: Metadata may name it before it has taken the partition up) is asked again,
    within ``timeout``."""
    version = info.versions[ApiKey.LIST_OFFSETS]
    out: dict[int, list[int]] = {p: [0, 0] for p in info.partitions}
    P = ListOffsetsRequest.Topic.Partition
    deadline = time.monotonic() + timeout
    for leader, partitions in info.by_leader().items():
        with BrokerClient(leader, timeout, CLIENT_ID) as client:
            for slot, ts in ((0, -2), (1, -1)):
                left = list(partitions)
                while left:
                    req = ListOffsetsRequest(
                        replica_id=-1,
                        isolation_level=0,
                        topics=[
                            ListOffsetsRequest.Topic(
                                name=info.name,
                                partitions=[P(partition_index=p, timestamp=ts) for p in left],
                            )
                        ],
                    )
                    resp = client.request(ApiKey.LIST_OFFSETS, version, req)
                    left = []
                    for t in resp.topics:
                        for p in t.partitions:
                            code = p.error_code
                            if code in _NOT_LEADER_YET and time.monotonic() < deadline:
                                left.append(p.partition_index)
                            elif code != ErrorCode.NONE:
                                raise WireError(
                                    f"ListOffsets {info.name}-{p.partition_index}: "
                                    f"{error_name(code)}"
                                )
                            else:
                                out[p.partition_index][slot] = p.offset
                    if left:
                        time.sleep(0.1)
    return {p: (a, b) for p, (a, b) in out.items()}


_NOT_LEADER_YET = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


@dataclass
class ConsumeResult:
    records: int = 0
    batch_bytes: int = 0
    fetches: int = 0
    errors: int = 0
    error_codes: Counter[str] = field(default_factory=Counter)
    records_by_partition: Counter[int] = field(default_factory=Counter)
    thread_cpu_s: list[float] = field(default_factory=list)
    incomplete: int = 0
    fatal: str | None = None


def count_batches(data: memoryview, fetch_offset: int) -> tuple[int, int, int]:
    """(records, bytes, next offset) of the whole v2 batches in a fetched records field,
    reading only their headers; a trailing partial batch (a fetch cut at its limit) is left
    for the next fetch, control batches (transaction markers) hold no records, and batches
    wholly before ``fetch_offset`` are skipped."""
    pos, n, count, nbytes, nxt = 0, len(data), 0, 0, fetch_offset
    head, i32 = _BATCH_HEAD.unpack_from, _I32.unpack_from
    while n - pos >= _BATCH_HEADER_BYTES:
        base, length, _epoch, magic, _crc, attributes, last_delta = head(data, pos)
        end = pos + 12 + length
        if magic != 2:
            raise WireError(f"a batch of magic {magic} at offset {base}")
        if end > n:
            break
        last = base + last_delta
        if last >= nxt:
            if not attributes & _CONTROL_BATCH:
                count += i32(data, pos + _RECORDS_COUNT_AT)[0]
            nbytes += end - pos
            nxt = last + 1
        pos = end
    return count, nbytes, nxt


def _fetch_request(
    info: TopicInfo,
    positions: dict[int, int],
    max_bytes: int,
    partition_max_bytes: int,
    max_wait_ms: int = 500,
) -> FetchRequest:
    version = info.versions[ApiKey.FETCH]
    P = FetchRequest.Topic.Partition
    parts = [
        P(partition=p, fetch_offset=o, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
        for p, o in positions.items()
    ]
    topic = (
        FetchRequest.Topic(topic_id=info.topic_id, partitions=parts)
        if version >= 13
        else FetchRequest.Topic(topic=info.name, partitions=parts)
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[topic],
        forgotten_topics_data=[],
        rack_id="",
    )


@dataclass
class Tail:
    """A consume that follows a topic being written: its partitions have no end until
    ``closed`` is set, after which each ends at its offset in ``ends``."""

    closed: threading.Event = field(default_factory=threading.Event)
    ends: dict[int, int] = field(default_factory=dict)


def _consume_connection(
    conn: Connection,
    info: TopicInfo,
    ranges: dict[int, tuple[int, int]],
    max_bytes: int,
    partition_max_bytes: int,
    deadline: float,
    result: ConsumeResult,
    lock: threading.Lock,
    ready: threading.Barrier,
    tail: Tail | None = None,
) -> None:
    mine = ConsumeResult()
    if tail is None:
        ends: dict[int, int] | None = {p: b for p, (a, b) in ranges.items()}
        positions = {p: a for p, (a, b) in ranges.items() if a < b}
    else:  # open until the tail closes
        ends, positions = None, {p: a for p, (a, b) in ranges.items()}
    version = info.versions[ApiKey.FETCH]
    ready.wait()
    cpu0 = time.thread_time()
    corr = 0
    try:
        while positions and time.perf_counter() < deadline:
            if ends is None and tail is not None and tail.closed.is_set():
                ends = {p: tail.ends[p] for p in positions}
                positions = {p: o for p, o in positions.items() if o < ends[p]}
                if not positions:
                    break
            corr += 1
            req = _fetch_request(
                info, positions, max_bytes, partition_max_bytes, 500 if ends is not None else 100
            )
            conn.sock.sendall(encode_request(ApiKey.FETCH, version, corr, CLIENT_ID, req))
            got, resp = decode_response(ApiKey.FETCH, version, conn.read_frame())
            mine.fetches += 1
            if got != corr:
                raise WireError(f"answer to request {got}, expected {corr}")
            if version >= 7 and resp.error_code != ErrorCode.NONE:
                mine.errors += 1
                mine.error_codes[error_name(resp.error_code)] += 1
                if fatal(resp.error_code):
                    mine.fatal = error_name(resp.error_code)
                    break
                continue
            for t in resp.responses:
                for p in t.partitions:
                    index = p.partition_index
                    if index not in positions:
                        continue
                    if p.error_code != ErrorCode.NONE:
                        mine.errors += 1
                        mine.error_codes[error_name(p.error_code)] += 1
                        if fatal(p.error_code):
                            mine.fatal = error_name(p.error_code)
                            positions.pop(index)
                        continue
                    if p.records is None:
                        continue
                    records, nbytes, nxt = count_batches(p.records, positions[index])
                    mine.records += records
                    mine.records_by_partition[index] += records
                    mine.batch_bytes += nbytes
                    if ends is not None and nxt >= ends[index]:
                        positions.pop(index)
                    else:
                        positions[index] = nxt
            del resp
        mine.incomplete = len(positions)
    except Exception as exc:  # counted and reported: this connection stops
        mine.errors += 1
        mine.error_codes[type(exc).__name__] += 1
        mine.fatal = f"{type(exc).__name__}: {exc}"
        mine.incomplete = len(positions)
    finally:
        conn.close()
        mine.thread_cpu_s.append(time.thread_time() - cpu0)
        with lock:
            result.records += mine.records
            result.batch_bytes += mine.batch_bytes
            result.fetches += mine.fetches
            result.errors += mine.errors
            result.error_codes.update(mine.error_codes)
            result.records_by_partition.update(mine.records_by_partition)
            result.thread_cpu_s.extend(mine.thread_cpu_s)
            result.incomplete += mine.incomplete
            result.fatal = result.fatal or mine.fatal


def consume(
    bootstrap: str,
    topic: str,
    *,
    connections: int = 1,
    max_bytes: int = 50 << 20,
    partition_max_bytes: int = 10 << 20,
    timeout: float = 300.0,
    follow: Callable[[], object] | None = None,
    on_start: Callable[[], object] | None = None,
) -> tuple[dict[str, Any], ConsumeResult]:
    """Reads every partition from its log start to the end offset it had when this began;
    with ``follow`` (a call that returns when following should end), from the end offsets it
    had when this began, following what is written until ``follow`` returns, to the end
    offsets it has then. ``on_start`` is called when the clock starts."""
    info = describe_topic(bootstrap, topic, min(timeout, 30.0))
    ranges = end_offsets(info, min(timeout, 30.0))
    tail = None
    if follow is not None:
        tail = Tail()
        ranges = {p: (b, b) for p, (a, b) in ranges.items()}
    # ``connections`` to each leader (at most one per partition), its partitions dealt to them.
    shares: list[tuple[str, dict[int, tuple[int, int]]]] = []
    for leader, partitions in info.by_leader().items():
        mine: list[dict[int, tuple[int, int]]] = [
            {} for _ in range(max(1, min(connections, len(partitions))))
        ]
        for i, p in enumerate(partitions):
            mine[i % len(mine)][p] = ranges[p]
        shares += [(leader, share) for share in mine]
    result, lock = ConsumeResult(), threading.Lock()
    ready = threading.Barrier(len(shares) + 1)
    deadline = time.perf_counter() + timeout
    conns = [
        Connection(leader, min(timeout, 30.0), buffer_bytes=max_bytes + (1 << 20))
        for leader, _ in shares
    ]
    threads = [
        threading.Thread(
            target=_consume_connection,
            name=f"wire-consume-{i}",
            args=(
                conns[i],
                info,
                share,
                max_bytes,
                partition_max_bytes,
                deadline,
                result,
                lock,
                ready,
                tail,
            ),
            daemon=True,
        )
        for i, (_, share) in enumerate(shares)
    ]
    for th in threads:
        th.start()
    if on_start is not None:
        on_start()
    ready.wait(timeout)
    cpu0, start = _process_cpu(), time.perf_counter()
    followed = 0.0
    if tail is not None and follow is not None:
        follow()
        followed = time.perf_counter() - start
        finals = end_offsets(info, min(timeout, 30.0))
        tail.ends.update({p: b for p, (a, b) in finals.items()})
        tail.closed.set()
        ranges = {p: (ranges[p][0], b) for p, (a, b) in finals.items()}
    expected = sum(b - a for a, b in ranges.values())
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - start
    cpu1 = _process_cpu()
    row = {
        "mode": "consume",
        "topic": topic,
        "partitions": len(info.partitions),
        "brokers": len(info.by_leader()),
        "connections": len(shares),
        "max_bytes": max_bytes,
        "partition_max_bytes": partition_max_bytes,
        "fetch_version": info.versions[ApiKey.FETCH],
        "followed_s": round(followed, 3),
        # After following: until every record written meanwhile was read.
        "drain_s": round(elapsed - followed, 3) if tail is not None else None,
        "fetches": result.fetches,
        "offsets": expected,
        "records": result.records,
        "bytes": result.batch_bytes,
        "complete": result.incomplete == 0 and result.fatal is None,
        "elapsed_s": round(elapsed, 3),
        "records_s": round(result.records / elapsed, 1),
        "mb_s": round(result.batch_bytes / elapsed / 1e6, 2),
        "errors": result.errors,
        "error_codes": dict(result.error_codes),
        "fatal": result.fatal,
        **_cpu_fields(cpu0, cpu1, elapsed, result.thread_cpu_s),
    }
    return row, result


# -- as a child process ------------------------------------------------------------


class WireProcess:
    """``python -m bench.wire MODE ... --announce`` as a child process (a core of its own,
    apart from the harness), started at once: ``started()`` returns when its timed part
    begins (a producer does not wait for anything to begin: start it once what must come
    first, a following consumer's start offsets, is done), ``row()``
    when it has printed its JSON line; ``end_follow()`` ends a ``--follow-stdin`` consume."""

    def __init__(self, mode: str, bootstrap: str, topic: str, *options: str) -> None:
        cmd = [sys.executable, "-m", "bench.wire", mode, "--bootstrap", bootstrap]
        cmd += ["--topic", topic, "--announce", *options]
        self.command = " ".join(cmd[1:])
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )

    def started(self, timeout: float = 120.0) -> None:
        assert self.proc.stderr is not None
        ready = selectors.DefaultSelector()
        ready.register(self.proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        try:
            while time.monotonic() < deadline:
                if not ready.select(max(0.0, deadline - time.monotonic())):
                    continue
                line = self.proc.stderr.readline()
                if line.strip() == "started":
                    return
                if not line:  # it ended before its timed part
                    break
                seen.append(line)
        finally:
            ready.close()
        self.close()
        raise WireError(f"{self.command} did not start: {''.join(seen)[-2000:]}")

    def end_follow(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def row(self, timeout: float = 900.0) -> dict[str, Any]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise WireError(f"{self.command} took over {timeout:.0f} s") from None
        lines = out.splitlines()
        if self.proc.returncode not in (0, 1) or not lines:
            raise WireError(f"{self.command} exited {self.proc.returncode}: {err[-2000:]}")
        row: dict[str, Any] = json.loads(lines[-1])
        return row

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()

    def __enter__(self) -> WireProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- measuring ourselves ------------------------------------------------------------


def _process_cpu() -> tuple[float, float]:
    """User and system CPU seconds of every thread of this process (microseconds, unlike
    os.times' clock ticks)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _cpu_fields(
    before: tuple[float, float], after: tuple[float, float], elapsed: float, threads: list[float]
) -> dict[str, Any]:
    user, system = after[0] - before[0], after[1] - before[1]
    cpu = user + system
    return {
        "client_cpu_s": round(cpu, 3),
        "client_cpu_user_s": round(user, 3),
        "client_cpu_system_s": round(system, 3),
        "client_cpu_util": round(cpu / elapsed, 3) if elapsed > 0 else None,
        "thread_cpu_s": [round(c, 3) for c in threads],
    }


# -- command line -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.wire", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for name in ("produce", "consume"):
        p = sub.add_parser(name)
        p.add_argument(
            "--bootstrap",
            required=True,
            help="HOST:PORT of a broker (the others of a cluster are found from it)",
        )
        p.add_argument("--topic", required=True)
        p.add_argument("--connections", type=int, default=2 if name == "produce" else 1)
    prod = sub.choices["produce"]
    prod.add_argument("--seconds", type=float, default=10.0)
    prod.add_argument("--records", type=int, default=0, help="stop after this many (0: time)")
    prod.add_argument("--record-bytes", type=int, default=1024)
    prod.add_argument("--records-per-batch", type=int, default=0, help="0: ~64 KiB batches")
    prod.add_argument("--distinct-batches", type=int, default=64)
    prod.add_argument("--partitions-per-request", type=int, default=4)
    prod.add_argument("--acks", type=int, choices=(1, -1), default=1)
    prod.add_argument("--in-flight", type=int, default=8)
    prod.add_argument("--rate", type=float, default=0.0, help="records/s in all (0: max)")
    cons = sub.choices["consume"]
    cons.add_argument("--max-bytes", type=int, default=50 << 20)
    cons.add_argument("--partition-max-bytes", type=int, default=10 << 20)
    cons.add_argument("--timeout", type=float, default=300.0)
    follow = cons.add_mutually_exclusive_group()
    follow.add_argument(
        "--follow-seconds",
        type=float,
        default=0.0,
        help="follow the topic from its end for this long (0: catch up from the start)",
    )
    follow.add_argument(
        "--follow-stdin",
        action="store_true",
        help="follow the topic from its end until a line (or end of file) on standard input",
    )
    for name in ("produce", "consume"):
        sub.choices[name].add_argument(
            "--announce",
            action="store_true",
            help="print 'started' on standard error when the timed part starts",
        )
    return ap


def _follow(args: argparse.Namespace) -> Callable[[], object] | None:
    if args.follow_stdin:
        return sys.stdin.readline
    if args.follow_seconds > 0:
        return lambda: time.sleep(args.follow_seconds)
    return None


def _announce() -> None:
    print("started", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    announce = _announce if args.announce else None
    try:
        if args.mode == "produce":
            if min(args.connections, args.in_flight, args.record_bytes) < 1:
                raise WireError("--connections, --in-flight and --record-bytes must be >= 1")
            row, _ = produce(
                args.bootstrap,
                args.topic,
                seconds=args.seconds,
                max_records=args.records,
                record_bytes=args.record_bytes,
                records_per_batch=args.records_per_batch,
                distinct_batches=max(1, args.distinct_batches),
                partitions_per_request=args.partitions_per_request,
                acks=args.acks,
                connections=args.connections,
                in_flight=args.in_flight,
                rate=args.rate,
                on_start=announce,
            )
        else:
            row, _ = consume(
                args.bootstrap,
                args.topic,
                connections=args.connections,
                max_bytes=args.max_bytes,
                partition_max_bytes=args.partition_max_bytes,
                timeout=args.timeout,
                follow=_follow(args),
                on_start=announce,
            )
    except (WireError, ClientError) as exc:
        print(f"bench.wire: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(row), flush=True)
    return 1 if row["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
