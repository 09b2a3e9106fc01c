"""The TCP server: size-delimited frames in, responses out in request order.

Each connection is an ``asyncio.Protocol`` (callbacks, not streams, on the hot
path). Frames are cut from the byte stream as they arrive and handed to the
dispatcher; a response may be ready at once or later (a long-poll fetch, an
acks=all produce) and responses are written strictly in request order.

Bounds: memory and work are bounded per connection and globally.

- Request memory: every frame is granted its whole size from one
  ``RequestMemoryPool`` shared by all connections (``queued.max.request.bytes``)
  when its 4-byte size header is read, before its body is buffered; the grant
  is returned when the request has been answered. A connection the pool cannot
  serve stops reading until memory is released. Grants are whole frames, so a
  connection holding memory never waits for more and the pool cannot deadlock.
  Only bytes read ahead of a refused header (at most one socket read per
  connection) are held outside the pool.
- Responses: a connection stops reading while it has ``max_inflight_requests``
  requests unanswered, ``max_queued_response_bytes`` of answers waiting to be
  written, ``max_pending_bytes`` of requests in progress, or a transport write
  buffer above its high-water mark (a client that does not read its responses
  is muted, as Kafka mutes a channel), and resumes when they drain.
- Work: at most ``max_frames_per_slice`` frames of one connection are handled
  before the loop serves others, so a pipelining client cannot stall the rest.

Record bytes of fetch responses go out with ``sendfile(2)`` from the segment
file straight to the socket once the transport's own buffer is empty (uvloop
has no ``loop.sendfile``); on would-block the connection waits for
writability on a duplicate of the socket's descriptor. On TLS listeners they
must pass through the TLS transport: they are read from the segment file a
chunk at a time (``TLS_CHUNK_BYTES``) and written as they are read, pausing
while the transport is above its high-water mark, so a fetch of many
megabytes is never one buffer (each such buffer cost fresh pages from the
kernel and several copies of the whole response).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from kbroker.config import BROKER, as_int
from kbroker.security.authenticator import ConnectionSecurity, ListenerSecurity
from kbroker.security.errors import AuthenticationFailed
from kbroker.security.listeners import Listener, SecurityProtocol

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")

# Below this size, record bytes are copied into the response instead of sent
# with sendfile: one write syscall beats write + sendfile for small payloads.
SENDFILE_MIN_BYTES = 64 * 1024
# On TLS listeners, file parts of at least SENDFILE_MIN_BYTES are read and written in chunks of
# this size: large enough that each write fills 16 TLS records, small enough that the chunk's
# memory is reused from one read to the next.
TLS_CHUNK_BYTES = 256 * 1024


class FileSource(Protocol):
    """A region of a file that can be sent zero-copy (a kbroker LogSlice)."""

    def __len__(self) -> int: ...
    @property
    def fd(self) -> int: ...  # the file's descriptor, open while the source lives
    @property
    def position(self) -> int: ...  # where the region starts in the file
    def read_bytes(self) -> bytes: ...
    def sendfile(self, out_fd: int, offset: int, count: int) -> int | None: ...


class FilePart(Protocol):
    """Stands for ``length`` bytes of ``source`` (a protocol RecordsPlaceholder)."""

    length: int
    source: FileSource


ResponsePart = bytes | bytearray | memoryview | FilePart
# A response is a complete frame, size prefix included: one bytes object, or a
# list of parts in which file parts stand for bytes sent from a file. None
# means "no response" (Produce with acks=0).
Response = bytes | Sequence[ResponsePart] | None


class CloseConnection(Exception):
    """Raised by a handler to drop the connection (after logging why)."""


# Told when a response's write started and ended (monotonic ns): request metrics.
Sent = Callable[[int, int], None]


class ConnectionObserver(Protocol):
    """Hears of the connections of a listener (metrics)."""

    def opened(self) -> None: ...
    def lost(self) -> None: ...


class ConnectionContext:
    """What a handler may know about the connection a request came on."""

    __slots__ = (
        "_close_after_answers",
        "_mute",
        "client_id",
        "conn_id",
        "on_sent",
        "peer",
        "received_ns",
        "security",
    )

    def __init__(
        self,
        conn_id: int,
        peer: str,
        security: ConnectionSecurity | None = None,
        mute: Callable[[float], None] | None = None,
        close_after_answers: Callable[[], None] | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.peer = peer
        self.client_id: str | None = None
        # When the last bytes were read (monotonic ns): a request's arrival.
        self.received_ns = 0
        # Set by the dispatcher for the request it is handling, taken by the connection.
        self.on_sent: Sent | None = None
        # Who the connection is and where its authentication stands (its listener's).
        self.security = security if security is not None else PLAINTEXT.new_connection()
        self._mute = mute
        self._close_after_answers = close_after_answers

    def mute_for(self, seconds: float) -> None:
        """Reads no further request from this connection for ``seconds`` (a client over its
        quota; Kafka mutes the channel for the throttle time). Answers still go out."""
        if self._mute is not None and seconds > 0:
            self._mute(seconds)

    def close_after_answers(self) -> None:
        """Reads nothing more, and closes once the requests read so far are answered (a
        failed authentication)."""
        if self._close_after_answers is not None:
            self._close_after_answers()


Dispatch = Callable[[memoryview, ConnectionContext], "Response | Awaitable[Response]"]


def _default(name: str) -> int:
    return as_int(BROKER[name].default)


@dataclass
class ServerLimits:
    max_request_bytes: int = _default("socket.request.max.bytes")
    # Request memory shared by all connections; -1 no bound.
    max_queued_request_bytes: int = _default("queued.max.request.bytes")
    idle_timeout_ms: int = _default("connections.max.idle.ms")
    # Per connection, before reading pauses:
    max_pending_bytes: int = 64 * 1024 * 1024  # request bytes of unanswered requests
    max_inflight_requests: int = 100  # requests read and not yet answered
    max_queued_response_bytes: int = 16 * 1024 * 1024  # answers waiting to be written
    write_high_water: int = 4 * 1024 * 1024  # the transport's own write buffer
    # Frames of one connection handled before the loop serves others.
    max_frames_per_slice: int = 16


class RequestMemoryPool:
    """Request memory shared by every connection (Kafka's ``queued.max.request.bytes``).

    A frame is granted its whole size or nothing, so a connection that holds
    memory never waits for more. Requests larger than ``SMALL_REQUEST_BYTES``
    may together use at most three quarters of the pool, except that one of
    them may always use what is free: slow uploads of huge requests leave room
    for ordinary clients' small requests, and any request up to the pool's size
    is served in turn.
    """

    SMALL_REQUEST_BYTES = 1024 * 1024

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # < 0: no bound
        self.used = 0
        self._large_used = 0
        # Connections waiting for memory, in arrival order, and the size each needs.
        self._waiters: dict[KafkaConnection, int] = {}

    def try_reserve(self, size: int) -> bool:
        large = size > self.SMALL_REQUEST_BYTES
        if self.capacity >= 0:
            if self.used + size > self.capacity:
                return False
            if large and self._large_used and self._large_used + size > self.capacity * 3 // 4:
                return False
        self.used += size
        if large:
            self._large_used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size
        if size > self.SMALL_REQUEST_BYTES:
            self._large_used -= size
        # Wake, in order, the waiters whose frames now fit (each tries again).
        free = self.capacity - self.used
        for conn, need in list(self._waiters.items()):
            if need <= free:
                del self._waiters[conn]
                free -= need
                conn.pool_released()

    def wait(self, conn: KafkaConnection, size: int) -> None:
        """Calls ``conn.pool_released()`` once ``size`` bytes may be free."""
        self._waiters[conn] = size

    def forget(self, conn: KafkaConnection) -> None:
        self._waiters.pop(conn, None)


_conn_ids = itertools.count(1)

# A listener with no security: everyone is User:ANONYMOUS.
PLAINTEXT = ListenerSecurity(Listener("PLAINTEXT", "", 0, SecurityProtocol.PLAINTEXT))


class KafkaConnection(asyncio.BaseProtocol):
    """One client's connection: bytes in through ``data_received`` (asyncio.Protocol's
    callbacks; it derives from BaseProtocol only because uvloop hands bytes to the buffers of
    a subclass, TlsKafkaConnection, only when it is no asyncio.Protocol)."""

    # -- config and shared state
    _server: Server
    # -- per connection
    transport: asyncio.Transport | None

    def __init__(self, server: Server) -> None:
        self._server = server
        self.transport = None
        self.ctx = ConnectionContext(
            next(_conn_ids),
            "?",
            server.security.new_connection(),
            self.mute_for,
            self.close_after_answers,
        )
        # Record bytes go out with sendfile only where nothing stands between the file and
        # the socket (not through TLS, where they go in chunks).
        self._zero_copy = server.security.ssl_context is None
        # Bytes received and not yet dispatched: the reads as they came (or what is
        # left of them), and how many bytes they hold.
        self._chunks: collections.deque[bytes | memoryview] = collections.deque()
        self._chunks_len = 0
        # Frames the current pass may still dispatch (ServerLimits.max_frames_per_slice).
        self._budget = 0
        # Pool memory granted to the frame at the head of self._chunks.
        self._reserved = 0
        # Frames may be waiting in self._chunks (a slice ended, a bound was hit).
        self._backlog = False
        self._waiting_for_pool = False
        self._resume_handle: asyncio.Handle | None = None
        self._pending: collections.deque[asyncio.Future[Response] | Response] = collections.deque()
        # Beside each item of self._pending: who hears when it is written.
        self._on_sent: collections.deque[Sent | None] = collections.deque()
        self._pending_bytes = 0
        self._queued_response_bytes = 0
        self._writer_task: asyncio.Task[None] | None = None
        self._read_paused = False
        self._reading_stopped = False  # for good: the server is stopping
        self._write_paused = False
        self._write_resumed: asyncio.Event | None = None
        self._closed = False
        self._wfd: int | None = None
        self.last_active = time.monotonic()
        # Muted (no reading) until this monotonic time: a throttled client.
        self._muted_until = 0.0
        self._unmute_handle: asyncio.TimerHandle | None = None
        self._close_when_answered = False
        self.opened = time.monotonic()

    # -- asyncio.Protocol callbacks ----------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.ctx.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_write_buffer_limits(high=self._server.limits.write_high_water)
        self._server.connections.add(self)
        if self._server.observer is not None:
            self._server.observer.opened()
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            try:
                self.ctx.security.tls_established(ssl_object.getpeercert())
            except AuthenticationFailed as exc:
                log.warning("closing %s: %s", self.ctx.peer, exc)
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._unmute_handle is not None:
            self._unmute_handle.cancel()
            self._unmute_handle = None
        if self._server.observer is not None and self in self._server.connections:
            self._server.observer.lost()
        self._server.connections.discard(self)
        self._server.pool.forget(self)
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None
        if self._reserved:
            self._server.pool.release(self._reserved)
            self._reserved = 0
        self._chunks.clear()
        self._chunks_len = 0
        for item in self._pending:
            if isinstance(item, asyncio.Future) and not item.done():
                item.cancel()
        self._pending.clear()
        self._on_sent.clear()
        if self._writer_task is not None:
            self._writer_task.cancel()
        if self._write_resumed is not None:
            self._write_resumed.set()
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._write_resumed is not None:
            self._write_resumed.set()
        self._update_reading()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet dispatched."""
        return self._chunks_len

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.last_active = time.monotonic()
        self.ctx.received_ns = time.monotonic_ns()
        self._chunks.append(data)
        self._chunks_len += len(data)
        self._take_chunks()

    def pool_released(self) -> None:
        """The request memory pool has memory again: try the waiting frame."""
        self._waiting_for_pool = False
        self._update_reading()

    def _resume(self) -> None:
        self._resume_handle = None
        if not self._closed:
            self._take_chunks()

    def _take_chunks(self) -> None:
        """Dispatches the whole frames received, as far as the bounds allow.

        A frame inside one read is handed on as a view of it (no copy). A frame that
        continues in later reads (any frame larger than a read) is joined into one
        piece once all of it is here: one copy, never a buffer grown read by read.
        """
        chunks = self._chunks
        self._backlog = False
        self._budget = self._server.limits.max_frames_per_slice
        while chunks and not self._closed:
            head = chunks[0]
            if len(head) < 4 and len(chunks) > 1:
                # A frame's size split between two reads (rare, and never large).
                first = chunks.popleft()
                chunks[0] = b"".join((first, chunks[0]))
                continue
            taken = self._take_frames(head)
            if self._closed:
                return
            self._chunks_len -= taken
            if taken == len(head):
                chunks.popleft()
                continue
            if taken:
                head = chunks[0] = memoryview(head)[taken:]
            if self._backlog or len(head) < 4:
                break
            (size,) = _SIZE.unpack_from(head)
            need = 4 + size
            if self._chunks_len < need:
                break  # the rest of the frame at the head is still to come
            pieces: list[bytes | memoryview] = []
            while need:
                chunk = chunks[0]
                if len(chunk) <= need:
                    pieces.append(chunks.popleft())
                    need -= len(chunk)
                else:
                    view = memoryview(chunk)
                    pieces.append(view[:need])
                    chunks[0] = view[need:]
                    need = 0
            # Exactly the frame: the next turn dispatches it.
            chunks.appendleft(b"".join(pieces))
        if not self._closed:
            self._update_reading()

    def _take_frames(self, source: bytes | memoryview) -> int:
        """Dispatches the whole frames at the start of ``source`` as far as the bounds
        allow; returns how many bytes it took."""
        pool = self._server.pool
        pos = 0
        end = len(source)
        view = memoryview(source)
        while end - pos >= 4 and not self._closed:
            if self._budget == 0 or self._must_wait():
                self._backlog = True
                break
            (size,) = _SIZE.unpack_from(source, pos)
            if self._refuse_frame_size(size):
                return pos
            if not self._reserved:
                # Whole frames only: memory is granted before the body is read.
                if not pool.try_reserve(size):
                    self._backlog = self._waiting_for_pool = True
                    pool.wait(self, size)
                    break
                self._reserved = size
            frame_end = pos + 4 + size
            if frame_end > end:
                break
            frame = view[pos + 4 : frame_end]
            pos = frame_end
            reserved, self._reserved = self._reserved, 0
            self._budget -= 1
            self._submit(frame, reserved)
        return pos

    def _largest_frame(self) -> int:
        return self.ctx.security.max_frame(self._server.limits.max_request_bytes)

    def _refuse_frame_size(self, size: int) -> bool:
        """Closes the connection when a frame header announces ``size`` bytes it may not send."""
        largest = self._largest_frame()
        if 0 <= size <= largest:
            return False
        log.warning(
            "closing %s: request frame of %d bytes (limit %d%s)",
            self.ctx.peer,
            size,
            largest,
            "" if self.ctx.security.authenticated else " before authentication",
        )
        self.close()
        return True

    # -- requests and responses --------------------------------------------

    def _submit(self, frame: memoryview, size: int) -> None:
        """Dispatches one frame; ``size`` bytes of the pool are held for it
        until it has been answered."""
        pool = self._server.pool
        ctx = self.ctx
        try:
            result = self._server.dispatch(frame, ctx)
        except CloseConnection as exc:
            pool.release(size)
            log.warning("closing %s: %s", self.ctx.peer, exc)
            self.close()
            return
        except Exception:
            pool.release(size)
            log.exception("closing %s: request handler failed", self.ctx.peer)
            self.close()
            return
        on_sent = ctx.on_sent
        if on_sent is not None:
            ctx.on_sent = None
        if isinstance(result, Awaitable):
            fut = asyncio.ensure_future(result)
            self._pending_bytes += size
            fut.add_done_callback(functools.partial(self._answered, size))
            self._pending.append(fut)
            self._on_sent.append(on_sent)
            self._ensure_writer()
            return
        pool.release(size)
        if (
            self._pending
            or self._writer_task is not None
            or (result is not None and self._has_large_file_part(result))
        ):
            # Behind earlier answers, or a file part to send (zero-copy, or in chunks through
            # TLS): the writer task sends it in order.
            self._pending.append(result)
            self._on_sent.append(on_sent)
            self._queued_response_bytes += _held_bytes(result)
            self._ensure_writer()
        elif result is not None:
            if on_sent is None:
                self._write_now(result)
            else:
                start = time.monotonic_ns()
                self._write_now(result)
                on_sent(start, time.monotonic_ns())
        elif on_sent is not None:
            now = time.monotonic_ns()
            on_sent(now, now)
        if self._close_when_answered:
            self._close_if_answered()

    def _answered(self, size: int, fut: asyncio.Future[Response]) -> None:
        """An asynchronous request is done: its request bytes are no longer held."""
        self._server.pool.release(size)
        self._pending_bytes -= size
        if not fut.cancelled() and fut.exception() is None:
            self._queued_response_bytes += _held_bytes(fut.result())
        self._update_reading()

    @staticmethod
    def _has_large_file_part(response: bytes | Sequence[ResponsePart]) -> bool:
        return not isinstance(response, bytes) and any(
            not isinstance(p, _BYTES) and p.length >= SENDFILE_MIN_BYTES for p in response
        )

    def _write_now(self, *responses: bytes | Sequence[ResponsePart]) -> None:
        """Writes responses with no zero-copy parts in one transport write."""
        assert self.transport is not None
        if len(responses) == 1:
            self.transport.write(_joined(responses[0]))
        else:
            self.transport.writelines(map(_joined, responses))

    def _take_ready_small(self) -> list[bytes | Sequence[ResponsePart]]:
        """The answers after the one being written that are ready too (answered, small,
        nobody to tell when sent): written with it, one system call for the lot when
        several requests finished together (pipelined produce whose writes ended in
        one batch of the I/O threads)."""
        ready: list[bytes | Sequence[ResponsePart]] = []
        pending, on_sent = self._pending, self._on_sent
        while pending and on_sent[0] is None:
            head = pending[0]
            if isinstance(head, asyncio.Future):
                if not head.done() or head.cancelled() or head.exception() is not None:
                    break
                response = head.result()
            else:
                response = head
            if response is not None and self._has_large_file_part(response):
                break
            pending.popleft()
            on_sent.popleft()
            self._queued_response_bytes -= _held_bytes(response)
            if response is not None:
                ready.append(response)
        if ready:
            self._update_reading()
        return ready

    def _ensure_writer(self) -> None:
        if self._writer_task is None and not self._closed:
            self._writer_task = asyncio.ensure_future(self._write_responses())

    async def _write_responses(self) -> None:
        try:
            while self._pending and not self._closed:
                head = self._pending[0]
                if isinstance(head, asyncio.Future):
                    try:
                        response = await head
                    except CloseConnection as exc:
                        log.warning("closing %s: %s", self.ctx.peer, exc)
                        self.close()
                        return
                    except asyncio.CancelledError:
                        if self._closed:
                            return
                        raise
                    except Exception:
                        log.exception("closing %s: request handler failed", self.ctx.peer)
                        self.close()
                        return
                else:
                    response = head
                self._pending.popleft()
                on_sent = self._on_sent.popleft()
                self._queued_response_bytes -= _held_bytes(response)
                self._update_reading()
                if response is None or self._closed:
                    if on_sent is not None and not self._closed:
                        now = time.monotonic_ns()
                        on_sent(now, now)
                    continue
                start = time.monotonic_ns() if on_sent is not None else 0
                if isinstance(response, bytes) or not self._has_large_file_part(response):
                    if on_sent is None:
                        self._write_now(response, *self._take_ready_small())
                    else:
                        self._write_now(response)
                elif self._zero_copy:
                    await self._write_zero_copy(response)
                else:
                    await self._write_in_chunks(response)
                if on_sent is not None and not self._closed:
                    on_sent(start, time.monotonic_ns())
                if self._write_paused and not self._closed:
                    await self._wait_write_resumed()
        except OSError as exc:
            log.info("closing %s: %s", self.ctx.peer, exc)
            self.close()
        finally:
            self._writer_task = None
        if self._pending and not self._closed:
            self._ensure_writer()
        elif self._close_when_answered:
            self._close_if_answered()

    async def _wait_write_resumed(self) -> None:
        if self._write_resumed is None:
            self._write_resumed = asyncio.Event()
        self._write_resumed.clear()
        while self._write_paused and not self._closed:
            await self._write_resumed.wait()
            self._write_resumed.clear()

    async def _write_zero_copy(self, parts: Sequence[ResponsePart]) -> None:
        assert self.transport is not None
        pending = bytearray()
        for part in parts:
            if isinstance(part, _BYTES):
                pending += part
                continue
            if part.length < SENDFILE_MIN_BYTES:
                pending += _materialize(part)
                continue
            if pending:
                self.transport.write(pending)
                pending = bytearray()
            await self._send_file_part(part)
            if self._closed:
                return
        if pending:
            self.transport.write(pending)

    async def _write_in_chunks(self, parts: Sequence[ResponsePart]) -> None:
        """Through TLS: the bytes before a large file part in one write, then the part a chunk
        at a time."""
        assert self.transport is not None
        pending = bytearray()
        for part in parts:
            if isinstance(part, _BYTES):
                pending += part
                continue
            if part.length < SENDFILE_MIN_BYTES:
                pending += _materialize(part)
                continue
            if pending:
                self.transport.write(pending)
                pending = bytearray()
            await self._write_file_part_in_chunks(part)
            if self._closed:
                return
        if pending:
            self.transport.write(pending)

    async def _write_file_part_in_chunks(self, part: FilePart) -> None:
        assert self.transport is not None
        fd, start = part.source.fd, part.source.position
        sent = 0
        while sent < part.length:
            if self._write_paused:
                await self._wait_write_resumed()
            if self._closed:
                return
            chunk = os.pread(fd, min(TLS_CHUNK_BYTES, part.length - sent), start + sent)
            if not chunk:
                # The file ended early (truncated under us): the response
                # length is already promised, so the connection cannot go on.
                raise OSError("segment shorter than the fetch response promised")
            self.transport.write(chunk)
            sent += len(chunk)
            self.last_active = time.monotonic()

    async def _send_file_part(self, part: FilePart) -> None:
        """sendfile the part's bytes to the socket once the transport has flushed."""
        assert self.transport is not None
        fd = self._writable_fd()
        sent = 0
        while sent < part.length:
            if self._closed:
                return
            if self.transport.get_write_buffer_size():
                await self._wait_writable(fd)
                continue
            n = part.source.sendfile(self._sock_fd(), sent, part.length - sent)
            if n is None:
                await self._wait_writable(fd)
            elif n == 0:
                # The file ended early (truncated under us): the response
                # length is already promised, so the connection cannot go on.
                raise OSError("segment shorter than the fetch response promised")
            else:
                sent += n
                self.last_active = time.monotonic()

    def _sock_fd(self) -> int:
        assert self.transport is not None
        sock = self.transport.get_extra_info("socket")
        return int(sock.fileno())

    def _writable_fd(self) -> int:
        # The socket's own fd belongs to the transport and cannot be watched
        # twice; a duplicate of it can.
        if self._wfd is None:
            self._wfd = os.dup(self._sock_fd())
        return self._wfd

    async def _wait_writable(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        loop.add_writer(fd, _set_done, fut)
        try:
            await fut
        finally:
            loop.remove_writer(fd)
        # Let the transport flush its own buffer on the same readiness.
        await asyncio.sleep(0)

    # -- flow control and closing ------------------------------------------

    def close_after_answers(self) -> None:
        self._close_when_answered = True
        self.stop_reading()
        if not self.busy:
            asyncio.get_running_loop().call_soon(self._close_if_answered)

    def _close_if_answered(self) -> None:
        if self._close_when_answered and not self.busy:
            self.close()

    def mute_for(self, seconds: float) -> None:
        """Takes no request for ``seconds`` (extending a mute under way)."""
        if self._closed:
            return
        until = time.monotonic() + seconds
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._unmute_handle is not None:
            self._unmute_handle.cancel()
        self._unmute_handle = asyncio.get_running_loop().call_later(seconds, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._unmute_handle = None
        self._muted_until = 0.0
        self._update_reading()

    def _must_wait(self) -> bool:
        """Whether this connection may not take another request now."""
        limits = self._server.limits
        return (
            self._reading_stopped
            or self._muted_until > 0.0
            or self._write_paused
            or len(self._pending) >= limits.max_inflight_requests
            or self._pending_bytes > limits.max_pending_bytes
            or self._queued_response_bytes > limits.max_queued_response_bytes
        )

    def _update_reading(self) -> None:
        """Reads only while no frame waits in the buffer and no bound is hit;
        schedules the waiting frames once they may go on."""
        if self.transport is None or self._closed:
            return
        must_wait = self._must_wait()
        if (
            self._backlog
            and not must_wait
            and not self._waiting_for_pool
            and self._resume_handle is None
        ):
            self._resume_handle = asyncio.get_running_loop().call_soon(self._resume)
        should_pause = self._backlog or must_wait
        if should_pause and not self._read_paused:
            self.transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            self.transport.resume_reading()
            self._read_paused = False

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.close()

    def stop_reading(self) -> None:
        """Reads and dispatches no more requests (those read are still answered)."""
        self._reading_stopped = True
        self._update_reading()

    @property
    def busy(self) -> bool:
        return bool(self._pending) or self._writer_task is not None

    async def drain(self) -> None:
        """Waits until every accepted request has been answered."""
        while self.busy and not self._closed:
            await asyncio.sleep(0.01)


class TlsKafkaConnection(KafkaConnection, asyncio.BufferedProtocol):
    """A connection of a TLS listener. uvloop's TLS transport decrypts straight into the
    buffer that frames are cut from (``get_buffer``/``buffer_updated``), so request bytes are
    copied once, by the decryption: handed over as ``data_received`` chunks they were joined
    by the transport and appended to the frame buffer, two more copies of every byte.

    Frames are handed on as views of that buffer, so bytes once written into it are never
    written again: it is filled onwards from ``_rfill`` and replaced, when too small for what
    the transport has, by a new one of that size holding the unread bytes. Once the pool has
    granted the head frame its memory, the buffer is made large enough for the whole frame,
    so a large request is read in place; until then reads are of at most ``FIRST_READ_BYTES``,
    so little is copied over when a frame turns out large. A connection with nothing unread
    holds no buffer.
    """

    # The most read before the head frame's size is known and granted: one TLS record.
    FIRST_READ_BYTES = 16 * 1024

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self._rbuf = bytearray()
        # Unread bytes are self._rbuf[self._rstart:self._rfill]; beyond that it is free.
        self._rstart = 0
        self._rfill = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        unread = self._rfill - self._rstart
        need = max(min(sizehint, self.FIRST_READ_BYTES), 1)
        if unread >= 4 and self._reserved:
            (size,) = _SIZE.unpack_from(self._rbuf, self._rstart)
            need = max(need, 4 + size - unread)
        if len(self._rbuf) - self._rfill < need:
            fresh = bytearray(unread + need)
            if unread:
                memoryview(fresh)[:unread] = memoryview(self._rbuf)[self._rstart : self._rfill]
            self._rbuf, self._rstart, self._rfill = fresh, 0, unread
        return memoryview(self._rbuf)[self._rfill :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        self._rfill += nbytes
        self.last_active = time.monotonic()
        self.ctx.received_ns = time.monotonic_ns()
        self._take_buffered()

    def _resume(self) -> None:
        self._resume_handle = None
        if not self._closed:
            self._take_buffered()

    def _take_buffered(self) -> None:
        """Dispatches the whole frames among the unread bytes as far as the bounds allow (as
        ``_take_frames``), each a view of the buffer."""
        pool = self._server.pool
        self._backlog = False
        budget = self._server.limits.max_frames_per_slice
        buf = self._rbuf
        view = memoryview(buf)
        pos, end = self._rstart, self._rfill
        while end - pos >= 4 and not self._closed:
            if budget == 0 or self._must_wait():
                self._backlog = True
                break
            (size,) = _SIZE.unpack_from(buf, pos)
            if self._refuse_frame_size(size):
                return
            if not self._reserved:
                # Whole frames only: memory is granted before the body is read.
                if not pool.try_reserve(size):
                    self._backlog = self._waiting_for_pool = True
                    pool.wait(self, size)
                    break
                self._reserved = size
            frame_end = pos + 4 + size
            if frame_end > end:
                break
            frame = view[pos + 4 : frame_end]
            pos = frame_end
            reserved, self._reserved = self._reserved, 0
            budget -= 1
            self._submit(frame, reserved)
        if self._closed:
            return
        self._rstart = pos
        if pos == end and not self._reserved:
            # Nothing unread: the next bytes may start a buffer of their own size.
            self._rbuf, self._rstart, self._rfill = bytearray(), 0, 0
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._rbuf = bytearray()
        self._rstart = self._rfill = 0


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


_BYTES = (bytes, bytearray, memoryview)


def _held_bytes(response: Response) -> int:
    """Memory a queued response holds (file parts are read only when sent)."""
    if response is None:
        return 0
    if isinstance(response, bytes):
        return len(response)
    return sum(len(p) if isinstance(p, _BYTES) else 0 for p in response)


def _joined(response: bytes | Sequence[ResponsePart]) -> bytes:
    """A response with no zero-copy parts as one piece."""
    if isinstance(response, bytes):
        return response
    return b"".join(_materialize(p) for p in response)


def _materialize(part: ResponsePart) -> bytes | bytearray | memoryview:
    if isinstance(part, _BYTES):
        return part
    data = part.source.read_bytes()
    if len(data) != part.length:
        raise OSError("segment shorter than the fetch response promised")
    return data


class Server:
    """Listens on one address and owns its connections."""

    def __init__(
        self,
        dispatch: Dispatch,
        limits: ServerLimits,
        observer: ConnectionObserver | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.dispatch = dispatch
        self.limits = limits
        self.observer = observer
        # How this listener secures its connections (none: PLAINTEXT).
        self.security = security if security is not None else PLAINTEXT
        self.pool = RequestMemoryPool(limits.max_queued_request_bytes)
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        tls = self.security.ssl_context
        self._server = await loop.create_server(
            (lambda: TlsKafkaConnection(self))
            if tls is not None
            else (lambda: KafkaConnection(self)),
            host,
            port,
            reuse_address=True,
            backlog=1024,
            ssl=tls,
            ssl_handshake_timeout=self.security.auth_timeout_s if tls is not None else None,
        )
        self._idle_task = asyncio.ensure_future(self._close_idle())
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def _close_idle(self) -> None:
        while True:
            timeout = self.limits.idle_timeout_ms / 1000
            await asyncio.sleep(min(max(timeout / 4, 0.05), 5.0, self.security.auth_timeout_s / 4))
            now = time.monotonic()
            cutoff = now - timeout
            unauthenticated_cutoff = now - self.security.auth_timeout_s
            for conn in list(self.connections):
                if conn.last_active < cutoff and not conn.busy:
                    log.info("closing idle connection %s", conn.ctx.peer)
                    conn.close()
                elif conn.opened < unauthenticated_cutoff and not conn.ctx.security.authenticated:
                    log.info(
                        "closing %s: not authenticated within %.1f s",
                        conn.ctx.peer,
                        self.security.auth_timeout_s,
                    )
                    conn.close()

    def stop_accepting(self) -> None:
        """Takes no new connection and no new request (those read are still answered)."""
        if self._server is not None:
            self._server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
        for conn in list(self.connections):
            conn.stop_reading()

    async def stop(
        self, grace_s: float = 10.0, before_drain: Callable[[], None] | None = None
    ) -> None:
        """Stops accepting, lets in-flight requests finish, then closes everything.

        ``before_drain`` runs once no new request can arrive: the broker
        answers its waiting requests there, so none waits out its timeout.
        """
        self.stop_accepting()
        conns = list(self.connections)
        if before_drain is not None:
            before_drain()
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.drain()) for c in conns], timeout=grace_s)
        for conn in conns:
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
