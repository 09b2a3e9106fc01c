"""The entities users' and clients' configs belong to, named as Kafka names them.

A `QuotaEntity` is a user, a client id, or a user's client id (Kafka's
``/config/users/<user>``, ``/config/clients/<client-id>`` and
``/config/users/<user>/clients/<client-id>``), each part either a name or the
default (``<default>``). Names are kept *sanitized*, as they appear in
ZooKeeper's paths and change notifications: Kafka's Sanitizer URL-encodes
them (UTF-8, every byte but ``A-Z a-z 0-9 . _ -`` as ``%XX``), so a user
named ``<default>`` (``%3Cdefault%3E``) is not the default, and no name holds
a ``/``. On the wire (the quota and SCRAM APIs) names are the plain ones and
the default is a null name.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# The entity name of defaults, in paths (Kafka's ZooKeeperInternals.DEFAULT_STRING).
DEFAULT = "<default>"
# The entity types of the quota APIs (Kafka's ClientQuotaEntity).
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


@functools.lru_cache(maxsize=4096)
def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: the name as it appears in a znode path."""
    out = []
    for byte in name.encode("utf-8", "surrogatepass"):
        out.append(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}")
    return "".join(out)


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (URL decoding, ``+`` being a space); ValueError for a
    ``%`` not followed by two hex digits, as Java's URLDecoder refuses it."""
    out = bytearray()
    i = 0
    while i < len(name):
        c = name[i]
        if c == "%":
            digits = name[i + 1 : i + 3]
            if len(digits) != 2 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"{name!r} is not a URL-encoded name")
            out.append(int(digits, 16))
            i += 3
            continue
        out += b" " if c == "+" else c.encode("utf-8", "surrogatepass")
        i += 1
    return out.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A user, a client id, or both; each given part a sanitized name or `DEFAULT`."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id, or both")

    @classmethod
    def of(
        cls, user: str | None = None, client_id: str | None = None, *, named: tuple[bool, bool]
    ) -> QuotaEntity:
        """From plain names as the wire gives them: ``named`` says which parts are present;
        a present part whose name is None is the default."""
        return cls(
            _from_plain(user) if named[0] else None,
            _from_plain(client_id) if named[1] else None,
        )

    @property
    def path(self) -> str:
        """Where its configs live under /config: users/<u>, clients/<c>, users/<u>/clients/<c>
        (also the entity path of its change notifications)."""
        if self.user is not None and self.client_id is not None:
            return f"users/{self.user}/clients/{self.client_id}"
        if self.user is not None:
            return f"users/{self.user}"
        assert self.client_id is not None
        return f"clients/{self.client_id}"

    @classmethod
    def from_path(cls, entity_type: str, name: str) -> QuotaEntity:
        """The entity of a change notification (``users``, ``alice/clients/app``) or a znode;
        ValueError when it names none."""
        parts = name.split("/")
        for part in parts[::2]:
            _check_sanitized(part)
        if entity_type == "clients" and len(parts) == 1:
            return cls(None, parts[0])
        if entity_type == "users" and len(parts) == 1:
            return cls(parts[0], None)
        if entity_type == "users" and len(parts) == 3 and parts[1] == "clients":
            return cls(parts[0], parts[2])
        raise ValueError(f"{entity_type}/{name} is not a user or client config entity")

    @property
    def plain_user(self) -> str | None:
        """The user's plain name; None for the default (and when there is no user part)."""
        return _to_plain(self.user)

    @property
    def plain_client_id(self) -> str | None:
        return _to_plain(self.client_id)

    def wire_entries(self) -> list[tuple[str, str | None]]:
        """(entity type, plain name or None for the default), as the quota APIs send them."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, self.plain_user))
        if self.client_id is not None:
            out.append((CLIENT_ID, self.plain_client_id))
        return out

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append("default user" if self.user == DEFAULT else f"user {self.plain_user!r}")
        if self.client_id is not None:
            parts.append(
                "default client-id"
                if self.client_id == DEFAULT
                else f"client-id {self.plain_client_id!r}"
            )
        return ", ".join(parts)


def _from_plain(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def _to_plain(name: str | None) -> str | None:
    if name is None or name == DEFAULT:
        return None
    return desanitize(name)


def _check_sanitized(part: str) -> None:
    if not part:
        raise ValueError("an empty entity name")
    if part != DEFAULT:
        desanitize(part)
