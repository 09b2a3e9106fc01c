"""Settings kbroker lists but does not support yet are refused, never accepted and ignored:
at start (settings file, --set) with one line and exit code 1, and through the
admin APIs (CreateTopics, AlterConfigs, IncrementalAlterConfigs) with INVALID_CONFIG."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kbroker.config import (
    BROKER,
    KAFKA_ONLY_SETTINGS,
    BrokerConfig,
    ConfigError,
    UnsupportedSetting,
    parse_stored_topic_configs,
    parse_topic_configs,
)
from tests.broker.test_admin import WAIT, admin, create, error_of, incremental, topic_configs
from tests.helpers import KBROKER, BrokerProcess

pytestmark = pytest.mark.timeout(120)

UNSUPPORTED = {
    "cluster.id": "ZlTTKn5WQraMKYmHHU1PAg",
    "log.preallocate": "true",
    "ssl.keystore.type": "JKS",
    "ssl.truststore.type": "PKCS12",
}


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [*KBROKER, "serve", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


def test_the_table_marks_what_is_refused() -> None:
    # Of the settings kbroker implements (Kafka's others follow config.refusal_reason,
    # tested in tests/broker/test_config_catalogue.py and tests/test_cli.py).
    kafka_only = {s.name for s in KAFKA_ONLY_SETTINGS}
    refused = {s.name for s in BROKER.values() if not s.supported and s.name not in kafka_only}
    assert refused == set(UNSUPPORTED)
    for name, text in UNSUPPORTED.items():
        with pytest.raises(UnsupportedSetting, match=rf"^{name}: .*not supported yet"):
            BrokerConfig.from_strings([(name, text)])
        config = BrokerConfig()
        with pytest.raises(UnsupportedSetting):
            config.set(name, text) if not BROKER[name].read_only else BROKER[name].parse(text)
    # What today's code honours is taken.
    config = BrokerConfig.from_strings(
        [("log.preallocate", "false"), ("unclean.leader.election.enable", "true")]
    )
    assert config.get_bool("unclean.leader.election.enable")
    assert parse_topic_configs({"preallocate": "false", "unclean.leader.election.enable": "true"})
    with pytest.raises(UnsupportedSetting, match=r"^preallocate: preallocation is not supported"):
        parse_topic_configs({"preallocate": "true"})
    # A bad value is still a bad value first.
    with pytest.raises(ConfigError, match="not a valid"):
        BrokerConfig.from_strings([("log.preallocate", "soon")])


def test_stored_overrides_not_supported_any_more_are_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parsed = parse_stored_topic_configs("t", {"preallocate": "true", "retention.ms": "1000"})
    assert parsed == {"retention.ms": 1000}
    assert "topic t: ignoring its stored override preallocate=true" in caplog.text


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "unclean.leader.election.enable=false", "--set", "cluster.id=x"],
        ["--set", "cluster.id=ZlTTKn5WQraMKYmHHU1PAg"],
        ["--set", "log.preallocate=true"],
    ],
)
def test_refused_at_start_in_one_line(tmp_path: Path, args: list[str]) -> None:
    done = serve(tmp_path, *args)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    name = args[-1].split("=")[0]
    assert line.startswith(f"Error: {name}: ")
    assert "not supported yet" in line
    assert not (tmp_path / "d").exists()


def test_refused_from_a_settings_file(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=3\ncluster.id=ZlTTKn5WQraMKYmHHU1PAg\n")
    done = serve(tmp_path, "--config", str(props))
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: cluster.id: not supported yet")


def test_settings_command_shows_what_is_refused() -> None:
    done = subprocess.run(
        [*KBROKER, "settings", "--json"], capture_output=True, text=True, timeout=60
    )
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["zookeeper.connect"]["supported"]
    assert not rows["cluster.id"]["supported"]
    assert "meta.properties" in rows["cluster.id"]["unsupported_reason"]
    assert rows["log.preallocate"]["honoured_values"] == ["false"]
    assert rows["producer.id.expiration.ms"]["supported"]
    text = subprocess.run([*KBROKER, "settings"], capture_output=True, text=True, timeout=60)
    line = next(x for x in text.stdout.splitlines() if x.startswith("cluster.id"))
    assert "a value is refused: not supported yet" in line
    # Transactions exist: their ids expire as set.
    assert rows["transactional.id.expiration.ms"]["supported"]


def test_admin_apis_answer_invalid_config(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    kb = broker_factory("auto.create.topics.enable=false")
    a = admin(kb)
    (fut,) = a.create_topics(
        [NewTopic("pre", 1, 1, config={"preallocate": "true"})], request_timeout=WAIT
    ).values()
    err = error_of(fut)
    assert err.name() == "INVALID_CONFIG"
    assert "preallocate: preallocation is not supported yet" in err.str()

    # Honoured values are taken, and kept.
    create(a, NewTopic("t", 1, 1, config={"unclean.leader.election.enable": "true"}))
    assert topic_configs(a, "t")["unclean.leader.election.enable"].value == "true"
    topic = ConfigResource(
        "topic",
        "t",
        incremental_configs=[
            ConfigEntry("preallocate", "true", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    err = error_of(incremental(a, topic))
    assert err.name() == "INVALID_CONFIG"
    assert "not supported yet" in err.str()

    broker = ConfigResource(
        "broker",
        "0",
        incremental_configs=[
            ConfigEntry(
                "log.preallocate",
                "true",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    err = error_of(incremental(a, broker))
    assert err.name() == "INVALID_CONFIG"
    assert "preallocation is not supported yet" in err.str()
