"""Resource bounds of the network layer, against a real broker process.

Abusive clients are raw sockets (to send what real clients never would); the
well-behaved client beside them is kbroker's own BrokerClient, timed per request.
The broker's memory is read from /proc/<pid>/status.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kbroker._kbroker import build_batch
from kbroker.config import BrokerConfig, ConfigError
from kbroker.protocol import ApiKey, ErrorCode, encode_request
from kbroker.tools.client import BrokerClient
from tests.helpers import KBROKER, BrokerProcess, fetch_req, metadata, produce_req, wait_for

MIB = 1 << 20


def status_kib(pid: int, field: str) -> int:
    """A memory figure (VmRSS, VmHWM) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def create_topics(client: BrokerClient, *topics: str) -> None:
    """Creates topics through Metadata's auto-creation, and waits for their partitions."""
    wait_for(
        lambda: all(
            t.error_code == ErrorCode.NONE and t.partitions
            for t in metadata(client, list(topics)).topics
        ),
        f"topics {topics} to be created",
        timeout=10,
        interval=0.05,
    )


def timed_produces(client: BrokerClient, topic: str, seconds: float) -> list[float]:
    """Produces one small record at a time for ``seconds``; each request's latency."""
    batch = build_batch([(None, b"well-behaved", [])])
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        resp = client.request(ApiKey.PRODUCE, 9, produce_req(topic, batch, acks=1))
        latencies.append(time.perf_counter() - start)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    return latencies


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Flood:
    """Sockets that send their streams as fast as the broker takes them and
    never read a response, on one background thread, until stopped."""

    def __init__(self, bootstrap: str, streams: list[Callable[[], bytes]]) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.socks: list[socket.socket] = []
        for _ in streams:
            s = socket.create_connection((host, int(port)), timeout=5)
            s.setblocking(False)
            self.socks.append(s)
        self._next = streams
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.socks:
            s.close()
        assert not self._thread.is_alive()

    def _run(self) -> None:
        pending = [memoryview(b"") for _ in self.socks]
        while not self._stop.is_set():
            for i, nxt in enumerate(self._next):
                if not pending[i]:
                    pending[i] = memoryview(nxt())
            busy = [s for s, data in zip(self.socks, pending, strict=True) if data]
            if not busy:
                time.sleep(0.05)
                continue
            _, writable, _ = select.select([], busy, [], 0.05)
            for s in writable:
                i = self.socks.index(s)
                with contextlib.suppress(BlockingIOError):
                    n = s.send(pending[i][: 256 * 1024])
                    pending[i] = pending[i][n:]
                    self.sent += n


def one_frame_short(frame: bytes) -> Callable[[], bytes]:
    """A stream of ``frame`` but for its last byte, which never comes."""
    chunks = iter([frame[:-1]])
    return lambda: next(chunks, b"")


def test_request_memory_stays_within_the_pool_while_others_are_served(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    frame_bytes, pool_bytes, margin = 16 * MIB, 32 * MIB, 24 * MIB
    broker = broker_factory(
        f"socket.request.max.bytes={frame_bytes}", f"queued.max.request.bytes={pool_bytes}"
    )
    assert broker.proc is not None
    pid = broker.proc.pid
    with BrokerClient(broker.bootstrap, timeout=10) as good:
        create_topics(good, "memory-bound")
        timed_produces(good, "memory-bound", 0.5)  # warm up
        baseline_kib = status_kib(pid, "VmRSS")
        # Twenty connections announce 16 MiB requests and send all but the last byte.
        frame = struct.pack(">i", frame_bytes) + bytes(frame_bytes)
        streams = [one_frame_short(frame) for _ in range(20)]
        with Flood(broker.bootstrap, streams) as flood:
            latencies = timed_produces(good, "memory-bound", 6.0)
            offered = flood.sent
        peak_kib = status_kib(pid, "VmHWM")
        timed_produces(good, "memory-bound", 0.5)  # still serving once they are gone
    grown_mib = (peak_kib - baseline_kib) / 1024
    print(
        f"offered {offered / MIB:.0f} MiB, broker grew {grown_mib:.1f} MiB, "
        f"{len(latencies)} produces, max {max(latencies) * 1000:.1f} ms"
    )
    assert offered > pool_bytes + margin  # they sent more than the bound lets the broker hold
    # The pool, plus one socket read (256 KB) per refused connection and slack.
    assert grown_mib < (pool_bytes + margin) / MIB
    assert len(latencies) > 50 and max(latencies) < 2.0


def test_pool_only_as_large_as_one_request_serves_every_connection_in_turn(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Six connections each send a request larger than half the pool at once:
    whole frames are granted one at a time (no partial reservations that could
    leave every connection waiting for the others), so every one is answered."""
    limit = 4 * MIB
    broker = broker_factory(
        f"socket.request.max.bytes={limit}",
        f"queued.max.request.bytes={limit}",
        f"message.max.bytes={limit}",
    )
    with BrokerClient(broker.bootstrap, timeout=10) as admin:
        create_topics(admin, "whole-frames")
    batch = build_batch([(None, b"x" * (3 * MIB), [])])
    answers: list[int] = []
    errors: list[BaseException] = []

    def send_one(corr: int) -> None:
        try:
            with BrokerClient(broker.bootstrap, timeout=20) as c:
                resp = c.request(ApiKey.PRODUCE, 9, produce_req("whole-frames", batch, acks=1))
                answers.append(resp.responses[0].partition_responses[0].error_code)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send_one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert answers == [ErrorCode.NONE] * 6


def test_pool_smaller_than_the_largest_request_is_refused_at_start(tmp_path: Path) -> None:
    args = [*KBROKER, "serve", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"]
    args += [
        "--set",
        "socket.request.max.bytes=2000000",
        "--set",
        "queued.max.request.bytes=1000000",
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "Error: bad setting: queued.max.request.bytes (1000000) must be at least "
        "socket.request.max.bytes (2000000), or -1 for no bound"
    ]


def test_pool_setting_takes_minus_one_for_no_bound_and_nothing_below_a_request() -> None:
    config = BrokerConfig.from_strings([("queued.max.request.bytes", "-1")])
    assert config["queued.max.request.bytes"] == -1
    for bad in ("0", "104857599"):
        with pytest.raises(ConfigError, match=r"must be at least socket\.request\.max\.bytes"):
            BrokerConfig.from_strings([("queued.max.request.bytes", bad)])


def pipelined_abuse(topic_big: str, topic_empty: str) -> Callable[[], bytes]:
    """Large fetches, empty fetches and produces, pipelined: 200 frames a call."""
    batch = build_batch([(None, b"abuse" * 20, [])])
    corr = iter(range(1, 1 << 31))
    large = fetch_req(topic_big, max_bytes=50 * MIB, min_bytes=1)
    empty = fetch_req(topic_empty, max_bytes=MIB, min_bytes=1)

    def chunk() -> bytes:
        frames = []
        for i in range(200):
            if i % 10 == 0:
                frames.append(encode_request(ApiKey.FETCH, 11, next(corr), "abuser", large))
            elif i % 2:
                frames.append(encode_request(ApiKey.FETCH, 11, next(corr), "abuser", empty))
            else:
                req = produce_req(topic_empty + "-sink", batch, acks=1)
                frames.append(encode_request(ApiKey.PRODUCE, 9, next(corr), "abuser", req))
        return b"".join(frames)

    return chunk


def test_a_client_pipelining_without_reading_does_not_stall_others(
    broker: BrokerProcess,
) -> None:
    with BrokerClient(broker.bootstrap, timeout=10) as good:
        create_topics(good, "big", "empty", "empty-sink", "latency")
        value = b"v" * (900 * 1024)
        for _ in range(10):  # ~9 MB for each large fetch to return
            resp = good.request(
                ApiKey.PRODUCE, 9, produce_req("big", build_batch([(None, value, [])]), acks=1)
            )
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        timed_produces(good, "latency", 0.5)  # warm up
        streams = [pipelined_abuse("big", "empty") for _ in range(2)]
        with Flood(broker.bootstrap, streams) as flood:
            time.sleep(1.0)  # let it fill every buffer on the way
            latencies = timed_produces(good, "latency", 5.0)
            offered = flood.sent
        timed_produces(good, "latency", 0.5)
    worst = p99(latencies)
    print(
        f"abuser sent {offered / MIB:.1f} MiB of requests; {len(latencies)} produces beside it, "
        f"p50 {sorted(latencies)[len(latencies) // 2] * 1000:.2f} ms, p99 {worst * 1000:.2f} ms"
    )
    assert len(latencies) > 100
    assert worst < 0.050


def test_a_muted_connection_answers_everything_in_order_once_its_client_reads(
    broker: BrokerProcess,
) -> None:
    """Thousands of pipelined requests (beyond every per-connection bound) sent
    before reading a single answer: all are answered, in order, none dropped."""
    with BrokerClient(broker.bootstrap, timeout=10) as client:
        create_topics(client, "muted", "muted-big")
        value = b"m" * (500 * 1024)
        for _ in range(4):
            resp = client.request(
                ApiKey.PRODUCE,
                9,
                produce_req("muted-big", build_batch([(None, value, [])]), acks=1),
            )
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    requests = 3000
    batch = build_batch([(None, b"pipelined", [])])
    frames = []
    for corr in range(requests):
        if corr % 3 == 0:
            req: Any = fetch_req("muted-big", max_bytes=8 * MIB, min_bytes=1)
            frames.append(encode_request(ApiKey.FETCH, 11, corr, "muted", req))
        elif corr % 3 == 1:
            req = fetch_req("muted", max_bytes=MIB, min_bytes=1)
            frames.append(encode_request(ApiKey.FETCH, 11, corr, "muted", req))
        else:
            req = produce_req("muted", batch, acks=1)
            frames.append(encode_request(ApiKey.PRODUCE, 9, corr, "muted", req))
    stream = b"".join(frames)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        sender = threading.Thread(target=sock.sendall, args=(stream,), daemon=True)
        sender.start()
        time.sleep(1.0)  # the broker mutes the connection; nothing is read yet
        reader = sock.makefile("rb")
        received = 0
        for corr in range(requests):
            (size,) = struct.unpack(">i", reader.read(4))
            body = reader.read(size)
            assert len(body) == size
            assert struct.unpack_from(">i", body)[0] == corr
            received += size
        sender.join(30)
        assert not sender.is_alive()
    print(f"{requests} answers, {received / MIB:.0f} MiB, in order")
