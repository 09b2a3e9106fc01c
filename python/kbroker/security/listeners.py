"""Listeners: where the broker listens, how each listener is secured, what clients are told.

Kafka's settings, read as Kafka reads them:

- ``listeners``: ``NAME://HOST:PORT`` entries (an empty host listens on every
  interface), names unique, ports unique (port 0: any free port).
- ``listener.security.protocol.map``: each name's security protocol
  (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
- ``advertised.listeners``: what clients are told, per listener name; a
  listener not named there is advertised at its own address (its host name
  when it listens on the default interface, an error on 0.0.0.0).
- ``inter.broker.listener.name``, or else ``security.inter.broker.protocol``:
  the listener other brokers reach this one through (it must be advertised;
  a single node with neither set takes its first listener).

`ListenerSet.from_config` checks all of it at once and raises ConfigError
with one line naming what is wrong.
"""

from __future__ import annotations

import enum
import re
import socket
from dataclasses import dataclass, replace

from kbroker.config import BrokerConfig, ConfigError


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


_ENTRY = re.compile(r"^([A-Za-z0-9_-]+)://(\[[^\]]*\]|[^:/\[\]]*):(\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Listener:
    """One listener: its name (upper-case, as Kafka keeps it), address and protocol."""

    name: str
    host: str
    port: int
    protocol: SecurityProtocol

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...`` -> {NAME: protocol}."""
    out: dict[str, SecurityProtocol] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _NAME.match(name):
            raise ConfigError(
                f"listener.security.protocol.map: expected NAME:PROTOCOL entries, got {item!r}"
            )
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: {name} is listed twice")
        try:
            out[name] = SecurityProtocol(protocol)
        except ValueError:
            raise ConfigError(
                f"listener.security.protocol.map: {protocol!r} is not a security protocol "
                f"({', '.join(p.value for p in SecurityProtocol)})"
            ) from None
    return out


def parse_listeners(
    setting: str, text: str, protocols: dict[str, SecurityProtocol]
) -> list[Listener]:
    """``NAME://HOST:PORT,...`` -> listeners, each with its protocol from ``protocols``."""
    out: list[Listener] = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        match = _ENTRY.match(item)
        if match is None:
            raise ConfigError(f"{setting}: expected NAME://HOST:PORT entries, got {item!r}")
        name, host, port_text = match.groups()
        name = name.upper()
        port = int(port_text)
        if port > 65535:
            raise ConfigError(f"{setting}: port {port} of {item!r} is not a TCP port")
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(
                f"{setting}: listener {name} has no security protocol: add {name}:<PROTOCOL> "
                "to listener.security.protocol.map"
            )
        if any(existing.name == name for existing in out):
            raise ConfigError(f"{setting}: listener {name} is listed twice")
        out.append(Listener(name, host.strip("[]"), port, protocol))
    if not out:
        raise ConfigError(f"{setting}: no listener given")
    return out


@dataclass(frozen=True)
class ListenerSet:
    """Every listener of a broker, what each advertises, and the inter-broker one."""

    listeners: tuple[Listener, ...]
    # name -> what clients of that listener are told (host and port)
    advertised: dict[str, Listener]
    inter_broker: str

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ListenerSet:
        protocols = parse_protocol_map(config.get_str("listener.security.protocol.map"))
        bound = parse_listeners("listeners", config.get_str("listeners"), protocols)
        ports = [lst.port for lst in bound if lst.port != 0]
        if len(ports) != len(set(ports)):
            raise ConfigError("listeners: two listeners share a port")
        advertised = {lst.name: lst for lst in bound}
        text = config.get_optional_str("advertised.listeners")
        if text:
            for lst in parse_listeners("advertised.listeners", text, protocols):
                if lst.name not in advertised:
                    raise ConfigError(
                        f"advertised.listeners: {lst.name} is not one of the listeners "
                        f"({', '.join(advertised)})"
                    )
                advertised[lst.name] = lst
        for name, lst in advertised.items():
            if lst.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"advertised.listeners: listener {name} listens on every interface "
                    f"({lst.url}): say which host clients should use for it"
                )
            if not lst.host:
                # As Kafka: a listener on the default interface is advertised by host name.
                advertised[name] = replace(lst, host=socket.getfqdn())
        explicit = config.get_optional_str("inter.broker.listener.name")
        if explicit is not None and not config.is_default("security.inter.broker.protocol"):
            raise ConfigError(
                "inter.broker.listener.name and security.inter.broker.protocol are both set: "
                "set only one"
            )
        if explicit is None:
            name = config.get_str("security.inter.broker.protocol")
            setting = "security.inter.broker.protocol"
            if (
                name not in advertised
                and config.is_default(setting)
                and not config.get_optional_str("zookeeper.connect")
            ):
                # A single node has no other broker: its first listener stands in.
                name = bound[0].name
        else:
            name = explicit.upper()
            setting = "inter.broker.listener.name"
        if name not in advertised:
            raise ConfigError(
                f"{setting}: {name} is not one of the listeners ({', '.join(advertised)}); "
                "brokers reach each other through it"
            )
        return cls(tuple(bound), advertised, name)

    def bound(self, name: str, host: str, port: int) -> ListenerSet:
        """This set once listener ``name`` is bound to ``host:port`` (port 0 made real)."""
        listeners = tuple(
            replace(lst, host=host, port=port) if lst.name == name else lst
            for lst in self.listeners
        )
        advertised = dict(self.advertised)
        if advertised[name].port == 0:
            advertised[name] = replace(advertised[name], port=port)
        return ListenerSet(listeners, advertised, self.inter_broker)

    def get(self, name: str) -> Listener:
        return next(lst for lst in self.listeners if lst.name == name)
