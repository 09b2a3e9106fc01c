"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: credentials, and both ends of the exchange.

A credential is what the broker keeps of a password: a random salt, an
iteration count, and two keys derived from the salted password
(``stored_key`` = H(HMAC(salted, "Client Key")), ``server_key`` =
HMAC(salted, "Server Key")). Neither key gives the password back; a stolen
``stored_key`` alone does not let anyone authenticate. Kafka's text form,
kept in ZooKeeper's ``/config/users/<user>`` under the mechanism's name, is
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.

`ScramServer` checks a client in three messages: the client's first message
(user name and nonce), the server's first (the nonce extended with the
server's own random part, the salt, the iterations), the client's final
(the whole nonce back, at the end of its nonce as Kafka 3.9 takes it, and its
proof); the server's final carries its own
signature, which the client checks. A wrong proof, an unknown user, a nonce
that is not this exchange's or a malformed message fails with
`AuthenticationFailed`, whose text never says which of them it was.
`ScramClient` is the other end, for the broker's own connections and tools.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.security.errors import AuthenticationFailed


@dataclass(frozen=True)
class ScramMechanism:
    name: str  # SCRAM-SHA-256
    hash_name: str  # sha256
    min_iterations: int = 4096
    max_iterations: int = 16384

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512")
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
# Kafka's wire codes for the mechanisms (DescribeUserScramCredentials, AlterUserScramCredentials).
MECHANISM_CODES = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salted_password: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        client_key = mechanism.hmac(salted_password, b"Client Key")
        return cls(
            salt=salt,
            stored_key=mechanism.hash(client_key),
            server_key=mechanism.hmac(salted_password, b"Server Key"),
            iterations=iterations,
        )

    @classmethod
    def from_password(
        cls,
        mechanism: ScramMechanism,
        password: str,
        iterations: int = 4096,
        salt: bytes | None = None,
    ) -> ScramCredential:
        salt = secrets.token_bytes(32) if salt is None else salt
        salted = mechanism.salted_password(password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    def to_kafka(self) -> str:
        """Kafka's text form (ScramCredentialUtils)."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        """Parses Kafka's text form; ValueError names what is wrong (never the values)."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key in fields:
                raise ValueError("not a SCRAM credential (salt=...,stored_key=...,...)")
            fields[key] = value
        missing = {"salt", "stored_key", "server_key", "iterations"} - fields.keys()
        if missing:
            raise ValueError(f"a SCRAM credential without {', '.join(sorted(missing))}")
        try:
            iterations = int(fields["iterations"])
            salt, stored, server = (
                base64.b64decode(fields[k], validate=True)
                for k in ("salt", "stored_key", "server_key")
            )
        except (ValueError, binascii.Error):
            raise ValueError("a SCRAM credential with a malformed field") from None
        if iterations <= 0:
            raise ValueError("a SCRAM credential with no iterations")
        return cls(salt, stored, server, iterations)


# -- the exchange ------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise AuthenticationFailed("malformed SCRAM message") from None


def _attributes(message: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` -> [(a, 1), (b, 2)]; each attribute a single letter."""
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise AuthenticationFailed("malformed SCRAM message")
        out.append((part[0], part[2:]))
    return out


def decode_saslname(name: str) -> str:
    """RFC 5802's escaping of user names: =2C is ',', =3D is '=' (any other '=' is an error)."""
    out = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise AuthenticationFailed("malformed SCRAM user name")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


_PRINTABLE_NONCE = frozenset(chr(c) for c in range(0x21, 0x7F)) - {","}


class ScramServer:
    """The broker's end of one SCRAM exchange.

    ``lookup(user)`` gives the user's credential for this mechanism, or None.
    `evaluate` takes each client message and returns the answer; after the
    second, `complete` is set and `user` is the authenticated name.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        max_nonce: int = 256,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._max_nonce = max_nonce
        self._state = 0
        self.complete = False
        self.user = ""
        # The user's credential, or for an unknown user a decoy no proof matches.
        self._credential: ScramCredential | None = None
        self._known = False
        self._nonce = ""
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM message") from None
        if self._state == 0:
            self._state = 1
            return self._first(message).encode()
        if self._state == 1:
            self._state = 2
            return self._final(message).encode()
        raise AuthenticationFailed("unexpected SCRAM message after the exchange ended")

    def _first(self, message: str) -> str:
        # gs2-header: "n,," or "n,a=<authzid>," (no channel binding: kafka does none).
        flag, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag not in ("n", "y"):
            raise AuthenticationFailed("malformed SCRAM client-first message")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise AuthenticationFailed("malformed SCRAM client-first message")
        user = decode_saslname(attrs[0][1])
        client_nonce = attrs[1][1]
        if not client_nonce or len(client_nonce) > self._max_nonce:
            raise AuthenticationFailed("malformed SCRAM nonce")
        if not set(client_nonce) <= _PRINTABLE_NONCE:
            raise AuthenticationFailed("malformed SCRAM nonce")
        # Extensions (tokenauth=...) are for delegation tokens, which kbroker does not issue.
        for key, _ in attrs[2:]:
            if key == "m":
                raise AuthenticationFailed("unsupported SCRAM extension")
        if authzid and (not authzid.startswith("a=") or decode_saslname(authzid[2:]) != user):
            raise AuthenticationFailed("SCRAM authorization id must be the user name")
        self.user = user
        credential = self._lookup(user) if user else None
        self._known = credential is not None
        if credential is None:
            # Unknown users go through the same exchange and fail at the proof, so the
            # answers do not tell which names exist.
            credential = _decoy(self.mechanism, user)
        self._credential = credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first

    def _final(self, message: str) -> str:
        without_proof, sep, proof_attr = message.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise AuthenticationFailed("malformed SCRAM client-final message")
        attrs = _attributes(without_proof)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise AuthenticationFailed("malformed SCRAM client-final message")
        if _unb64(attrs[0][1]) != self._gs2_header.encode():
            raise AuthenticationFailed("SCRAM channel binding does not match")
        # This exchange's whole nonce must end the client's (an old message replayed has
        # another): as Kafka 3.9 checks it, since librdkafka 2.0 sends its own nonce before
        # the combined one. What comes before is covered by the proof like the rest.
        nonce, expected = attrs[1][1].encode(), self._nonce.encode()
        if len(nonce) < len(expected) or not hmac.compare_digest(
            nonce[len(nonce) - len(expected) :], expected
        ):
            raise AuthenticationFailed("SCRAM nonce does not match")
        proof = _unb64(proof_attr[2:])
        credential = self._credential
        assert credential is not None
        mech = self.mechanism
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed("invalid SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        matches = hmac.compare_digest(mech.hash(client_key), credential.stored_key)
        if not matches or not self._known:
            raise AuthenticationFailed("invalid credentials")
        self.complete = True
        return "v=" + _b64(mech.hmac(credential.server_key, auth_message))


def _decoy(mechanism: ScramMechanism, user: str) -> ScramCredential:
    """A credential no password matches, with a salt stable per user name."""
    salt = mechanism.hmac(_DECOY_KEY, user.encode())[:32]
    key = secrets.token_bytes(mechanism.digest_size)
    return ScramCredential(salt, key, key, mechanism.min_iterations)


_DECOY_KEY = secrets.token_bytes(32)


class ScramClient:
    """The client's end: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    def __init__(self, mechanism: ScramMechanism, user: str, password: str) -> None:
        self.mechanism = mechanism
        self._user = user
        self._password = password.encode()
        self._nonce = secrets.token_urlsafe(24)
        self._first_bare = f"n={encode_saslname(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = dict(_attributes(text))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed("the server's SCRAM nonce does not extend ours")
        if not iterations.isdigit() or int(iterations) < self.mechanism.min_iterations:
            raise AuthenticationFailed("the server asked for too few SCRAM iterations")
        if int(iterations) > self.mechanism.max_iterations:
            raise AuthenticationFailed("the server asked for too many SCRAM iterations")
        mech = self.mechanism
        salted = mech.salted_password(self._password, _unb64(salt), int(iterations))
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = mech.hmac(salted, b"Client Key")
        signature = mech.hmac(mech.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise AuthenticationFailed(f"the broker refused: {text[2:]}")
        if not text.startswith("v=") or not hmac.compare_digest(
            _unb64(text[2:]), self._server_signature
        ):
            raise AuthenticationFailed("the broker's SCRAM signature is wrong")
