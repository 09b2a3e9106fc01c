"""Principals: who a connection is, as Kafka names them ("User:alice").

- SASL: ``User:<the authenticated name>``.
- TLS with a client certificate: ``User:<name>``, the name got from the
  certificate's distinguished name (RFC 2253, as Java prints it:
  ``CN=alice,OU=eng,O=Acme,C=US``) through ``ssl.principal.mapping.rules``.
- Otherwise ``User:ANONYMOUS``.

Mapping rules are Kafka's: a comma-separated list of
``RULE:<pattern>/<replacement>/[L|U]`` and ``DEFAULT``, tried in order; the
first whose pattern matches the whole name gives the user name (``$1`` ...
for the pattern's groups, L or U to lower- or upper-case it); DEFAULT keeps
the whole distinguished name. A name no rule matches cannot authenticate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kbroker.config import ConfigError

ANONYMOUS = "User:ANONYMOUS"

# X.500 attribute names as Python's ssl module gives them -> RFC 2253 keywords Java uses.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Attributes Java prints as OID=#<DER hex> (the ones a certificate commonly has).
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}


def user(name: str) -> str:
    return f"User:{name}"


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;=' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    data = value.encode()
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        raw = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(raw)]) + raw
    return "#" + (bytes([tag]) + length + data).hex()


def distinguished_name(subject: Any) -> str:
    """The subject of ``SSLObject.getpeercert()`` as an RFC 2253 name, Java's way (the
    last RDN first)."""
    rdns = []
    for rdn in reversed(subject or ()):
        parts = []
        for attr, value in rdn:
            if attr in _KEYWORDS:
                parts.append(f"{_KEYWORDS[attr]}={_escape(value)}")
            elif attr in _OIDS:
                oid, tag = _OIDS[attr]
                parts.append(f"{oid}={_der_hex(tag, value)}")
            else:
                parts.append(f"{attr}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L", "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        # Java's $1 group references.
        out = re.sub(r"\$(\d+)", lambda m: match.group(int(m.group(1))) or "", self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``."""

    def __init__(self, rules: str) -> None:
        self._rules: list[_Rule] = []
        pos = 0
        text = rules.strip()
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.end() == pos:
                raise ConfigError(
                    f"ssl.principal.mapping.rules: cannot read the rule at character {pos} "
                    "(expected DEFAULT or RULE:pattern/replacement/[LU])"
                )
            default, pattern, replacement, case = match.groups()
            if default:
                self._rules.append(_Rule(None, "", ""))
            else:
                try:
                    compiled = re.compile(pattern.replace("\\/", "/"))
                except re.error as exc:
                    raise ConfigError(
                        f"ssl.principal.mapping.rules: {pattern!r} is not a regular expression: "
                        f"{exc}"
                    ) from None
                self._rules.append(_Rule(compiled, replacement.replace("\\/", "/"), case))
            pos = match.end()
        if not self._rules:
            self._rules.append(_Rule(None, "", ""))

    def name_of(self, distinguished: str) -> str | None:
        """The user name for a certificate's name, or None when no rule matches."""
        for rule in self._rules:
            out = rule.apply(distinguished)
            if out is not None:
                return out
        return None
