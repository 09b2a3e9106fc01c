"""Kafka's JAAS configuration text, as given in ``sasl.jaas.config`` settings.

``<LoginModule class> <flag> key="value" key2=value2 ... ;`` (one module):
what a listener's ``<mechanism>.sasl.jaas.config`` holds. kbroker reads the
options only: PLAIN's users (``user_<name>="<password>"``) and the broker's
own credentials for its connections to other brokers (``username``,
``password``). Parsing errors name the position, never a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kbroker.config import ConfigError

_TOKEN = re.compile(r'\s*(?:(;)|"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=))', re.S)
_FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    options: dict[str, str]

    @property
    def users(self) -> dict[str, str]:
        """PLAIN's users: ``user_<name>`` options."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and k[5:]}

    def credentials(self) -> tuple[str, str] | None:
        """The ``username`` and ``password`` options, when both are given."""
        user, password = self.options.get("username"), self.options.get("password")
        return None if user is None or password is None else (user, password)


def parse_jaas(setting: str, text: str) -> JaasConfig:
    tokens: list[tuple[str, str]] = []  # (kind, text): kind is ; " w =
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ConfigError(f"{setting}: cannot read the JAAS configuration at character {pos}")
        semi, quoted, word, eq = match.groups()
        if semi:
            tokens.append((";", ";"))
        elif quoted is not None:
            tokens.append(('"', re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            tokens.append(("w", word))
        elif eq:
            tokens.append(("=", "="))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if len(tokens) < 3 or tokens[0][0] != "w" or tokens[1][0] != "w" or tokens[-1][0] != ";":
        raise ConfigError(
            f"{setting}: expected '<LoginModule> required key=\"value\" ... ;' (one module)"
        )
    if tokens[1][1].lower() not in _FLAGS:
        raise ConfigError(f"{setting}: {tokens[1][1]!r} is not a JAAS control flag")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    if len(body) % 3:
        raise ConfigError(f"{setting}: expected key=value options")
    for i in range(0, len(body), 3):
        key, eq, value = body[i : i + 3]
        if key[0] != "w" or eq[0] != "=" or value[0] not in ('"', "w"):
            raise ConfigError(f"{setting}: expected key=value options")
        options[key[1]] = value[1]
    return JaasConfig(tokens[0][1], options)
