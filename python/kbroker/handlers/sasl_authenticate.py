"""SaslAuthenticate (36): without a SASL listener there is no authentication in progress,
so it is answered ILLEGAL_SASL_STATE, as Kafka answers one out of turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.sasl import SaslAuthenticateResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_sasl_authenticate(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SASL is not supported yet: this listener takes no SASL authentication",
        auth_bytes=b"",
        session_lifetime_ms=0,
    )


HANDLERS = {ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate}
