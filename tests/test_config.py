"""kbroker.config in process: parsing and checks, typed readers, fallbacks, dynamic
settings, topic configs and the cross-setting check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbroker.config import (
    ALL_TOPIC_SETTINGS,
    BROKER,
    INT_MAX,
    TOPIC,
    TOPIC_SETTINGS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    Setting,
    TopicConfig,
    as_int,
    as_list,
    java_double,
    load_properties,
    parse_topic_configs,
    topic_setting,
)

HOUR_MS = 3600 * 1000


def config(**given: str) -> BrokerConfig:
    """A BrokerConfig from `name=text` pairs (dots spelled as underscores)."""
    return BrokerConfig.from_strings((k.replace("_", "."), v) for k, v in given.items())


# -- the table -------------------------------------------------------------------


def test_every_topic_setting_names_a_broker_setting() -> None:
    """Or, for Kafka's topic settings no broker setting supplies, declares itself."""
    for ts in TOPIC_SETTINGS:
        assert ts.broker_setting in BROKER, ts
    for ts in ALL_TOPIC_SETTINGS:
        assert (ts.broker_setting in BROKER) != (ts.own is not None), ts
    assert set(TOPIC) == {ts.name for ts in ALL_TOPIC_SETTINGS}


def test_every_default_passes_its_own_check() -> None:
    for setting in BROKER.values():
        setting.check(setting.default)
        if setting.default is None:
            assert setting.nullable, setting.name


def test_every_fallback_names_an_integer_broker_setting() -> None:
    for setting in BROKER.values():
        for other, factor in setting.fallbacks:
            assert BROKER[other].type in (ConfigType.INT, ConfigType.LONG), (setting.name, other)
            assert factor > 0


# -- parsing and checks -----------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (ConfigType.BOOLEAN, " True ", True),
        (ConfigType.BOOLEAN, "false", False),
        (ConfigType.INT, " 42 ", 42),
        (ConfigType.LONG, "-1", -1),
        (ConfigType.DOUBLE, "0.25", 0.25),
        (ConfigType.LIST, "delete, compact,", ["delete", "compact"]),
        (ConfigType.LIST, "", []),
        (ConfigType.STRING, "  text ", "text"),
    ],
)
def test_parse_converts_text(kind: ConfigType, text: str, value: object) -> None:
    assert Setting("x", kind, None, "doc", nullable=True).parse(text) == value


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        (ConfigType.BOOLEAN, "yes"),
        (ConfigType.INT, "1.5"),
        (ConfigType.INT, True),
        (ConfigType.LONG, "ten"),
        (ConfigType.DOUBLE, "half"),
    ],
)
def test_parse_refuses_what_is_not_of_the_type(kind: ConfigType, raw: object) -> None:
    with pytest.raises(ConfigError, match=rf"x: .* is not a valid {kind.name.lower()}"):
        Setting("x", kind, None, "doc").parse(raw)


def test_bounds_choices_and_null() -> None:
    bounded = Setting("n", ConfigType.INT, 5, "doc", min=1, max=10)
    assert bounded.parse("10") == 10
    with pytest.raises(ConfigError, match="n: 0 is below the minimum 1"):
        bounded.parse("0")
    with pytest.raises(ConfigError, match="n: 11 is above the maximum 10"):
        bounded.parse("11")
    # An INT without bounds still fits in 32 bits.
    with pytest.raises(ConfigError, match="above the maximum"):
        Setting("i", ConfigType.INT, 0, "doc").parse(str(INT_MAX + 1))
    policy = Setting("p", ConfigType.LIST, ["delete"], "doc", choices=("delete", "compact"))
    assert policy.parse("compact,delete") == ["compact", "delete"]
    with pytest.raises(ConfigError, match="'keep' is not one of delete, compact"):
        policy.parse("delete,keep")
    with pytest.raises(ConfigError, match="p: a value is required"):
        policy.parse(None)
    assert Setting("o", ConfigType.LONG, None, "doc", nullable=True).parse(None) is None


def test_render_is_the_wire_form() -> None:
    s = Setting("x", ConfigType.STRING, None, "doc")
    assert s.render(True) == "true"
    assert s.render(False) == "false"
    assert s.render(["delete", "compact"]) == "delete,compact"
    assert s.render(7) == "7"
    assert s.render(None) is None


def test_as_int_and_as_list() -> None:
    assert as_int(3) == 3
    assert as_list(["a"]) == ["a"]
    with pytest.raises(ConfigError):
        as_int(True)
    with pytest.raises(ConfigError):
        as_int("3")
    with pytest.raises(ConfigError):
        as_list("a")


# -- BrokerConfig: layers, typed readers, fallbacks -------------------------------


def test_defaults_then_given_then_dynamic() -> None:
    c = BrokerConfig()
    assert c.get_int("num.partitions") == BROKER["num.partitions"].default
    assert c.is_default("num.partitions")
    c = config(num_partitions="3")
    assert c.get_int("num.partitions") == 3
    assert not c.is_default("num.partitions")
    c.set("num.partitions", "5")
    assert c.get_int("num.partitions") == 5
    c.set("num.partitions", None)  # a reset brings the static value back
    assert c.get_int("num.partitions") == 3


def test_typed_readers_return_the_type_and_refuse_another() -> None:
    c = BrokerConfig()
    assert c.get_bool("delete.topic.enable") is BROKER["delete.topic.enable"].default
    assert c.get_str("log.dirs") == BROKER["log.dirs"].default
    assert c.get_list("log.cleanup.policy") == ["delete"]
    ratio = c.get_float("log.cleaner.min.cleanable.ratio")
    assert isinstance(ratio, float)
    assert c.get_optional_str("log.dirs") == BROKER["log.dirs"].default
    # A DOUBLE read as a float even when given as a whole number.
    assert config(log_cleaner_min_cleanable_ratio="1").get_float(
        "log.cleaner.min.cleanable.ratio"
    ) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match=re.escape("num.partitions: expected bool")):
        c.get_bool("num.partitions")
    with pytest.raises(ConfigError, match=re.escape("delete.topic.enable: expected int")):
        c.get_int("delete.topic.enable")
    with pytest.raises(ConfigError, match="expected str"):
        c.get_str("num.partitions")
    with pytest.raises(ConfigError, match="expected list"):
        c.get_list("log.dirs")


def test_typed_reader_of_a_nullable_setting() -> None:
    c = BrokerConfig()
    assert c.value("log.flush.interval.ms") is None
    with pytest.raises(ConfigError, match=re.escape("log.flush.interval.ms: expected int")):
        c.get_int("log.flush.interval.ms")
    assert config(log_flush_interval_ms="250").get_int("log.flush.interval.ms") == 250


def test_retention_falls_back_to_minutes_then_hours() -> None:
    # Kafka's default: log.retention.hours=168, one week.
    assert BrokerConfig().get_int("log.retention.ms") == 168 * HOUR_MS
    assert BrokerConfig().is_default("log.retention.ms")
    hours = config(log_retention_hours="2")
    assert hours.get_int("log.retention.ms") == 2 * HOUR_MS
    assert not hours.is_default("log.retention.ms")
    minutes = config(log_retention_hours="2", log_retention_minutes="3")
    assert minutes.get_int("log.retention.ms") == 3 * 60_000
    explicit = config(log_retention_ms="1234", log_retention_minutes="3")
    assert explicit.get_int("log.retention.ms") == 1234
    # A dynamic fallback wins over a static one, and over the default.
    hours.set("log.retention.minutes", "1")
    assert hours.get_int("log.retention.ms") == 60_000
    hours.set("log.retention.ms", "5")
    assert hours.get_int("log.retention.ms") == 5


def test_roll_falls_back_to_hours() -> None:
    assert config(log_roll_hours="1").get_int("log.roll.ms") == HOUR_MS
    assert config(log_roll_hours="1", log_roll_ms="10").get_int("log.roll.ms") == 10


def test_from_strings_refuses_unknown_names_and_bad_values() -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown setting 'no.such.setting'")):
        BrokerConfig.from_strings([("no.such.setting", "1")])
    with pytest.raises(ConfigError, match=re.escape("num.partitions: 0 is below the minimum 1")):
        config(num_partitions="0")


# -- dynamic settings -----------------------------------------------------------------


def test_set_counts_generations_and_refuses_read_only_and_unknown() -> None:
    c = BrokerConfig()
    start = c.generation
    c.set("log.retention.ms", "1000")
    c.set("log.retention.ms", None)
    assert c.generation == start + 2
    assert c.dynamic == {}
    read_only = next(s.name for s in BROKER.values() if s.read_only)
    with pytest.raises(ConfigError, match="cannot be changed while the broker runs"):
        c.set(read_only, "1")
    with pytest.raises(ConfigError, match="unknown setting"):
        c.set("no.such.setting", "1")
    with pytest.raises(ConfigError, match="is not a valid"):
        c.set("log.retention.ms", "soon")
    assert c.generation == start + 2
    c.set("log.retention.ms", None)  # resetting what is not set is fine
    assert c.dynamic == {}


# -- check_together -------------------------------------------------------------------


def test_request_pool_must_hold_the_largest_request() -> None:
    config(queued_max_request_bytes="-1", socket_request_max_bytes="1000")
    config(queued_max_request_bytes="1000", socket_request_max_bytes="1000")
    with pytest.raises(ConfigError, match=r"queued.max.request.bytes \(999\) must be at least"):
        config(queued_max_request_bytes="999", socket_request_max_bytes="1000")
    c = BrokerConfig()
    c.given["queued.max.request.bytes"] = 10
    with pytest.raises(ConfigError, match=re.escape("socket.request.max.bytes")):
        c.check_together()


# -- topic settings ---------------------------------------------------------------------


def test_topic_setting_takes_type_and_bounds_from_its_broker_setting() -> None:
    s = topic_setting("retention.ms")
    base = BROKER["log.retention.ms"]
    assert (s.name, s.type, s.default, s.min) == ("retention.ms", base.type, base.default, base.min)
    assert not s.nullable
    assert topic_setting("cleanup.policy").choices == BROKER["log.cleanup.policy"].choices
    with pytest.raises(ConfigError, match=re.escape("unknown topic setting 'log.retention.ms'")):
        topic_setting("log.retention.ms")


def test_parse_topic_configs() -> None:
    assert parse_topic_configs({"retention.ms": "60000", "cleanup.policy": "compact,delete"}) == {
        "retention.ms": 60000,
        "cleanup.policy": ["compact", "delete"],
    }
    with pytest.raises(ConfigError, match=r"^flush\.ms: "):
        parse_topic_configs({"flush.ms": "-1"})
    with pytest.raises(ConfigError, match="a value is required"):
        parse_topic_configs({"flush.ms": None})
    with pytest.raises(ConfigError, match="unknown topic setting"):
        parse_topic_configs({"retention.hours": "1"})
    with pytest.raises(ConfigError, match="is not one of"):
        parse_topic_configs({"cleanup.policy": "forever"})


def test_effective_topic_config_overrides_over_broker_values() -> None:
    c = config(log_retention_hours="1", log_cleanup_policy="compact")
    topic = c.effective_topic_config({"retention.ms": 5000})
    assert set(topic) == set(TOPIC)
    assert len(topic) == len(TOPIC)
    assert topic.get_int("retention.ms") == 5000
    assert topic.get_list("cleanup.policy") == ["compact"]
    assert topic.compacted
    assert topic.get_int("segment.bytes") == c.get_int("log.segment.bytes")
    assert topic.get_int("segment.ms") == c.get_int("log.roll.ms")
    assert c.effective_topic_config({})["retention.ms"] == HOUR_MS
    assert c.topic_default("retention.ms") == HOUR_MS
    # Dynamic broker values reach topics without an override.
    c.set("log.segment.bytes", "65536")
    assert c.effective_topic_config({}).get_int("segment.bytes") == 65536
    assert c.effective_topic_config({"segment.bytes": 1 << 20}).get_int("segment.bytes") == 1 << 20


def test_unset_flush_ms_is_the_scheduler_interval() -> None:
    c = config(log_flush_scheduler_interval_ms="3000")
    assert c.effective_topic_config({}).get_int("flush.ms") == 3000
    assert c.effective_topic_config({"flush.ms": 10}).get_int("flush.ms") == 10
    c.set("log.flush.interval.ms", "20")
    assert c.effective_topic_config({}).get_int("flush.ms") == 20


def test_topic_config_typed_reads() -> None:
    topic = TopicConfig(
        {
            "n": 3,
            "ratio": 0.5,
            "whole": 1,
            "flag": False,
            "name": "lz4",
            "cleanup.policy": ["delete"],
        }
    )
    assert topic.get_int("n") == 3
    assert topic.get_float("ratio") == 0.5
    assert topic.get_float("whole") == 1.0 and isinstance(topic.get_float("whole"), float)
    assert topic.get_bool("flag") is False
    assert topic.get_str("name") == "lz4"
    assert not topic.compacted
    with pytest.raises(ConfigError, match="flag: expected int"):
        topic.get_int("flag")
    with pytest.raises(ConfigError, match="n: expected bool"):
        topic.get_bool("n")
    with pytest.raises(ConfigError, match="flag: expected float"):
        topic.get_float("flag")
    with pytest.raises(KeyError):
        topic.get_int("missing")


# -- properties files ---------------------------------------------------------------------


def test_load_properties(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# a comment\n! another\n\nbroker.id=3\nlog.dirs : /data/k  \n")
    assert load_properties(path) == {"broker.id": "3", "log.dirs": "/data/k"}
    path.write_text("just-a-key\n")
    with pytest.raises(ConfigError, match=r"server.properties:1: expected key=value"):
        load_properties(path)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_properties(tmp_path / "missing.properties")


def test_load_properties_reads_as_java_does(tmp_path: Path) -> None:
    """Continued lines (multi-line JAAS settings), escapes, the separators: what Java's
    Properties.load (which Kafka reads server.properties with) gives for the same file,
    values stripped as Kafka strips them."""
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment ending in a backslash does not continue \\\n"
        "a=1\n"
        "  b : 2  \n"
        "c = multi \\\n"
        "    line \\\\\n"
        "d=x\\\\\\\n"
        "  y\n"
        "e=\n"
        "f\\=g=h\n"
        "i  j\n"
        "k=\\u0041\\tB\r\n"
        "listener.name.x.plain.sasl.jaas.config=org.Plain required \\\n"
        '    username="broker" \\\n'
        '    password="p";\n'
        "last=continued at the end \\"
    )
    assert load_properties(path) == {
        "a": "1",
        "b": "2",
        "c": "multi line \\",
        "d": "x\\y",
        "e": "",
        "f=g": "h",
        "i": "j",
        "k": "A\tB",
        "listener.name.x.plain.sasl.jaas.config": 'org.Plain required username="broker" '
        'password="p";',
        "last": "continued at the end",
    }


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"),
        (100.0, "100.0"),
        (1234567.0, "1234567.0"),
        (1e7, "1.0E7"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (-2.5e-5, "-2.5E-5"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (0.0, "0.0"),
    ],
)
def test_doubles_are_written_as_java_writes_them(value: float, text: str) -> None:
    """As Kafka's DescribeConfigs and properties files show them (Double.toString)."""
    assert java_double(value) == text
    assert BROKER["log.cleaner.min.cleanable.ratio"].render(value) == text
