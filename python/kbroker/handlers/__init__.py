"""Request handlers, one module per API, and the dispatcher that routes to them.

A handler is ``handle(broker, ctx, request) -> response body`` (or an
awaitable of one, for requests that wait: long-poll fetches), ``ctx`` the
`RequestContext` (header, connection, principal, timings). Each module in
this package exports ``HANDLERS = {api_key: handler}``; the registry built
from them *is* what ApiVersions advertises: an API is advertised exactly when it
has a handler here (intersected with the declared versions in
``kbroker.protocol.APIS``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import pkgutil
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kbroker.futures import then
from kbroker.handlers.sasl_authenticate import sasl_raw_token
from kbroker.metrics.core import BrokerMetrics
from kbroker.metrics.requests import RequestTiming, new_timing
from kbroker.network.request import RequestContext
from kbroker.network.server import CloseConnection, ConnectionContext, Response
from kbroker.protocol import (
    APIS_BY_KEY,
    ApiKey,
    ProtocolDecodeError,
    RequestHeader,
    UnknownApiKeyError,
    UnsupportedVersionError,
    decode_request,
    encode_api_versions_unsupported,
    encode_response,
    encode_response_segments,
)

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

Handler = Callable[["Broker", RequestContext, Any], Any]

# Responses that may carry records are encoded around them, so the record
# bytes can go out zero-copy.
_SEGMENTED = frozenset({ApiKey.FETCH})


def _registry() -> dict[int, Handler]:
    """Every handler module in this package contributes its HANDLERS."""
    handlers: dict[int, Handler] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for key, handler in getattr(module, "HANDLERS", {}).items():
            if key in handlers:
                raise RuntimeError(f"api key {key} is handled twice ({info.name})")
            handlers[key] = handler
    return handlers


def _request_name(key: int, request: Any) -> str:
    """The request's name as Kafka's RequestMetrics labels it."""
    if key == ApiKey.FETCH:
        replica = getattr(request, "replica_id", -1)
        state = getattr(request, "replica_state", None)
        if state is not None and getattr(state, "replica_id", -1) >= 0:
            replica = state.replica_id
        return "FetchFollower" if replica is not None and replica >= 0 else "FetchConsumer"
    spec = APIS_BY_KEY.get(key)
    return spec.name if spec is not None else str(key)


class Dispatcher:
    def __init__(self, broker: Broker, metrics: BrokerMetrics | None = None) -> None:
        self.broker = broker
        self.handlers = _registry()
        broker.handled_api_keys = frozenset(self.handlers)
        # Request metrics (and the kbroker.request log) when given.
        self.metrics = metrics

    def dispatch(
        self, frame: memoryview, connection: ConnectionContext
    ) -> Response | Awaitable[Response]:
        started = time.monotonic_ns()
        security = connection.security
        if security.raw_tokens:
            # After SaslHandshake v0 the client sends its SASL tokens as bare frames.
            return sasl_raw_token(self.broker, connection, bytes(frame))
        try:
            header, request = decode_request(frame)
        except UnsupportedVersionError as exc:
            header = exc.header
            if header.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in the v0 layout with the range we support.
                return encode_api_versions_unsupported(header)
            raise CloseConnection(str(exc)) from None
        except UnknownApiKeyError as exc:
            raise CloseConnection(str(exc)) from None
        except ProtocolDecodeError as exc:
            raise CloseConnection(f"malformed request: {exc}") from None
        connection.client_id = header.client_id
        if not security.authenticated or security.expires or security.reauthenticating:
            refused = security.refusal(header.api_key)
            if refused is not None:
                raise CloseConnection(refused)
        handler = self.handlers.get(header.api_key)
        if handler is None:
            raise CloseConnection(f"no handler for api key {header.api_key}")
        ctx = RequestContext(
            header,
            connection,
            security.listener.name,
            security.principal,
            received_ns=connection.received_ns or started,
        )
        timing = new_timing(
            self.metrics,
            _request_name(header.api_key, request),
            header.api_version,
            header.correlation_id,
            connection.received_ns or started,
            started,
        )
        if timing is None:
            return self._handle(handler, ctx, header, request)
        timing.client_id = header.client_id or ""
        timing.peer = connection.peer
        timing.listener = ctx.listener
        timing.principal = ctx.principal
        result = self._handle(handler, ctx, header, request, timing)
        timing.handled()
        connection.on_sent = timing.sent
        return result

    def _handle(
        self,
        handler: Handler,
        ctx: RequestContext,
        header: RequestHeader,
        request: Any,
        timing: RequestTiming | None = None,
    ) -> Response | Awaitable[Response]:
        body = handler(self.broker, ctx, request)
        if isinstance(body, asyncio.Future):
            # Waiting in a purgatory: encoded when done, with no task per request.
            if timing is None:
                return then(body, functools.partial(self._encode, header))
            return then(body, functools.partial(self._encode_timed, header, timing))
        if inspect.isawaitable(body):
            return self._finish(header, body, timing)
        return self._encode(header, body)

    async def _finish(
        self, header: RequestHeader, pending: Awaitable[Any], timing: RequestTiming | None
    ) -> Response:
        if timing is None:
            return self._encode(header, await pending)
        return self._encode_timed(header, timing, await pending)

    @classmethod
    def _encode_timed(cls, header: RequestHeader, timing: RequestTiming, body: Any) -> Response:
        response = cls._encode(header, body)
        timing.ready()
        return response

    @staticmethod
    def _encode(header: RequestHeader, body: Any) -> Response:
        if body is None:
            return None
        if header.api_key in _SEGMENTED:
            return encode_response_segments(header, header.api_key, header.api_version, body)
        return encode_response(header, header.api_key, header.api_version, body)
