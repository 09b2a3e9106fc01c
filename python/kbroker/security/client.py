"""The client's side of security: how kbroker's own connections to brokers are secured.

`ClientSecurity` says how to reach a listener: its protocol, the TLS context
(the truststore that checks the broker, a keystore when the client presents
a certificate) and the SASL mechanism with its user name and password. It is
made from the broker's settings for the connections between brokers
(`for_inter_broker`) or from a Kafka client properties file for the command
line (`from_client_properties`, the settings Kafka's own tools take with
``--command-config``).

`SaslClientExchange` is the client's half of PLAIN and SCRAM, token by token;
`sasl_requests` drives it over SaslHandshake v1 and SaslAuthenticate, with
whatever sends a request and returns its answer.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kbroker.config import BrokerConfig, ConfigError
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kbroker.security import tls
from kbroker.security.errors import AuthenticationFailed
from kbroker.security.jaas import parse_jaas
from kbroker.security.listeners import SecurityProtocol
from kbroker.security.plain import plain_client_message
from kbroker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from kbroker.security.scram import ScramClient

SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 1


@dataclass(frozen=True)
class ClientSecurity:
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)

    def server_hostname(self, host: str) -> str | None:
        """The name TLS checks the broker's certificate against (None: no TLS)."""
        return host if self.ssl_context is not None else None

    @classmethod
    def for_inter_broker(
        cls, config: BrokerConfig, listener: str, protocol: SecurityProtocol
    ) -> ClientSecurity:
        """How this broker reaches the others: through ``listener`` (the inter-broker one,
        with its ``listener.name.<l>.*`` settings), with
        ``sasl.mechanism.inter.broker.protocol`` and the listener's JAAS credentials."""
        from kbroker.security.authenticator import jaas_credentials

        def lookup(name: str) -> Any:
            return config.listener_value(listener, name)

        context = None
        if protocol.tls:
            context = tls.client_context(lookup, f"inter-broker listener {listener}")
        if not protocol.sasl:
            return cls(protocol, context)
        mechanism = config.get_str("sasl.mechanism.inter.broker.protocol").upper()
        user, password = jaas_credentials(config, listener, mechanism)
        listed = config.listener_value(listener, "sasl.enabled.mechanisms")
        enabled = [str(m).upper() for m in listed] if isinstance(listed, list) else []
        if mechanism not in enabled:
            # The other brokers' listener would refuse it: say so now, as Kafka does.
            raise ConfigError(
                f"sasl.mechanism.inter.broker.protocol: {mechanism} is not one of the "
                f"sasl.enabled.mechanisms of the inter-broker listener {listener} "
                f"({', '.join(enabled)})"
            )
        return cls(protocol, context, mechanism, user, password)

    @classmethod
    def from_client_properties(cls, props: Mapping[str, str], what: str) -> ClientSecurity:
        """Kafka client settings (security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config,
        or librdkafka's sasl.username and sasl.password)."""
        text = props.get("security.protocol", "PLAINTEXT").strip().upper()
        try:
            protocol = SecurityProtocol(text)
        except ValueError:
            raise ConfigError(
                f"{what}: security.protocol {text!r} is not a security protocol"
            ) from None

        def lookup(name: str) -> Any:
            value = props.get(name)
            if name == "ssl.enabled.protocols":
                return [p.strip() for p in (value or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
            if name == "ssl.cipher.suites":
                return [p.strip() for p in (value or "").split(",") if p.strip()]
            if name == "ssl.endpoint.identification.algorithm":
                return "https" if value is None else value.strip()
            if name in ("ssl.keystore.type", "ssl.truststore.type") and value is None:
                return "PEM"
            return None if value is None else value.strip()

        context = tls.client_context(lookup, what) if protocol.tls else None
        if not protocol.sasl:
            return cls(protocol, context)
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism != "PLAIN" and mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(
                f"{what}: sasl.mechanism {mechanism} is not supported (PLAIN, SCRAM-SHA-256, "
                "SCRAM-SHA-512)"
            )
        user, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            found = parse_jaas(f"{what}: sasl.jaas.config", jaas).credentials()
            if found is not None:
                user, password = found
        if not user or password is None:
            raise ConfigError(
                f"{what}: {mechanism} needs a user name and password (sasl.jaas.config with "
                "username and password, or sasl.username and sasl.password)"
            )
        return cls(protocol, context, mechanism, user, password)


class SaslClientExchange:
    """The client's tokens: `first()`, then `next(answer)` until it returns None."""

    def __init__(self, security: ClientSecurity) -> None:
        mechanism = security.mechanism or ""
        self._scram = (
            ScramClient(SCRAM_MECHANISMS[mechanism], security.username, security.password)
            if mechanism in SCRAM_MECHANISMS
            else None
        )
        self._security = security
        self._step = 0

    def first(self) -> bytes:
        if self._scram is None:
            return plain_client_message(self._security.username, self._security.password)
        return self._scram.first()

    def next(self, answer: bytes) -> bytes | None:
        self._step += 1
        if self._scram is None:
            return None
        if self._step == 1:
            return self._scram.final(answer)
        self._scram.verify(answer)
        return None


Send = Callable[[int, int, Any], Awaitable[Any]]


async def sasl_requests(security: ClientSecurity, send: Send) -> int:
    """Authenticates a fresh connection through ``send(api_key, version, body)``; returns
    the session lifetime the broker gave (ms, 0: none). Raises AuthenticationFailed."""
    mechanism = security.mechanism or ""
    handshake = await send(
        ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, SaslHandshakeRequest(mechanism=mechanism)
    )
    if handshake.error_code != ErrorCode.NONE:
        raise AuthenticationFailed(
            f"the broker refused SASL mechanism {mechanism} "
            f"({ErrorCode(handshake.error_code).name}; it offers "
            f"{', '.join(handshake.mechanisms) or 'none'})"
        )
    exchange = SaslClientExchange(security)
    token: bytes | None = exchange.first()
    lifetime = 0
    while token is not None:
        answer = await send(
            ApiKey.SASL_AUTHENTICATE,
            SASL_AUTHENTICATE_VERSION,
            SaslAuthenticateRequest(auth_bytes=token),
        )
        if answer.error_code != ErrorCode.NONE:
            raise AuthenticationFailed(
                f"{ErrorCode(answer.error_code).name}: {answer.error_message or 'no reason given'}"
            )
        lifetime = answer.session_lifetime_ms
        token = exchange.next(bytes(answer.auth_bytes))
    return lifetime


@dataclass(frozen=True)
class InterBrokerLink:
    """How this broker reaches the others: the listener of theirs it connects to (the
    inter-broker listener, which every broker of a cluster has), and how it is secured."""

    listener: str = "PLAINTEXT"
    security: ClientSecurity = field(default_factory=ClientSecurity)
