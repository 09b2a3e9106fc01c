"""Record bytes of fetch responses on TLS listeners: read from the segment a chunk at a time
and written through the TLS transport as they are read, whole, in order, never past a paused
transport, and a segment that ends early closes the connection.

Segments are real (kbroker's Rust log); one test runs a real uvloop TLS listener and a
Python ssl client, the others drive KafkaConnection through a fake transport to see each
write.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvloop
from bench.certs import CertAuthority

from kbroker._kbroker import Log, LogConfig, LogSlice, build_batch
from kbroker.network.server import (
    SENDFILE_MIN_BYTES,
    TLS_CHUNK_BYTES,
    ConnectionContext,
    Dispatch,
    KafkaConnection,
    Server,
    ServerLimits,
)
from kbroker.protocol import RecordsPlaceholder
from kbroker.security.authenticator import ListenerSecurity
from kbroker.security.listeners import Listener, SecurityProtocol
from tests.helpers import frame
from tests.network.test_connection import FakeTransport, settle

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000_000


def segment(path: Path, batches: int, value_bytes: int) -> LogSlice:
    """A log of ``batches`` batches of ten records, all of it as one slice."""
    log = Log(str(path), LogConfig(), NOW)
    for i in range(batches):
        values = [(None, bytes([i % 251]) * value_bytes, []) for _ in range(10)]
        log.append(build_batch(values, timestamp=NOW), 0, None, NOW)
    sl = log.read(0, 1 << 30)
    assert sl is not None
    return sl


def response(*parts: bytes | LogSlice) -> list[Any]:
    """A response frame of ``parts``, segments standing as placeholders, as Fetch makes."""
    size = sum(len(p) for p in parts)
    return [struct.pack(">i", size)] + [
        p if isinstance(p, bytes) else RecordsPlaceholder(len(p), p) for p in parts
    ]


def expected(parts: list[Any]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.source.read_bytes() for p in parts)


def tls_listener(context: ssl.SSLContext | None = None) -> ListenerSecurity:
    return ListenerSecurity(
        Listener("SSL", "127.0.0.1", 0, SecurityProtocol.SSL),
        ssl_context=context or ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
    )


@contextmanager
def tls_server(dispatch: Dispatch, folder: Path) -> Iterator[ssl.SSLContext]:
    """A real TLS listener (uvloop, on a thread of its own) serving ``dispatch``; yields a
    client context trusting its certificate, with ``.port`` set on it."""
    ca = CertAuthority.make(folder / "ca")
    server_id = ca.issue("broker", "/CN=localhost")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_id.keystore)
    ready = threading.Event()
    stop: asyncio.Event | None = None
    port = 0

    async def serve() -> None:
        nonlocal stop, port
        stop = asyncio.Event()
        server = Server(dispatch, ServerLimits(), security=tls_listener(context))
        _, port = await server.start("127.0.0.1", 0)
        ready.set()
        await stop.wait()
        await server.stop(grace_s=1)

    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        assert ready.wait(10)
        client = ssl.create_default_context(cafile=str(ca.cert))
        client.port = port  # type: ignore[attr-defined]
        yield client
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(20)
        loop.close()


def talk(client: ssl.SSLContext, send: bytes, want: int) -> bytes:
    """Sends ``send`` through a TLS connection to the listener and reads ``want`` bytes."""
    port = client.port  # type: ignore[attr-defined]
    with (
        socket.create_connection(("127.0.0.1", port), timeout=20) as raw,
        client.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(send)
        got = bytearray()
        while len(got) < want:
            chunk = tls.recv(1 << 16)
            assert chunk, "the connection closed early"
            got += chunk
    return bytes(got)


class PausingTransport(FakeTransport):
    """Pauses the protocol's writing once ``high`` bytes are written and not yet drained."""

    def __init__(self, high: int) -> None:
        super().__init__()
        self.high = high
        self.undrained = 0
        self.protocol: KafkaConnection | None = None
        self.writes_while_paused = 0
        self.paused_writing = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.paused_writing:
            self.writes_while_paused += 1
        self.undrained += len(data)
        if self.undrained >= self.high and not self.paused_writing and self.protocol:
            self.paused_writing = True
            self.protocol.pause_writing()

    def drain(self) -> None:
        self.undrained = 0
        if self.paused_writing and self.protocol:
            self.paused_writing = False
            self.protocol.resume_writing()


def test_large_segments_go_through_tls_in_chunks_that_wait_while_paused(tmp_path: Path) -> None:
    big = segment(tmp_path / "a-0", 60, 2000)  # ~1.2 MB: several chunks, not a multiple
    medium = segment(tmp_path / "b-0", 5, 2000)  # above SENDFILE_MIN_BYTES, under a chunk
    small = segment(tmp_path / "c-0", 1, 100)  # copied into the response
    assert len(big) > 4 * TLS_CHUNK_BYTES and len(big) % TLS_CHUNK_BYTES
    assert SENDFILE_MIN_BYTES <= len(medium) < TLS_CHUNK_BYTES and len(small) < SENDFILE_MIN_BYTES
    answer = response(b"head", big, b"between", medium, small, b"tail")

    async def run() -> None:
        conn = KafkaConnection(Server(lambda d, c: answer, ServerLimits(), security=tls_listener()))
        transport = PausingTransport(high=2 * TLS_CHUNK_BYTES)
        transport.protocol = conn
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(frame(b"fetch"))
        for _ in range(100):
            await settle()
            if not conn.busy:
                break
            # Nothing is written while the transport is paused; then it drains.
            assert transport.paused_writing
            written = len(transport.written)
            await settle()
            assert len(transport.written) == written
            transport.drain()
        assert not conn.busy
        assert transport.writes_while_paused == 0
        assert b"".join(transport.written) == expected(answer)
        assert max(len(w) for w in transport.written) <= TLS_CHUNK_BYTES
        assert len(transport.written) > len(big) // TLS_CHUNK_BYTES
        assert not transport.closed

    asyncio.run(run())


def test_a_segment_shorter_than_promised_closes_the_tls_connection(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig(), NOW)
    for _ in range(40):
        log.append(build_batch([(None, b"v" * 2000, [])] * 10, timestamp=NOW), 0, None, NOW)
    sl = log.read(0, 1 << 30)
    assert sl is not None and len(sl) > SENDFILE_MIN_BYTES
    log.truncate_to(5)  # the file is cut under the slice, as a truncation by a new leader would

    async def run() -> FakeTransport:
        conn = KafkaConnection(
            Server(lambda d, c: response(sl), ServerLimits(), security=tls_listener())
        )
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(frame(b"fetch"))
        await settle()
        return transport

    transport = asyncio.run(run())
    assert transport.closed
    assert sum(len(w) for w in transport.written) < len(sl)


def test_fetch_bytes_arrive_whole_and_in_order_through_a_real_tls_listener(
    tmp_path: Path,
) -> None:
    big = segment(tmp_path / "a-0", 150, 2000)  # ~3 MB
    medium = segment(tmp_path / "b-0", 7, 2000)
    answers = {
        b"one": response(b"x" * 30, big, b"y" * 5, medium),
        b"two": response(medium, b"z" * 10, big),
        b"three": response(b"small"),
    }

    def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
        return answers[bytes(data)]

    with tls_server(dispatch, tmp_path) as client:
        # Pipelined: the answers come back in request order.
        want = b"".join(expected(answers[k]) for k in (b"one", b"two", b"three"))
        got = talk(client, frame(b"one") + frame(b"two") + frame(b"three"), len(want))
    assert got == want
