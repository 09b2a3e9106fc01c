"""Kafka's listener settings, read as Kafka reads them, and refused in one line when wrong."""

from __future__ import annotations

import socket

import pytest

from kbroker.config import BrokerConfig, ConfigError
from kbroker.security.listeners import ListenerSet, SecurityProtocol


def listeners(*pairs: tuple[str, str]) -> ListenerSet:
    return ListenerSet.from_config(BrokerConfig.from_strings(pairs))


def test_one_plaintext_listener_by_default() -> None:
    ls = listeners()
    (only,) = ls.listeners
    assert (only.name, only.host, only.port, only.protocol) == (
        "PLAINTEXT",
        "127.0.0.1",
        9092,
        SecurityProtocol.PLAINTEXT,
    )
    assert ls.advertised == {"PLAINTEXT": only}
    assert ls.inter_broker == "PLAINTEXT"


def test_named_listeners_with_a_protocol_map_and_advertised_addresses() -> None:
    ls = listeners(
        ("listeners", "CLIENT://127.0.0.1:9092,internal://[::1]:9093"),
        ("listener.security.protocol.map", "CLIENT:SASL_SSL,INTERNAL:SSL"),
        ("advertised.listeners", "CLIENT://localhost:19092"),
        ("inter.broker.listener.name", "internal"),
    )
    assert [(lst.name, lst.host, lst.port, lst.protocol) for lst in ls.listeners] == [
        ("CLIENT", "127.0.0.1", 9092, SecurityProtocol.SASL_SSL),
        ("INTERNAL", "::1", 9093, SecurityProtocol.SSL),
    ]
    assert (ls.advertised["CLIENT"].host, ls.advertised["CLIENT"].port) == ("localhost", 19092)
    assert ls.advertised["INTERNAL"].url == "INTERNAL://[::1]:9093"
    assert ls.inter_broker == "INTERNAL"
    assert ls.advertised["CLIENT"].protocol.tls and ls.advertised["CLIENT"].protocol.sasl


def test_a_listener_on_the_default_interface_is_advertised_by_host_name() -> None:
    ls = listeners(("listeners", "PLAINTEXT://:9092"))
    assert ls.advertised["PLAINTEXT"].host == socket.getfqdn()


def test_a_port_bound_later_is_advertised() -> None:
    ls = listeners(("listeners", "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")).bound(
        "SSL", "127.0.0.1", 4321
    )
    assert ls.get("SSL").port == ls.advertised["SSL"].port == 4321
    assert ls.get("PLAINTEXT").port == 0


def test_a_single_node_uses_its_first_listener_between_brokers() -> None:
    assert listeners(("listeners", "SSL://127.0.0.1:9093")).inter_broker == "SSL"


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("listeners", "PLAINTEXT://0.0.0.0:9092")], "say which host clients should use"),
        ([("listeners", "FOO://127.0.0.1:1")], "listener FOO has no security protocol"),
        ([("listeners", "SSL://h:1,PLAINTEXT://h:1")], "two listeners share a port"),
        ([("listeners", "SSL://h:1,SSL://h:2")], "listener SSL is listed twice"),
        ([("listeners", "PLAINTEXT://h")], "expected NAME://HOST:PORT"),
        ([("listeners", "PLAINTEXT://h:99999")], "is not a TCP port"),
        ([("listeners", "")], "no listener given"),
        (
            [("listener.security.protocol.map", "A:TLS")],
            "'TLS' is not a security protocol",
        ),
        (
            [("advertised.listeners", "SSL://h:1")],
            "SSL is not one of the listeners",
        ),
        (
            [
                ("listeners", "SSL://127.0.0.1:9093"),
                ("zookeeper.connect", "127.0.0.1:2181"),
            ],
            "security.inter.broker.protocol: PLAINTEXT is not one of the listeners",
        ),
        (
            [
                ("inter.broker.listener.name", "PLAINTEXT"),
                ("security.inter.broker.protocol", "SSL"),
            ],
            "set only one",
        ),
    ],
)
def test_wrong_listener_settings_are_refused_in_one_line(
    pairs: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        listeners(*pairs)
    assert "\n" not in str(info.value)


def test_listener_scoped_settings_are_read_for_their_listener_first() -> None:
    config = BrokerConfig.from_strings(
        [
            ("ssl.client.auth", "requested"),
            ("listener.name.INTERNAL.ssl.client.auth", "required"),
            ("listener.name.client.SCRAM-SHA-256.sasl.jaas.config", "x"),
        ]
    )
    assert config.listener_value("INTERNAL", "ssl.client.auth") == "required"
    assert config.listener_value("CLIENT", "ssl.client.auth") == "requested"
    assert config.value("listener.name.client.scram-sha-256.sasl.jaas.config") == "x"
    for bad in ("listener.name.x.log.dirs", "listener.name.x.gssapi.sasl.jaas.config"):
        with pytest.raises(ConfigError, match="unknown setting"):
            BrokerConfig.from_strings([(bad, "x")])
