"""Declarations of the SASL APIs: SaslHandshake and SaslAuthenticate."""

from __future__ import annotations

from ..schema import BYTES, INT16, INT64, STRING, Array, F, message

SaslHandshakeRequest = message(
    "SaslHandshakeRequest",
    F("mechanism", STRING),
)

SaslHandshakeResponse = message(
    "SaslHandshakeResponse",
    F("error_code", INT16),
    F("mechanisms", Array(STRING)),
)

SaslAuthenticateRequest = message(
    "SaslAuthenticateRequest",
    F("auth_bytes", BYTES),
)

SaslAuthenticateResponse = message(
    "SaslAuthenticateResponse",
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("auth_bytes", BYTES),
    F("session_lifetime_ms", INT64, "1+"),
)
