"""KafkaConnection driven through a fake transport: framing, ordering, flow control."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kbroker.network.server import ConnectionContext, KafkaConnection, Server, ServerLimits


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.paused = False
        self.pauses = 0
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def connect(dispatch: Any, **limits: int) -> tuple[KafkaConnection, FakeTransport]:
    conn = KafkaConnection(Server(dispatch, ServerLimits(**limits)))
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_frames_split_across_reads_are_answered_in_request_order() -> None:
    async def run() -> list[bytes]:
        loop = asyncio.get_running_loop()
        slow: dict[bytes, asyncio.Future[bytes]] = {}

        async def answer_later(body: bytes) -> bytes:
            slow[body] = loop.create_future()
            return frame(b"re:" + await slow[body])

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            body = bytes(data)
            return answer_later(body) if body.startswith(b"slow") else frame(b"re:" + body)

        conn, transport = connect(dispatch)
        stream = b"".join(frame(x) for x in (b"slow-1", b"fast-2", b"slow-3", b"fast-4"))
        for i in range(0, len(stream), 3):  # the bytes arrive in tiny pieces
            conn.data_received(stream[i : i + 3])
        await settle()
        assert transport.written == []  # the first answer is not ready yet
        slow[b"slow-3"].set_result(b"slow-3")  # finish out of order
        await settle()
        assert transport.written == []
        slow[b"slow-1"].set_result(b"slow-1")
        await settle()
        return transport.written

    written = asyncio.run(run())
    expected = b"".join(frame(b"re:" + x) for x in (b"slow-1", b"fast-2", b"slow-3", b"fast-4"))
    assert b"".join(written) == expected


def test_reading_pauses_while_pending_requests_exceed_the_bound() -> None:
    async def run() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[bytes]] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            fut: asyncio.Future[bytes] = loop.create_future()
            futures.append(fut)
            return fut

        conn, transport = connect(dispatch, max_pending_bytes=10_000)
        conn.data_received(frame(b"x" * 6000))
        paused_after_one = transport.paused
        conn.data_received(frame(b"y" * 6000))
        paused_after_two = transport.paused
        for fut in futures:
            fut.set_result(frame(b"ok"))
        await settle()
        return paused_after_one, paused_after_two, transport.paused

    after_one, after_two, after_done = asyncio.run(run())
    assert (after_one, after_two, after_done) == (False, True, False)


def test_oversized_and_negative_frames_close_the_connection() -> None:
    for bad in (struct.pack(">i", 2_000_000), struct.pack(">i", -1)):
        calls: list[bytes] = []
        conn, transport = connect(
            lambda d, c, calls=calls: calls.append(bytes(d)), max_request_bytes=1_000_000
        )
        conn.data_received(bad)
        assert transport.closed and calls == []


def test_no_response_for_acks_zero_keeps_order() -> None:
    async def run() -> list[bytes]:
        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            return None if bytes(data) == b"silent" else frame(bytes(data))

        conn, transport = connect(dispatch)
        conn.data_received(frame(b"a") + frame(b"silent") + frame(b"b"))
        await settle()
        return transport.written

    assert b"".join(asyncio.run(run())) == frame(b"a") + frame(b"b")
