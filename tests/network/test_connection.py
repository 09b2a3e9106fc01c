"""KafkaConnection driven through a fake transport: framing, ordering, flow control."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from kbroker.network.server import ConnectionContext, KafkaConnection, Server, ServerLimits
from tests.helpers import frame


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.writes_of_several = 0
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

    def writelines(self, items: Any) -> None:
        self.writes_of_several += 1
        for data in items:
            self.write(data)

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


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


def connect_to(server: Server) -> tuple[KafkaConnection, FakeTransport]:
    conn = KafkaConnection(server)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def test_pool_grants_whole_frames_in_turn_so_it_cannot_deadlock() -> None:
    """Every connection announces a frame bigger than half the pool: one at a time
    is granted (whole), the others stop reading until it is answered, and all finish."""

    async def run() -> tuple[list[bool], int, list[bytes], int]:
        answered: list[bytes] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            answered.append(bytes(data[:2]))
            return frame(b"ok")

        server = Server(
            dispatch, ServerLimits(max_request_bytes=1000, max_queued_request_bytes=1000)
        )
        conns = [connect_to(server) for _ in range(4)]
        bodies = [bytes([65 + i]) * 900 for i in range(4)]
        for (conn, _), body in zip(conns, bodies, strict=True):
            conn.data_received(frame(body)[:300])  # the header and a third of the body
        paused = [t.paused for _, t in conns]
        used = server.pool.used
        # The rest of every body arrives as each connection reads again.
        for _ in range(10):
            for (conn, transport), body in zip(conns, bodies, strict=True):
                if not transport.paused and conn.buffered:
                    conn.data_received(frame(body)[300:])
            await settle()
        return paused, used, answered, server.pool.used

    paused, used, answered, used_after = asyncio.run(run())
    assert paused == [False, True, True, True]
    assert (used, used_after) == (900, 0)
    assert sorted(answered) == [b"AA", b"BB", b"CC", b"DD"]


def test_small_requests_get_memory_while_large_ones_fill_their_share() -> None:
    async def run() -> tuple[bool, bool, int]:
        server = Server(lambda d, c: frame(b"ok"), ServerLimits(max_queued_request_bytes=8 << 20))
        big = [connect_to(server) for _ in range(3)]
        for conn, _ in big:
            conn.data_received(struct.pack(">i", 3 << 20))  # a 3 MiB frame, announced only
        small, small_transport = connect_to(server)
        small.data_received(frame(b"x" * 1000))
        await settle()
        # Two large frames fit in 3/4 of the pool, the third waits; the small one is served.
        return big[1][1].paused, big[2][1].paused, len(small_transport.written)

    second_paused, third_paused, small_answers = asyncio.run(run())
    assert (second_paused, third_paused, small_answers) == (False, True, 1)


def test_a_burst_of_pipelined_frames_is_handled_in_slices() -> None:
    async def run() -> list[int]:
        handled: list[int] = []
        slices: list[int] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            handled.append(1)
            return frame(b"ok")

        conn, transport = connect(dispatch, max_frames_per_slice=16)
        conn.data_received(b"".join(frame(b"r%d" % i) for i in range(100)))
        slices.append(len(handled))
        for _ in range(20):
            await asyncio.sleep(0)
            slices.append(len(handled))
        assert len(transport.written) == 100 and not transport.paused
        return slices

    slices = asyncio.run(run())
    assert slices[0] == 16  # the rest waits for the next turn of the loop
    assert slices[-1] == 100
    assert all(b - a <= 16 for a, b in itertools.pairwise(slices))


def test_reading_pauses_at_the_bound_on_unanswered_requests() -> None:
    async def run() -> tuple[int, bool, int, int, bool]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[bytes]] = []
        most_unanswered = 0

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            nonlocal most_unanswered
            fut: asyncio.Future[bytes] = loop.create_future()
            futures.append(fut)
            most_unanswered = max(most_unanswered, sum(not f.done() for f in futures))
            return fut

        conn, transport = connect(dispatch, max_inflight_requests=5)
        conn.data_received(b"".join(frame(b"r%d" % i) for i in range(12)))
        await settle()
        taken, paused = len(futures), transport.paused
        for _ in range(10):
            for fut in futures:
                if not fut.done():
                    fut.set_result(frame(b"ok"))
            await settle()
        return taken, paused, most_unanswered, len(transport.written), transport.paused

    taken, paused, most, written, paused_after = asyncio.run(run())
    assert (taken, paused) == (5, True)
    assert (most, written, paused_after) == (5, 12, False)


def test_a_large_frame_across_many_reads_is_assembled_whole_and_in_order() -> None:
    async def run() -> tuple[list[bytes], int]:
        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            body = bytes(data)
            return frame(body[:1] + str(len(body)).encode())

        conn, transport = connect(dispatch)
        big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB, not a multiple of the reads
        stream = frame(b"a") + frame(big) + frame(b"c") + frame(b"d")
        for i in range(0, len(stream), 250_000):
            conn.data_received(stream[i : i + 250_000])
            await settle()
        await settle()
        assert not conn.buffered
        return transport.written, conn._server.pool.used

    written, used = asyncio.run(run())
    size = len(bytes(range(256)) * (3 * 4096 + 7))
    assert b"".join(written) == b"".join(
        frame(x) for x in (b"a1", b"\x00" + str(size).encode(), b"c1", b"d1")
    )
    assert used == 0


def test_a_muted_connection_reads_nothing_until_its_time_is_up() -> None:
    """A throttled client (ConnectionContext.mute_for): its answer goes out, its next
    request waits until the mute ends, then it is served as before."""

    async def run() -> None:
        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            if bytes(data) == b"over-quota":
                ctx.mute_for(0.2)
            return frame(b"re:" + bytes(data))

        conn, transport = connect(dispatch)
        conn.data_received(frame(b"over-quota") + frame(b"next"))
        await settle()
        assert transport.written == [frame(b"re:over-quota")]
        assert transport.paused
        await asyncio.sleep(0.1)
        assert transport.written == [frame(b"re:over-quota")]
        await asyncio.sleep(0.2)
        await settle()
        assert transport.written == [frame(b"re:over-quota"), frame(b"re:next")]
        assert not transport.paused

    asyncio.run(run())


def test_frames_cut_anywhere_across_reads_reach_dispatch_whole_and_in_order() -> None:
    """Reads cut the stream at every kind of place (inside a size, at a frame's end, in a
    body, several frames in one read, a frame over many reads): each frame reaches the
    dispatcher whole, once, in order, and nothing stays buffered."""
    import random

    rng = random.Random(7)

    def bodies_of(sizes: tuple[int, ...], n: int) -> list[bytes]:
        return [rng.randbytes(rng.choice(sizes)) for _ in range(n)]

    async def run(bodies: list[bytes], cut_sizes: tuple[int, ...]) -> list[bytes]:
        stream = b"".join(frame(b) for b in bodies)
        seen: list[bytes] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            seen.append(bytes(data))
            return frame(b"ok")

        conn, _ = connect(dispatch, max_request_bytes=100_000, max_queued_request_bytes=1 << 22)
        at = 0
        while at < len(stream):
            step = rng.choice(cut_sizes)
            conn.data_received(stream[at : at + step])
            at += step
            if rng.random() < 0.2:
                await settle()
        await settle()
        assert conn.buffered == 0
        return seen

    small = bodies_of((1, 3, 17, 300), 40)
    large = bodies_of((1, 700, 5000, 70_000), 40)
    for bodies, cut_sizes in (
        (small, (1, 2, 3, 5)),
        (small, (4, 4, 4, 9)),
        (large, (3000, 1)),
        (large, (65_536,)),
        (large, (100_003, 7)),
    ):
        assert asyncio.run(run(bodies, cut_sizes)) == bodies, cut_sizes


def test_answers_ready_together_go_out_in_one_write_in_request_order() -> None:
    async def run() -> tuple[list[bytes], int]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[bytes]] = []

        def dispatch(data: memoryview, ctx: ConnectionContext) -> Any:
            fut: asyncio.Future[bytes] = loop.create_future()
            futures.append(fut)
            body = bytes(data)

            async def answer() -> bytes:
                return frame(await fut + body)

            return answer()

        conn, transport = connect(dispatch)
        conn.data_received(b"".join(frame(bytes([65 + i])) for i in range(6)))
        await settle()
        # The last five finish together, before the first: then all six are ready.
        for fut in futures[1:]:
            fut.set_result(b"=")
        await settle()
        assert transport.written == []
        futures[0].set_result(b"=")
        await settle()
        return transport.written, transport.writes_of_several

    written, several = asyncio.run(run())
    assert written == [frame(b"=" + bytes([65 + i])) for i in range(6)]
    assert several == 1
