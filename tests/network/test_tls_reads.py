"""Requests on TLS listeners (TlsKafkaConnection): the TLS transport decrypts into the
connection's own buffers, and frames cut from them arrive whole, in order, unchanged by
later reads, within the same bounds as on other listeners.

The first tests play uvloop's part through get_buffer/buffer_updated with reads of every
size; the last runs a real uvloop TLS listener and a Python ssl client.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from kbroker.network.server import (
    ConnectionContext,
    Server,
    ServerLimits,
    TlsKafkaConnection,
)
from tests.helpers import frame
from tests.network.test_connection import FakeTransport, settle
from tests.network.test_tls_writes import talk, tls_listener, tls_server

pytestmark = pytest.mark.timeout(60)


def connect_tls(dispatch: Any, **limits: int) -> tuple[TlsKafkaConnection, FakeTransport]:
    conn = TlsKafkaConnection(Server(dispatch, ServerLimits(**limits), security=tls_listener()))
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def feed(conn: TlsKafkaConnection, data: bytes, hint: int) -> int:
    """What uvloop does with ``data`` decrypted: asks for a buffer, fills as much of it as
    fits, and tells how much. Returns how many bytes went in."""
    buffer = conn.get_buffer(hint)
    n = min(len(buffer), len(data))
    assert n > 0, "the connection offered no room"
    buffer[:n] = data[:n]
    buffer.release()
    conn.buffer_updated(n)
    return n


def test_frames_cut_anywhere_arrive_whole_in_order_and_unchanged_by_later_reads() -> None:
    rng = random.Random(7)
    bodies = [os.urandom(rng.choice([1, 3, 100, 5000, 70_000, 300_000])) for _ in range(40)]
    stream = b"".join(frame(b) for b in bodies)

    async def run() -> tuple[list[memoryview], list[bytes]]:
        held: list[memoryview] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            held.append(data)  # kept, as a handler waiting on replication would
            return frame(struct.pack(">i", len(data)))

        conn, transport = connect_tls(dispatch, max_frames_per_slice=4)
        pos = 0
        while pos < len(stream):
            if transport.paused:
                await settle()
                continue
            # Reads end anywhere: inside a header, a body, or on a boundary.
            pos += feed(conn, stream[pos : pos + rng.choice([1, 2, 5, 999, 16_384, 200_000])], 300)
            await settle()
        for _ in range(50):
            await settle()
        assert not transport.closed and not conn.busy
        return held, transport.written

    held, written = asyncio.run(run())
    assert [bytes(f) for f in held] == bodies
    assert written == [frame(struct.pack(">i", len(b))) for b in bodies]


def test_a_granted_large_frame_is_read_into_one_buffer_of_its_size() -> None:
    body = os.urandom(3_000_000)

    async def run() -> list[int]:
        offered: list[int] = []
        got: list[bytes] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            got.append(bytes(data))
            return frame(b"ok")

        conn, transport = connect_tls(dispatch)
        stream = frame(body)
        pos = feed(conn, stream[:16_384], 16_384)
        while pos < len(stream):
            offered.append(len(conn.get_buffer(16_384)))
            pos += feed(conn, stream[pos : pos + 16_384], 16_384)
        await settle()
        assert got == [body] and transport.written == [frame(b"ok")]
        assert conn._server.pool.used == 0
        return offered

    offered = asyncio.run(run())
    # Once the header is read and the memory granted, the rest of the frame has room at once.
    assert offered[0] >= len(body) + 4 - 16_384


def test_a_frame_over_the_limit_closes_the_connection_before_its_body() -> None:
    async def run() -> tuple[FakeTransport, int]:
        conn, transport = connect_tls(lambda d, c: frame(b"never"), max_request_bytes=1000)
        feed(conn, struct.pack(">i", 1001) + b"x" * 10, 300)
        await settle()
        return transport, conn._server.pool.used

    transport, used = asyncio.run(run())
    assert transport.closed and transport.written == [] and used == 0


def test_a_frame_the_pool_cannot_hold_yet_waits_without_a_buffer_for_its_body() -> None:
    async def run() -> None:
        server = Server(
            lambda d, c: frame(bytes(d)[:1]),
            ServerLimits(max_queued_request_bytes=100_000),
            security=tls_listener(),
        )
        conn = TlsKafkaConnection(server)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        assert server.pool.try_reserve(60_000)  # another connection's request
        stream = frame(b"a" * 50_000)
        pos = feed(conn, stream[:1000], 1000)
        await settle()
        assert transport.paused and transport.written == []
        # Without the grant, no buffer for the whole body is offered.
        assert len(conn.get_buffer(300)) < 50_000
        server.pool.release(60_000)
        await settle()
        assert not transport.paused
        while pos < len(stream):
            pos += feed(conn, stream[pos:], 300)
        await settle()
        assert transport.written == [frame(b"a")] and server.pool.used == 0

    asyncio.run(run())


def test_a_real_tls_listener_gives_requests_from_its_own_buffers(tmp_path: Path) -> None:
    bodies = [b"small", os.urandom(2_500_000), b"x" * 20_000, os.urandom(700_000), b"end"]
    owners: list[type] = []

    def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
        owners.append(type(data.obj))
        return frame(struct.pack(">i", len(data)) + bytes(data[:8]))

    with tls_server(dispatch, tmp_path) as client:
        want = b"".join(frame(struct.pack(">i", len(b)) + b[:8]) for b in bodies)
        got = talk(client, b"".join(frame(b) for b in bodies), len(want))
    assert got == want
    # Decrypted into the connection's bytearrays, not handed over as bytes.
    assert owners == [bytearray] * len(bodies)
