"""A group's own configs (the GROUP config resource, Kafka 4.x's KIP-848 group configs).

Owns the names a group can be configured with, their types, where each one's
default comes from, how a set of overrides is checked, and the overrides of
every group this broker knows of (`GroupConfigs`), which the group
coordinator reads: `GroupConfigs.consumer_session_timeout_ms` and
`GroupConfigs.consumer_heartbeat_interval_ms` give a group's override or the
broker's default.

The names are those Kafka 4.1.1 knows (its GroupConfig): the consumer
protocol's ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``,
share groups' ``share.*`` and streams groups' ``streams.*``. kbroker has neither
share nor streams groups: their configs are kept, described and checked as
Kafka does, and used by nothing. Any other name is refused as Kafka refuses it
("Unknown group config name: ...").

A config's default is the broker setting Kafka takes it from
(``group.consumer.session.timeout.ms`` ...); streams groups' broker settings
(``group.streams.*``) are not among Kafka 3.9.1's, which kbroker's settings
follow, so their Kafka 4.1.1 defaults stand for them. A set of overrides is
checked whole, over those defaults, with Kafka's messages: each value's type
and range, each timing against the broker's bounds
(``group.consumer.min.session.timeout.ms`` ...), and each protocol's session
timeout above its heartbeat interval.

Where overrides are kept is the broker's business (a single node's metadata
store; a cluster's ZooKeeper, /config/groups/<group id>): it hands every
change, its own and those other brokers announce, to `GroupConfigs.update`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kbroker.config import BrokerConfig, ConfigType, broker_setting

log = logging.getLogger(__name__)

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"

_INT32_MAX = 2**31 - 1
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
# Java's Duration.parse text (PnDTnHnMn.nS), as share.auto.offset.reset's by_duration takes it.
_DURATION = re.compile(
    r"^([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?$",
    re.IGNORECASE,
)


class GroupConfigError(ValueError):
    """A group config set Kafka would refuse (INVALID_CONFIG), with Kafka's message."""


@dataclass(frozen=True)
class GroupConfigKey:
    """One group config: its type, default and bounds."""

    name: str
    type: ConfigType
    doc: str
    # The broker setting that supplies the default, and the default when kbroker has no
    # such setting (Kafka 4.1.1's).
    default_setting: str | None
    default: int | str
    # The broker settings bounding it (inclusive), with Kafka 4.1.1's defaults for
    # settings kbroker does not have.
    min_setting: tuple[str, int] | None = None
    max_setting: tuple[str, int] | None = None
    # The smallest value its type allows.
    at_least: int = 1
    choices: tuple[str, ...] = ()


def _timing(
    protocol: str, what: str, doc: str, default: int, low: int, high: int
) -> GroupConfigKey:
    return GroupConfigKey(
        f"{protocol}.{what}",
        ConfigType.INT,
        doc,
        f"group.{protocol}.{what}",
        default,
        (f"group.{protocol}.min.{what}", low),
        (f"group.{protocol}.max.{what}", high),
    )


GROUP_CONFIG_KEYS: tuple[GroupConfigKey, ...] = (
    _timing(
        "consumer",
        "heartbeat.interval.ms",
        "How often the members of this consumer-protocol group heartbeat.",
        5000,
        5000,
        15000,
    ),
    _timing(
        "consumer",
        "session.timeout.ms",
        "How long a member of this consumer-protocol group may go without a heartbeat "
        "before it is removed.",
        45000,
        45000,
        60000,
    ),
    GroupConfigKey(
        "share.auto.offset.reset",
        ConfigType.STRING,
        "Where a share group starts in a partition it has no position in: earliest, latest "
        "or by_duration:<ISO-8601 duration> (share groups: kept, not used by kbroker).",
        None,
        "latest",
    ),
    _timing(
        "share",
        "heartbeat.interval.ms",
        "Heartbeat interval of share group members (share groups: kept, not used by kbroker).",
        5000,
        5000,
        15000,
    ),
    GroupConfigKey(
        "share.isolation.level",
        ConfigType.STRING,
        "Whether a share group reads only committed transactional records "
        "(share groups: kept, not used by kbroker).",
        None,
        "read_uncommitted",
        choices=("read_committed", "read_uncommitted"),
    ),
    _timing(
        "share",
        "record.lock.duration.ms",
        "How long a share group member holds the records it acquired "
        "(share groups: kept, not used by kbroker).",
        30000,
        15000,
        60000,
    ),
    _timing(
        "share",
        "session.timeout.ms",
        "Session timeout of share group members (share groups: kept, not used by kbroker).",
        45000,
        45000,
        60000,
    ),
    _timing(
        "streams",
        "heartbeat.interval.ms",
        "Heartbeat interval of streams group members (streams groups: kept, not used by kbroker).",
        5000,
        5000,
        15000,
    ),
    GroupConfigKey(
        "streams.num.standby.replicas",
        ConfigType.INT,
        "Standby replicas of each task of a streams group (streams groups: kept, not used "
        "by kbroker).",
        "group.streams.num.standby.replicas",
        0,
        max_setting=("group.streams.max.standby.replicas", 2),
        at_least=0,
    ),
    _timing(
        "streams",
        "session.timeout.ms",
        "Session timeout of streams group members (streams groups: kept, not used by kbroker).",
        45000,
        45000,
        60000,
    ),
)
GROUP_CONFIGS: Mapping[str, GroupConfigKey] = {key.name: key for key in GROUP_CONFIG_KEYS}

# The checks Kafka makes of a whole set, in its order: a bounded value, then each
# protocol's session timeout against its heartbeat interval.
_SESSION_OVER_HEARTBEAT = ("consumer", "share", "streams")


def _broker_int(config: BrokerConfig, name: str, fallback: int) -> int:
    """The broker setting ``name``, or ``fallback`` when kbroker has no such setting."""
    if broker_setting(name) is None:
        return fallback
    return int(config[name])


def group_config_default(config: BrokerConfig, key: GroupConfigKey) -> int | str:
    """The value a group without an override gets for ``key``."""
    if key.default_setting is None:
        return key.default
    assert isinstance(key.default, int)
    return _broker_int(config, key.default_setting, key.default)


def group_config_key(name: str) -> GroupConfigKey:
    """The group config ``name``; GroupConfigError (Kafka's message) when there is none."""
    key = GROUP_CONFIGS.get(name)
    if key is None:
        raise GroupConfigError(f"Unknown group config name: {name}")
    return key


def _invalid(name: str, text: str, why: str) -> GroupConfigError:
    return GroupConfigError(f"Invalid value {text} for configuration {name}: {why}")


def parse_group_config(key: GroupConfigKey, text: str) -> int | str:
    """One value as Kafka's ConfigDef reads it (numbers trimmed); GroupConfigError when
    it is not one the config takes."""
    if key.type is ConfigType.INT:
        trimmed = text.strip()
        if not _INTEGER.match(trimmed) or not -(2**31) <= int(trimmed) <= _INT32_MAX:
            raise _invalid(key.name, text, "Not a number of type INT")
        value = int(trimmed)
        if value < key.at_least:
            raise _invalid(key.name, text, f"Value must be at least {key.at_least}")
        return value
    value_text = text.strip()
    if key.choices:
        if value_text not in key.choices:
            raise _invalid(key.name, text, "String must be one of: " + ", ".join(key.choices))
        return value_text
    if key.name == "share.auto.offset.reset" and not _offset_reset_strategy(value_text):
        raise _invalid(
            key.name,
            text,
            f"Invalid value `{text}` for configuration {key.name}. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        )
    return value_text


def _offset_reset_strategy(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        return True
    prefix = "by_duration:"
    if not lowered.startswith(prefix):
        return False
    match = _DURATION.match(text[len(prefix) :].strip())
    if match is None or (match.group(2) is None and match.group(3) is None):
        return False
    if match.group(3) is not None and match.group(3).upper() == "T":
        return False  # a T with no time after it
    # No negative duration (a whole negative sign, or a negative part).
    return "-" not in text[len(prefix) :]


def check_group_configs(config: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, str]:
    """Checks a group's whole set of overrides as Kafka does; returns them as stored
    (numbers in their plain form). GroupConfigError carries Kafka's message."""
    parsed: dict[str, int | str] = {}
    for name, text in overrides.items():
        parsed[name] = parse_group_config(group_config_key(name), text)
    effective = {
        key.name: parsed.get(key.name, group_config_default(config, key))
        for key in GROUP_CONFIG_KEYS
    }
    for key in GROUP_CONFIG_KEYS:
        value = effective[key.name]
        if not isinstance(value, int):
            continue
        if key.min_setting is not None and value < _broker_int(config, *key.min_setting):
            raise GroupConfigError(
                f"{key.name} must be greater than or equal to {key.min_setting[0]}"
            )
        if key.max_setting is not None and value > _broker_int(config, *key.max_setting):
            raise GroupConfigError(f"{key.name} must be less than or equal to {key.max_setting[0]}")
    for protocol in _SESSION_OVER_HEARTBEAT:
        session = effective[f"{protocol}.session.timeout.ms"]
        heartbeat = effective[f"{protocol}.heartbeat.interval.ms"]
        assert isinstance(session, int) and isinstance(heartbeat, int)
        if session <= heartbeat:
            raise GroupConfigError(
                f"{protocol}.session.timeout.ms must be greater than "
                f"{protocol}.heartbeat.interval.ms"
            )
    return {name: str(value) for name, value in parsed.items()}


class GroupConfigs:
    """Every group's overrides, as last stored; what the coordinator asks."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._overrides: dict[str, dict[str, str]] = {}

    def update(self, group_id: str, configs: Mapping[str, str]) -> None:
        """The group's whole set of overrides is now ``configs`` (none: all removed; the
        group is still listed, as Kafka lists a config resource whose configs went)."""
        self._overrides[group_id] = dict(configs)

    def configured_groups(self) -> list[str]:
        """Every group that has, or had, an override."""
        return sorted(self._overrides)

    def overrides(self, group_id: str) -> Mapping[str, str]:
        """The group's overrides, as text ({} when it has none)."""
        return self._overrides.get(group_id, {})

    def value(self, group_id: str, name: str) -> int | str:
        """The group's value of the group config ``name``: its override, else the default.
        A stored override this broker cannot read (written by another) is logged and
        the default used."""
        key = GROUP_CONFIGS[name]
        text = self._overrides.get(group_id, {}).get(name)
        if text is not None:
            try:
                return parse_group_config(key, text)
            except GroupConfigError as exc:
                log.warning("group %r: ignoring its stored %s: %s", group_id, name, exc)
        return group_config_default(self._config, key)

    def consumer_session_timeout_ms(self, group_id: str) -> int:
        """How long a member of ``group_id`` (consumer protocol) may go without a heartbeat."""
        value = self.value(group_id, CONSUMER_SESSION_TIMEOUT_MS)
        assert isinstance(value, int)
        return value

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        """The heartbeat interval given to members of ``group_id`` (consumer protocol)."""
        value = self.value(group_id, CONSUMER_HEARTBEAT_INTERVAL_MS)
        assert isinstance(value, int)
        return value
