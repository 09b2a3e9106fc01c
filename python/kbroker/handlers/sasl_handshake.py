"""SaslHandshake (17): the client names the SASL mechanism it will authenticate with.

On a SASL listener the mechanism must be one the listener enables
(UNSUPPORTED_SASL_MECHANISM with the enabled ones otherwise, and the
connection closes after the answer, as Kafka's does); v0 means the tokens
that follow come as bare frames, v1 that they come in SaslAuthenticate. An
authenticated connection may start again with the same mechanism when
sessions expire (``connections.max.reauth.ms``, KIP-368).

A listener without SASL answers UNSUPPORTED_SASL_MECHANISM with no
mechanism: a client configured for SASL against it fails at once with a
clear error ("Unsupported SASL mechanism: broker's supported mechanisms: ")
instead of a closed connection. (Kafka's answers ILLEGAL_SASL_STATE.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.sasl import SaslHandshakeResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_sasl_handshake(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    security = ctx.connection.security
    if not security.listener.protocol.sasl:
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[])
    code = security.handshake(request.mechanism, ctx.api_version)
    if code != ErrorCode.NONE:
        ctx.connection.close_after_answers()
    return SaslHandshakeResponse(error_code=code, mechanisms=list(security.listener.mechanisms))


HANDLERS = {ApiKey.SASL_HANDSHAKE: handle_sasl_handshake}
