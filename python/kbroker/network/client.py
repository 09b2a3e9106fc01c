"""`BrokerConnection`: an asyncio connection to another broker, for the requests brokers
send each other (controller to broker, follower to leader, broker to controller).

One TCP connection, requests pipelined on it: each gets a correlation id and
a future, and one reader task hands each response to its request (Kafka
answers a connection's requests in order, which is checked). A connection
that fails fails every request in flight with `BrokerUnreachable` and is
opened again by the next request, no sooner than ``reconnect_backoff_s``
after the last attempt. Every wait is bounded: connecting by
``connect_timeout_s``, each request by its own timeout (a request that times
out closes the connection, as Kafka's clients do, since its answer would
still come and be mistaken for the next one's).

With a `ClientSecurity` the connection is made through TLS and/or
authenticated with SASL before any request goes on it; when the broker
limits the session (``connections.max.reauth.ms``) the connection is opened
again, and so authenticated again, before the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from kbroker.protocol import ProtocolError, decode_response, encode_request
from kbroker.security.client import ClientSecurity, sasl_requests
from kbroker.security.errors import AuthenticationFailed

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
DEFAULT_MAX_RESPONSE_BYTES = 256 << 20


class BrokerUnreachable(ConnectionError):
    """The request could not be sent or its answer did not come; it may have been acted on."""


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        *,
        connect_timeout_s: float = 10.0,
        reconnect_backoff_s: float = 0.05,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security or ClientSecurity()
        # When the SASL session the broker granted ends (monotonic; 0: never).
        self._session_ends = 0.0
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_backoff_s = reconnect_backoff_s
        self.max_response_bytes = max_response_bytes
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._last_attempt = -1e9
        self._correlation = 0
        # (correlation id, api key, version, future) in the order sent
        self._in_flight: deque[tuple[int, int, int, asyncio.Future[Any]]] = deque()
        self._closed = False

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float) -> Any:
        """Sends one request and returns the decoded response body.

        Raises BrokerUnreachable (connection refused, lost, or no answer within
        ``timeout_s``); the caller decides whether to retry.
        """
        deadline = time.monotonic() + timeout_s
        if self._session_ends and time.monotonic() >= self._session_ends and not self._in_flight:
            # Authenticate again, on a new connection, before the broker ends the session.
            self._fail(BrokerUnreachable(f"{self.host}:{self.port}: SASL session renewed"))
        await self._connect(deadline)
        writer = self._writer
        if writer is None:  # lost while connecting
            raise BrokerUnreachable(f"{self.host}:{self.port}: connection lost")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # (A request that timed out has nobody left to take its failure.)
        future.add_done_callback(_retrieve)
        self._in_flight.append((correlation, api_key, version, future))
        try:
            writer.write(encode_request(api_key, version, correlation, self.client_id, body))
            remaining = deadline - time.monotonic()
            return await asyncio.wait_for(asyncio.shield(future), max(remaining, 0.001))
        except TimeoutError:
            self._fail(BrokerUnreachable(f"{self.host}:{self.port}: no answer in {timeout_s}s"))
            raise BrokerUnreachable(f"{self.host}:{self.port}: no answer in {timeout_s}s") from None

    async def close(self) -> None:
        self._closed = True
        self._fail(BrokerUnreachable(f"{self.host}:{self.port}: connection closed"))
        task = self._reader_task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- connection -------------------------------------------------------------

    async def _connect(self, deadline: float) -> None:
        if self._closed:
            raise BrokerUnreachable(f"{self.host}:{self.port}: connection closed")
        if self._writer is not None:
            return
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
            # A caller that gave up waiting leaves nobody to take the failure.
            self._connecting.add_done_callback(_retrieve)
        try:
            await asyncio.wait_for(
                asyncio.shield(self._connecting), max(deadline - time.monotonic(), 0.001)
            )
        except TimeoutError:
            raise BrokerUnreachable(f"{self.host}:{self.port}: not connected in time") from None

    async def _open(self) -> None:
        try:
            wait = self._last_attempt + self.reconnect_backoff_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_attempt = time.monotonic()
            security = self.security
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        self.host,
                        self.port,
                        ssl=security.ssl_context,
                        server_hostname=security.server_hostname(self.host),
                    ),
                    self.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                raise BrokerUnreachable(
                    f"cannot connect to {self.host}:{self.port}: {exc}"
                ) from None
            if security.protocol.sasl:
                try:
                    lifetime = await asyncio.wait_for(
                        sasl_requests(security, self._direct(reader, writer)),
                        self.connect_timeout_s,
                    )
                except (
                    OSError,
                    TimeoutError,
                    asyncio.IncompleteReadError,
                    ProtocolError,
                    AuthenticationFailed,
                ) as exc:
                    writer.close()
                    log.warning("cannot authenticate to %s:%d: %s", self.host, self.port, exc)
                    raise BrokerUnreachable(
                        f"cannot authenticate to {self.host}:{self.port}: {exc}"
                    ) from None
                # Renewed at 85% of its life, as Kafka's clients re-authenticate early.
                self._session_ends = time.monotonic() + lifetime * 0.85 / 1000 if lifetime else 0.0
            if self._closed:
                writer.close()
                raise BrokerUnreachable(f"{self.host}:{self.port}: connection closed")
            self._writer = writer
            self._reader_task = asyncio.ensure_future(self._read_responses(reader, writer))
        finally:
            self._connecting = None

    def _direct(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Callable[[int, int, Any], Awaitable[Any]]:
        """Sends a request and reads its answer on a connection that is not yet in use."""

        async def send(api_key: int, version: int, body: Any) -> Any:
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            writer.write(encode_request(api_key, version, self._correlation, self.client_id, body))
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if not 4 <= size <= self.max_response_bytes:
                raise ProtocolError(f"a response of {size} bytes")
            correlation, answer = decode_response(api_key, version, await reader.readexactly(size))
            if correlation != self._correlation:
                raise ProtocolError(f"the answer to request {correlation}, not {self._correlation}")
            return answer

        return send

    async def _read_responses(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        error: BrokerUnreachable
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 4 <= size <= self.max_response_bytes:
                    raise ProtocolError(f"a response of {size} bytes")
                frame = await reader.readexactly(size)
                if not self._in_flight:
                    raise ProtocolError("a response to no request")
                expected, api_key, version, future = self._in_flight.popleft()
                correlation, body = decode_response(api_key, version, frame)
                if correlation != expected:
                    raise ProtocolError(f"the answer to request {correlation}, not {expected}")
                if not future.done():
                    future.set_result(body)
        except (OSError, asyncio.IncompleteReadError) as exc:
            error = BrokerUnreachable(f"{self.host}:{self.port}: connection lost ({exc!r})")
        except ProtocolError as exc:
            log.warning("closing the connection to %s:%d: %s", self.host, self.port, exc)
            error = BrokerUnreachable(f"{self.host}:{self.port}: {exc}")
        except asyncio.CancelledError:
            error = BrokerUnreachable(f"{self.host}:{self.port}: connection closed")
        finally:
            writer.close()
        if self._writer is writer:
            self._fail(error)

    def _fail(self, error: BrokerUnreachable) -> None:
        """Closes the connection; every request in flight fails with ``error``."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        while self._in_flight:
            *_, future = self._in_flight.popleft()
            if not future.done():
                future.set_exception(error)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
