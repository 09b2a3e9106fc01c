"""SaslAuthenticate (36): one SASL token of the exchange the handshake started, and its answer.

A failed exchange is answered SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms`` (a guesser waits for each
guess) and the connection closes once that answer is out; the log says why,
never with a token or a password. v1+ answers carry the session's lifetime
(``connections.max.reauth.ms``). After SaslHandshake v0 the tokens come as
bare frames instead: `sasl_raw_token` answers them the same way, in bare
frames, and a failure just closes the connection, as Kafka does.

A listener without SASL answers ILLEGAL_SASL_STATE, as Kafka answers a
SaslAuthenticate out of turn.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.network.server import CloseConnection, ConnectionContext, Response
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.sasl import SaslAuthenticateResponse
from kbroker.security.errors import AuthenticationFailed

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


def _failure_message(mechanism: str | None) -> str:
    if mechanism == "PLAIN":
        return "Authentication failed: Invalid username or password"
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def _log_failure(connection: ConnectionContext, exc: AuthenticationFailed) -> None:
    security = connection.security
    log.info(
        "failed authentication of %s on listener %s (%s): %s",
        connection.peer,
        security.listener.name,
        security.mechanism,
        exc,
    )


async def _later(delay_s: float, answer: Any) -> Any:
    await asyncio.sleep(delay_s)
    return answer


def handle_sasl_authenticate(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    connection = ctx.connection
    security = connection.security
    if not security.listener.protocol.sasl:
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="this listener takes no SASL authentication",
            auth_bytes=b"",
            session_lifetime_ms=0,
        )
    try:
        answer = security.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        _log_failure(connection, exc)
        connection.close_after_answers()
        failure = SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
            error_message=_failure_message(security.mechanism),
            auth_bytes=b"",
            session_lifetime_ms=0,
        )
        return _later(security.listener.failed_delay_ms / 1000, failure)
    return SaslAuthenticateResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        auth_bytes=answer,
        session_lifetime_ms=security.session_lifetime_ms(),
    )


def sasl_raw_token(broker: Broker, connection: ConnectionContext, token: bytes) -> Response:
    """A bare SASL token after SaslHandshake v0: the answer goes back as a bare frame."""
    try:
        answer = connection.security.authenticate(token)
    except AuthenticationFailed as exc:
        _log_failure(connection, exc)
        raise CloseConnection("SASL authentication failed") from None
    return _SIZE.pack(len(answer)) + answer


HANDLERS = {ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate}
