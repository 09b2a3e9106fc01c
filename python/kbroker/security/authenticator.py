"""Authentication of a listener's connections: TLS client certificates and SASL.

`ListenerSecurity` is made once per listener from the settings: its
protocol, its TLS context, the SASL mechanisms it offers and what they
check against (PLAIN's users from the listener's JAAS configuration,
SCRAM's credentials from the `CredentialCache`). Each connection gets a
`ConnectionSecurity` from it, which says who the connection is and where
its SASL exchange stands, as Kafka's SaslServerAuthenticator does:

- A PLAINTEXT or SSL connection is authenticated from the start (TLS: its
  certificate's mapped name, or User:ANONYMOUS without one).
- A SASL connection may send only ApiVersions and SaslHandshake until its
  handshake names an enabled mechanism, then only SaslAuthenticate until the
  exchange is done (SaslHandshake v0 clients send the mechanism's tokens as
  bare frames instead). Anything else closes the connection, as does a
  failed exchange (after its error answer and
  ``connection.failed.authentication.delay.ms``).
- Until it is authenticated a connection's frames are bounded by
  ``sasl.server.max.receive.size`` and the whole of it by the authentication
  timeout.
- With ``connections.max.reauth.ms`` a session lasts that long (KIP-368): the
  client authenticates again on the same connection (same mechanism, same
  principal) before it ends, or its next other request closes the connection.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kbroker.config import JAAS_MECHANISMS, BrokerConfig, ConfigError
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.security import tls
from kbroker.security.certificates import CertificateNames
from kbroker.security.credentials import CredentialCache
from kbroker.security.errors import AuthenticationFailed
from kbroker.security.jaas import parse_jaas
from kbroker.security.listeners import Listener, SecurityProtocol
from kbroker.security.plain import PlainServer
from kbroker.security.principal import (
    ANONYMOUS,
    PrincipalMapper,
    distinguished_name,
    user,
)
from kbroker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from kbroker.security.scram import ScramServer

log = logging.getLogger(__name__)

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
# The longest a connection may take to finish its TLS handshake and its SASL exchange
# (shorter when connections.max.idle.ms is).
AUTHENTICATION_TIMEOUT_S = 10.0

_BEFORE_HANDSHAKE = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE})
_SASL = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class SaslServer(Protocol):
    complete: bool
    user: str

    def evaluate(self, token: bytes) -> bytes: ...


@dataclass
class ListenerSecurity:
    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    # The names the certificate the listener presents is for (a new one must keep them).
    certificate: CertificateNames | None = None
    mechanisms: tuple[str, ...] = ()
    # PLAIN's users and passwords (the listener's plain.sasl.jaas.config).
    plain_users: Mapping[str, str] = field(default_factory=dict)
    credentials: CredentialCache = field(default_factory=CredentialCache)
    principal_mapper: PrincipalMapper | None = None
    max_receive_size: int = 524288
    reauth_ms: int = 0
    failed_delay_ms: int = 100
    auth_timeout_s: float = AUTHENTICATION_TIMEOUT_S

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def protocol(self) -> SecurityProtocol:
        return self.listener.protocol

    @classmethod
    def from_config(
        cls, config: BrokerConfig, listener: Listener, credentials: CredentialCache
    ) -> ListenerSecurity:
        name = listener.name

        def lookup(setting: str) -> Any:
            return config.listener_value(name, setting)

        what = f"listener {name}"
        out = cls(
            listener,
            credentials=credentials,
            failed_delay_ms=config.get_int("connection.failed.authentication.delay.ms"),
            auth_timeout_s=min(
                AUTHENTICATION_TIMEOUT_S, config.get_int("connections.max.idle.ms") / 1000
            ),
        )
        protocol = listener.protocol
        if protocol.tls:
            if protocol.sasl:
                # SASL authenticates: a client certificate is asked for only when the
                # listener itself says so (Kafka ignores the broker-wide ssl.client.auth here).
                own = config.given_names()
                prefix = f"listener.name.{name.lower()}.ssl.client.auth"

                def sasl_lookup(setting: str) -> Any:
                    if setting == "ssl.client.auth" and prefix not in own:
                        return "none"
                    return lookup(setting)

                out.ssl_context, out.certificate = tls.server_context(sasl_lookup, what)
            else:
                out.ssl_context, out.certificate = tls.server_context(lookup, what)
                out.principal_mapper = PrincipalMapper(str(lookup("ssl.principal.mapping.rules")))
        if protocol.sasl:
            enabled = tuple(str(m).upper() for m in lookup("sasl.enabled.mechanisms"))
            unsupported = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
            if unsupported or not enabled:
                raise ConfigError(
                    f"{what}: sasl.enabled.mechanisms: {', '.join(unsupported) or 'none given'}: "
                    f"kbroker supports {', '.join(SUPPORTED_MECHANISMS)}"
                )
            out.mechanisms = enabled
            if "PLAIN" in enabled:
                setting = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
                text = config.value(setting)
                if not text:
                    raise ConfigError(
                        f"{what} enables PLAIN but {setting} is not set "
                        '(PlainLoginModule required user_<name>="<password>" ...;)'
                    )
                out.plain_users = parse_jaas(setting, str(text)).users
            out.max_receive_size = int(lookup("sasl.server.max.receive.size"))
            out.reauth_ms = int(lookup("connections.max.reauth.ms"))
        return out

    def new_connection(self) -> ConnectionSecurity:
        return ConnectionSecurity(self)


def jaas_credentials(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    """The user name and password the broker authenticates with on ``listener``
    (``listener.name.<l>.<mechanism>.sasl.jaas.config``'s username and password)."""
    if mechanism.lower() not in JAAS_MECHANISMS:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol: {mechanism} is not supported "
            f"({', '.join(SUPPORTED_MECHANISMS)})"
        )
    setting = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.value(setting)
    found = parse_jaas(setting, str(text)).credentials() if text else None
    if found is None:
        raise ConfigError(
            f"{setting} must give the broker's own username and password for the connections "
            f"between brokers on listener {listener}"
        )
    return found


class ConnectionSecurity:
    """One connection's identity and SASL state (see the module docstring)."""

    __slots__ = (
        "_server",
        "authenticated",
        "expires",
        "handshake_version",
        "listener",
        "mechanism",
        "principal",
        "raw_tokens",
        "reauthenticating",
    )

    def __init__(self, listener: ListenerSecurity) -> None:
        self.listener = listener
        self.principal = ANONYMOUS
        self.authenticated = not listener.protocol.sasl
        self.mechanism: str | None = None
        self.handshake_version: int | None = None
        self.raw_tokens = False  # SaslHandshake v0: the next frames are bare SASL tokens
        self.expires = 0.0  # monotonic; 0: the session does not expire
        self.reauthenticating = False
        self._server: SaslServer | None = None

    # -- TLS --------------------------------------------------------------------------

    def tls_established(self, peer_certificate: Mapping[str, Any] | None) -> None:
        """Takes the client's certificate (SSL listeners): its mapped name is the
        principal. Raises AuthenticationFailed when no mapping rule matches."""
        mapper = self.listener.principal_mapper
        if mapper is None or not peer_certificate:
            return
        name = distinguished_name(peer_certificate.get("subject"))
        mapped = mapper.name_of(name)
        if mapped is None:
            raise AuthenticationFailed(
                f"no ssl.principal.mapping.rules rule matches the certificate name {name!r}"
            )
        self.principal = user(mapped)

    # -- what may be sent -------------------------------------------------------------

    def max_frame(self, authenticated_max: int) -> int:
        return authenticated_max if self.authenticated else self.listener.max_receive_size

    def refusal(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` closes the connection now, or None when it may go on."""
        if self.authenticated and not self.reauthenticating:
            if self.expires and api_key not in _SASL and time.monotonic() >= self.expires:
                return "its SASL session expired (connections.max.reauth.ms) unrenewed"
            return None
        if self.handshake_version is None:
            if api_key in _BEFORE_HANDSHAKE:
                return None
        elif api_key == ApiKey.SASL_AUTHENTICATE and self.handshake_version >= 1:
            return None
        if self.reauthenticating:
            return (
                None
                if api_key not in _SASL
                else "an out-of-order SASL request while re-authenticating"
            )
        return f"{_api_name(api_key)} request before authentication"

    # -- SASL ---------------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> int:
        """SaslHandshake: returns its error code (the handshake's answer lists the listener's
        mechanisms). A connection that gets an error is closed after the answer."""
        listener = self.listener
        if not listener.protocol.sasl:
            return ErrorCode.ILLEGAL_SASL_STATE
        if self.authenticated:
            # KIP-368: a new exchange on an authenticated connection, same mechanism.
            if version < 1 or mechanism != self.mechanism or not listener.reauth_ms:
                return ErrorCode.ILLEGAL_SASL_STATE
            self.reauthenticating = True
        elif self.handshake_version is not None:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in listener.mechanisms:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.handshake_version = version
        self.raw_tokens = version == 0
        if mechanism == "PLAIN":
            self._server = PlainServer(listener.plain_users.get)
        else:
            credentials = listener.credentials
            self._server = ScramServer(
                SCRAM_MECHANISMS[mechanism], lambda name: credentials.get(mechanism, name)
            )
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> bytes:
        """One SASL token in, the answer out. Raises AuthenticationFailed when the exchange
        fails; once it completes the connection is authenticated."""
        server = self._server
        if server is None:
            raise AuthenticationFailed("SaslAuthenticate without a handshake")
        answer = server.evaluate(token)
        if server.complete:
            principal = user(server.user)
            if self.reauthenticating and principal != self.principal:
                raise AuthenticationFailed("re-authenticated as another principal")
            self.principal = principal
            self.authenticated = True
            self.reauthenticating = False
            self.raw_tokens = False
            self._server = None
            reauth = self.listener.reauth_ms
            self.expires = time.monotonic() + reauth / 1000 if reauth else 0.0
            if self.handshake_version is not None and self.handshake_version >= 1:
                self.handshake_version = None
        return answer

    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client of its session (0: no expiry)."""
        if not self.expires:
            return 0
        return max(int((self.expires - time.monotonic()) * 1000), 1)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"
