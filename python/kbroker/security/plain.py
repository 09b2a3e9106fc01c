"""SASL PLAIN (RFC 4616): the broker's check of a user name and password, and the client's message.

The client sends ``authzid NUL authcid NUL password`` once; the broker
compares the password with the user's in its listener's JAAS configuration
(``user_<name>="<password>"``) in constant time. An authorization id other
than the user's own is refused, as Kafka refuses it.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from kbroker.security.errors import AuthenticationFailed


class PlainServer:
    def __init__(self, password_of: Callable[[str], str | None]) -> None:
        self._password_of = password_of
        self.complete = False
        self.user = ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("unexpected PLAIN message after the exchange ended")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN message")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed PLAIN message") from None
        if not user or not password:
            raise AuthenticationFailed("PLAIN message without a user name or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("PLAIN authorization id must be the user name")
        expected = self._password_of(user)
        # Unknown users are compared against a password too: the same work either way.
        given = password.encode()
        ok = hmac.compare_digest(given, (expected or "\0" * len(password)).encode())
        if expected is None or not ok:
            raise AuthenticationFailed("invalid credentials")
        self.user = user
        self.complete = True
        return b""


def plain_client_message(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()
