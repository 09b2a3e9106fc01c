"""`GroupConfigs`, what the coordinator asks of a group's own configs, and the checks of a
set of overrides that kafka-configs cannot reach with Kafka's default bounds (the clients'
view, proven against Kafka 4.1.1, is tests/compat/test_group_configs.py)."""

from __future__ import annotations

import pytest

from kbroker.config import BrokerConfig, ConfigError
from kbroker.coordinator.group_configs import (
    GROUP_CONFIGS,
    GroupConfigError,
    GroupConfigs,
    check_group_configs,
)


def test_a_group_gets_its_override_or_the_brokers_default() -> None:
    config = BrokerConfig.from_strings(
        [
            ("group.consumer.session.timeout.ms", "50000"),
            ("group.consumer.heartbeat.interval.ms", "6000"),
        ]
    )
    configs = GroupConfigs(config)
    assert configs.consumer_session_timeout_ms("g") == 50000
    assert configs.consumer_heartbeat_interval_ms("g") == 6000
    configs.update("g", {"consumer.session.timeout.ms": "55000"})
    assert configs.consumer_session_timeout_ms("g") == 55000
    assert configs.consumer_heartbeat_interval_ms("g") == 6000
    assert configs.consumer_session_timeout_ms("other") == 50000
    configs.update("g", {})
    assert configs.consumer_session_timeout_ms("g") == 50000
    assert configs.configured_groups() == ["g"]


def test_an_unreadable_stored_override_gives_the_default() -> None:
    configs = GroupConfigs(BrokerConfig())
    configs.update("g", {"consumer.heartbeat.interval.ms": "soon"})
    assert configs.consumer_heartbeat_interval_ms("g") == 5000


def test_the_session_timeout_must_exceed_the_heartbeat_interval() -> None:
    config = BrokerConfig.from_strings(
        [
            ("group.consumer.min.session.timeout.ms", "10000"),
            ("group.consumer.max.heartbeat.interval.ms", "30000"),
        ]
    )
    with pytest.raises(GroupConfigError) as refused:
        check_group_configs(
            config,
            {"consumer.session.timeout.ms": "20000", "consumer.heartbeat.interval.ms": "20000"},
        )
    assert str(refused.value) == (
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
    )
    assert check_group_configs(
        config, {"consumer.session.timeout.ms": "+20001", "consumer.heartbeat.interval.ms": "20000"}
    ) == {"consumer.session.timeout.ms": "20001", "consumer.heartbeat.interval.ms": "20000"}


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("earliest", True),
        ("LATEST", True),
        ("by_duration:PT1H", True),
        ("by_duration:P1DT2H3M4.5S", True),
        ("by_duration:P1D", True),
        ("by_duration:PT", False),
        ("by_duration:P", False),
        ("by_duration:-PT1H", False),
        ("by_duration:PT-1H", False),
        ("by_duration:", False),
        ("newest", False),
    ],
)
def test_share_auto_offset_reset(text: str, ok: bool) -> None:
    overrides = {"share.auto.offset.reset": text}
    if ok:
        check_group_configs(BrokerConfig(), overrides)
    else:
        with pytest.raises(GroupConfigError):
            check_group_configs(BrokerConfig(), overrides)


def test_the_brokers_bounds_must_hold_its_defaults() -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_strings([("group.consumer.session.timeout.ms", "70000")])
    assert str(refused.value) == (
        "group.consumer.session.timeout.ms (70000) must lie between "
        "group.consumer.min.session.timeout.ms (45000) and "
        "group.consumer.max.session.timeout.ms (60000)"
    )
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_strings([("group.consumer.min.heartbeat.interval.ms", "6000")])
    assert str(refused.value).startswith("group.consumer.heartbeat.interval.ms (5000)")


def test_kafkas_names() -> None:
    assert sorted(GROUP_CONFIGS) == [
        "consumer.heartbeat.interval.ms",
        "consumer.session.timeout.ms",
        "share.auto.offset.reset",
        "share.heartbeat.interval.ms",
        "share.isolation.level",
        "share.record.lock.duration.ms",
        "share.session.timeout.ms",
        "streams.heartbeat.interval.ms",
        "streams.num.standby.replicas",
        "streams.session.timeout.ms",
    ]
