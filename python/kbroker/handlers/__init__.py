"""Request handlers, one module per API or family of APIs, and the dispatcher that
routes to them.

A handler is ``handle(broker, ctx, request) -> response body`` (or an awaitable of
one, for requests that wait: long-poll fetches, acks=all produces, group joins),
``ctx`` the `RequestContext` (header, connection, principal, timings). Each handler
module in this package exports ``HANDLERS = {api_key: handler}`` (`authorization`
holds the ACL checks they share); the registry built from them *is* what
ApiVersions advertises: an API is advertised exactly when it has a handler here
(intersected with the declared versions in ``kbroker.protocol.APIS``).

Request-time quotas (``request_percentage``, Kafka's request quota) are applied
here, to every request but the replication ones (follower fetches, the controller's
and brokers' own APIs), SASL's and acks=0 produces: the time the event loop spends
in the handler (its synchronous part) counts; a client over its quota gets the
throttle time in its answer (the larger of it and a byte-rate throttle the handler
set) and its connection pauses for it.
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
# Never throttled by request-time quotas: replication and authentication.
_QUOTA_EXEMPT = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
        ApiKey.ALLOCATE_PRODUCER_IDS,
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    }
)


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


def _is_follower_fetch(request: Any) -> bool:
    replica = getattr(request, "replica_id", -1)
    state = getattr(request, "replica_state", None)
    if state is not None and getattr(state, "replica_id", -1) >= 0:
        replica = state.replica_id
    return replica is not None and replica >= 0


def _request_name(key: int, request: Any) -> str:
    """The request's name as Kafka's RequestMetrics labels it."""
    if key == ApiKey.FETCH:
        return "FetchFollower" if _is_follower_fetch(request) else "FetchConsumer"
    spec = APIS_BY_KEY.get(key)
    return spec.name if spec is not None else str(key)


def _set_throttle(throttle_ms: int, body: Any) -> Any:
    """The answer with at least ``throttle_ms`` as its throttle time."""
    if body is not None and throttle_ms > getattr(body, "throttle_time_ms", throttle_ms):
        body.throttle_time_ms = throttle_ms
    return body


def _with_throttle(body: Any, throttle_ms: int) -> Any:
    """`_set_throttle` on an answer that may not be ready yet."""
    if isinstance(body, asyncio.Future):
        return then(body, functools.partial(_set_throttle, throttle_ms))
    if inspect.isawaitable(body):

        async def later(pending: Awaitable[Any] = body) -> Any:
            return _set_throttle(throttle_ms, await pending)

        return later()
    return _set_throttle(throttle_ms, body)


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
            request_bytes=len(frame),
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
        if self.broker.quotas.request.enabled and self._request_quota_applies(header, request):
            handler_started = time.monotonic_ns()
            body = handler(self.broker, ctx, request)
            throttle_ms = self.broker.quotas.request_throttle_ms(
                ctx.principal, ctx.client_id, time.monotonic_ns() - handler_started
            )
            if throttle_ms > 0:
                ctx.connection.mute_for(throttle_ms / 1000)
                body = _with_throttle(body, throttle_ms)
        else:
            body = handler(self.broker, ctx, request)
        if isinstance(body, asyncio.Future):
            # Waiting in a purgatory: encoded when done, with no task per request.
            if timing is None:
                return then(body, functools.partial(self._encode, header))
            return then(body, functools.partial(self._encode_timed, header, timing))
        if inspect.isawaitable(body):
            return self._finish(header, body, timing)
        return self._encode(header, body)

    @staticmethod
    def _request_quota_applies(header: RequestHeader, request: Any) -> bool:
        if header.api_key in _QUOTA_EXEMPT:
            return False
        if header.api_key == ApiKey.FETCH:
            return not _is_follower_fetch(request)
        # Kafka leaves acks=0 produce requests out of the request quota.
        return not (header.api_key == ApiKey.PRODUCE and getattr(request, "acks", 1) == 0)

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
