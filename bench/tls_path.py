"""kbroker's TLS path alone: the listener's CPU per GB through uvloop's TLS transport, no disk.

    python -m bench.tls_path [--frame-bytes 60000,360000,1500000] [--gib 1] [--rounds 4]

One process runs kbroker's network server (``kbroker.network.server``) with a TLS listener
on CPU 0; a Python ssl client on CPU 1 talks to it. Two directions:

* ``in``: the client sends 1 GiB (``--gib``) of request frames of each ``--frame-bytes``
  size, the server answers each with 8 bytes: how requests are read. Measured both ways
  uvloop's TLS transport can hand bytes over: ``buffered`` (TlsKafkaConnection: decrypted
  into the connection's buffers, as kbroker does) and ``copied`` (the same connection as an
  asyncio.Protocol: ``data_received`` chunks joined by the transport and appended to the frame
  buffer, as kbroker did before).
* ``out``: the client sends small requests, each answered like a fetch: a few header bytes
  and 16 MiB of a real segment file (kbroker's Rust log, in the page cache), read and
  written through TLS in chunks.

Figures: server CPU seconds (user+system, /proc) per GB of frames, median and all rounds, the
two ``in`` variants alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import ssl
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.certs import CertAuthority

from .systems import proc_usage

CTX = mp.get_context("spawn")
FETCH_BYTES = 16 << 20


def _serve(variant: str, certs: str, data: str, started: Any) -> None:
    os.sched_setaffinity(0, {0})
    import uvloop

    from kbroker._kbroker import Log, LogConfig, build_batch
    from kbroker.network import server as network
    from kbroker.protocol import RecordsPlaceholder
    from kbroker.security.authenticator import ListenerSecurity
    from kbroker.security.listeners import Listener, SecurityProtocol

    connection: type[network.KafkaConnection] = network.TlsKafkaConnection
    if variant == "copied":

        class Copied(network.KafkaConnection, asyncio.Protocol):
            """kbroker's connection with bytes handed over by data_received."""

        connection = Copied
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(f"{certs}/broker-keystore.pem")
    security = ListenerSecurity(
        Listener("SSL", "127.0.0.1", 0, SecurityProtocol.SSL), ssl_context=context
    )
    now = 1_700_000_000_000
    log = Log(data, LogConfig(), now)
    while log.log_end_offset * 1000 < FETCH_BYTES:
        log.append(build_batch([(None, os.urandom(1000), [])] * 100, timestamp=now), 0, None, now)
    segment = log.read(0, FETCH_BYTES)
    assert segment is not None
    header = b"h" * 60
    fetch = [struct.pack(">i", len(header) + len(segment)), header]
    fetch.append(RecordsPlaceholder(len(segment), segment))  # type: ignore[arg-type]
    answer = struct.pack(">i", 4) + b"okay"

    def dispatch(frame: memoryview, ctx: Any) -> Any:
        return fetch if bytes(frame[:5]) == b"fetch" else answer

    async def main() -> None:
        limits = network.ServerLimits(max_request_bytes=256 << 20)
        server = network.Server(dispatch, limits, security=security)
        # As Server.start listens, with the variant's connections.
        listening = await asyncio.get_running_loop().create_server(
            lambda: connection(server), "127.0.0.1", 0, ssl=context
        )
        started.put((int(listening.sockets[0].getsockname()[1]), len(segment)))
        await asyncio.sleep(3600)

    uvloop.run(main())


def _measure(
    variant: str, certs: Path, direction: str, frame_bytes: int, total: int
) -> tuple[float, float]:
    """(server CPU s per GB, MB/s) for one run."""
    started: Any = CTX.Queue()
    with tempfile.TemporaryDirectory(prefix="kbroker-tls-path-") as data:
        proc = CTX.Process(
            target=_serve, args=(variant, str(certs), f"{data}/t-0", started), daemon=True
        )
        proc.start()
        try:
            port, fetched = started.get(timeout=60)
            if direction == "in":
                request = struct.pack(">i", frame_bytes) + os.urandom(frame_bytes)
                n, answer_bytes = max(1, total // frame_bytes), 8
                moved = n * frame_bytes
            else:
                request = struct.pack(">i", 5) + b"fetch"
                n, answer_bytes = max(1, total // fetched), 4 + 60 + fetched
                moved = n * fetched
            cpu, elapsed = asyncio.run(
                _exchange(port, certs, request, n, answer_bytes, proc.pid), debug=False
            )
        finally:
            proc.kill()
            proc.join(10)
    return cpu / (moved / 1e9), moved / elapsed / 1e6


async def _exchange(
    port: int, certs: Path, request: bytes, n: int, answer_bytes: int, pid: int
) -> tuple[float, float]:
    """After one warm-up exchange, sends ``request`` ``n`` times (pipelined) while reading the
    ``n`` answers; returns the server's CPU seconds and the wall seconds they took."""
    client = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client, server_hostname="localhost", limit=1 << 20
    )
    try:
        writer.write(request)
        await reader.readexactly(answer_bytes)
        cpu0, t0 = proc_usage(pid)["cpu_s"], time.perf_counter()

        async def send() -> None:
            for _ in range(n):
                writer.write(request)
                await writer.drain()

        async def receive() -> None:
            left = n * answer_bytes
            while left:
                chunk = await reader.read(min(left, 1 << 20))
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                left -= len(chunk)

        await asyncio.wait_for(asyncio.gather(send(), receive()), 600)
        return proc_usage(pid)["cpu_s"] - cpu0, time.perf_counter() - t0
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.tls_path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--frame-bytes", default="60000,360000,1500000")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        ap.error("needs two CPUs (server on one, client on the other)")
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[1]})
    total = int(args.gib * (1 << 30))
    with tempfile.TemporaryDirectory(prefix="kbroker-tls-path-certs-") as folder:
        ca = CertAuthority.make(Path(folder), "kbroker-bench-ca")
        ca.issue("broker", "/CN=localhost")
        runs: list[tuple[str, str, int]] = [
            ("in", variant, int(size))
            for size in args.frame_bytes.split(",")
            for variant in ("buffered", "copied")
        ] + [("out", "buffered", FETCH_BYTES)]
        results: dict[tuple[str, str, int], list[tuple[float, float]]] = {r: [] for r in runs}
        for i in range(args.rounds):
            for run in runs if i % 2 == 0 else reversed(runs):
                results[run].append(_measure(run[1], Path(folder), run[0], run[2], total))
    print("| direction | frame bytes | connection | server CPU s/GB (median) | rounds | MB/s |")
    print("|---|---:|---|---:|---|---|")
    for (direction, variant, size), figures in results.items():
        cpu = [round(c, 2) for c, _ in figures]
        rate = [round(r) for _, r in figures]
        print(
            f"| {direction} | {size:,} | {variant} | {statistics.median(cpu):.2f} | "
            f"{cpu} | {rate} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
