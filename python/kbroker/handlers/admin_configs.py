"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Owns how settings look on the wire and how clients change them, for four
resource types:

- TOPIC (2): every topic-level setting with its effective value and where it
  comes from (the topic's override, then the broker setting that supplies its
  default); alterations replace or edit the topic's overrides.
- BROKER (4): every broker setting. The resource name is this broker's id, or
  "" for the cluster-wide defaults, which on a single node are the same
  dynamic layer: described under "" are only the dynamically set values (as
  Kafka does). Settings that are not ``read_only`` can be changed while the
  broker runs; they are applied at once and persisted with the metadata (in a
  cluster: in ZooKeeper, under the broker's id or ``<default>``, whence every
  broker takes them).
- BROKER_LOGGER (8): the levels of the broker's Python loggers, changeable
  (not persisted) with IncrementalAlterConfigs.
- GROUP (32): a group's own configs (Kafka 4.x; names, defaults and checks in
  `kbroker.coordinator.group_configs`): every one with its effective value, the
  group's override (DYNAMIC_GROUP_CONFIG) or the default the broker's settings
  give (DEFAULT_CONFIG); alterations replace or edit the group's overrides,
  which are stored with the metadata (in a cluster: in ZooKeeper, under
  /config/groups/<group id>, whence every broker takes them). The group need
  not exist. As Kafka 4.1.1: an unknown name is refused when set, and may be
  deleted; APPEND and SUBTRACT are refused (no group config is a list); the
  older AlterConfigs sets the configs it names and keeps the group's others.

Names, types, defaults and documentation all come from ``kbroker.config``; no
list of names lives here. `topic_config_entries` is shared with CreateTopics.

With an authorizer, as Kafka: describing needs DescribeConfigs, altering
AlterConfigs, on the topic (TOPIC_AUTHORIZATION_FAILED), on the group
(GROUP_AUTHORIZATION_FAILED) or, for a broker or its loggers, on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kbroker.cluster.errors import ClusterError
from kbroker.config import (
    ALL_BROKER_SETTINGS,
    ALL_TOPIC_SETTINGS,
    BROKER,
    KAFKA_NULL_DEFAULTS,
    TOPIC,
    BrokerConfig,
    ConfigError,
    ConfigType,
    Setting,
    Value,
    broker_setting,
    is_tls_setting,
    topic_setting,
)
from kbroker.coordinator.group_configs import (
    GROUP_CONFIG_KEYS,
    GroupConfigError,
    check_group_configs,
    group_config_default,
    group_config_key,
)
from kbroker.errors import ResourceError, TopicError
from kbroker.handlers.authorization import GROUP as ACL_GROUP
from kbroker.handlers.authorization import TOPIC as ACL_TOPIC
from kbroker.handlers.authorization import Op, authorize, authorize_cluster
from kbroker.log.log import illegal_topic_name
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class AlterOp(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


Synonym = tuple[str, str | None, ConfigSource]


@dataclass
class ConfigEntry:
    """One described setting, before it is put in a version's response shape."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    type: ConfigType
    doc: str | None
    sensitive: bool = False
    synonyms: list[Synonym] = field(default_factory=list)


# -- describing --------------------------------------------------------------


def _render(setting: Setting, value: Value) -> str | None:
    return None if setting.type is ConfigType.PASSWORD else setting.render(value)


def _broker_synonyms(
    config: BrokerConfig, name: str, dynamic_source: ConfigSource
) -> list[Synonym]:
    """Where ``name``'s value can come from, most specific first (Kafka's order:
    dynamic, static, default; within each, the name before its fallbacks). Only
    the setting's own default applies when nothing is set (a fallback's default
    does not), so that is the one default listed."""
    setting = _known_setting(name)
    names = [name, *(other for other, _ in setting.fallbacks)]
    default = None if _derived_null(setting) else setting.default
    layers: tuple[tuple[Mapping[str, Value], ConfigSource], ...] = (
        (config.dynamic, dynamic_source),
        (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (config.given, ConfigSource.STATIC_BROKER_CONFIG),
        ({name: default}, ConfigSource.DEFAULT_CONFIG),
    )
    out: list[Synonym] = []
    for values, source in layers:
        for n in names:
            value = values.get(n)
            if value is not None:
                out.append((n, _render(_known_setting(n), value), source))
    return out


def _derived_null(setting: Setting) -> bool:
    """Whether ``setting``'s own default is null, as Kafka reports it: a setting whose
    value a coarser one supplies (log.retention.ms from log.retention.hours)."""
    return bool(setting.fallbacks) and setting.name in KAFKA_NULL_DEFAULTS


def broker_config_entry(
    config: BrokerConfig, name: str, cluster_default: bool = False
) -> ConfigEntry:
    setting = _known_setting(name)
    dynamic_source = (
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if cluster_default
        else ConfigSource.DYNAMIC_BROKER_CONFIG
    )
    synonyms = _broker_synonyms(config, name, dynamic_source)
    if cluster_default:
        synonyms = [s for s in synonyms if s[2] == dynamic_source]
    at_default = _derived_null(setting) and config.is_default(name)
    return ConfigEntry(
        name=name,
        value=None if at_default else _render(setting, config[name]),
        source=synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG,
        read_only=setting.read_only,
        type=setting.type,
        doc=setting.doc,
        sensitive=setting.type is ConfigType.PASSWORD,
        synonyms=synonyms,
    )


def topic_config_entries(config: BrokerConfig, overrides: Mapping[str, Value]) -> list[ConfigEntry]:
    """Every topic-level setting of a topic with these (parsed) overrides."""
    effective = config.effective_topic_config(overrides)
    out: list[ConfigEntry] = []
    for ts in ALL_TOPIC_SETTINGS:
        setting = topic_setting(ts.name)
        synonyms = (
            []
            if ts.broker_setting is None
            else _broker_synonyms(config, ts.broker_setting, ConfigSource.DYNAMIC_BROKER_CONFIG)
        )
        if ts.name in overrides:
            synonyms.insert(
                0,
                (ts.name, _render(setting, overrides[ts.name]), ConfigSource.DYNAMIC_TOPIC_CONFIG),
            )
        out.append(
            ConfigEntry(
                name=ts.name,
                value=_render(setting, effective[ts.name]),
                source=synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                type=setting.type,
                doc=setting.doc,
                sensitive=setting.type is ConfigType.PASSWORD,
                synonyms=synonyms,
            )
        )
    return out


def group_config_entries(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every group config of a group with these overrides (as stored), by name. As Kafka,
    each has one synonym, under its own name: the override, or the default."""
    out: list[ConfigEntry] = []
    for key in sorted(GROUP_CONFIG_KEYS, key=lambda k: k.name):
        if key.name in overrides:
            value, source = overrides[key.name], ConfigSource.DYNAMIC_GROUP_CONFIG
        else:
            value, source = str(group_config_default(config, key)), ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=key.name,
                value=value,
                source=source,
                read_only=False,
                type=key.type,
                doc=key.doc,
                synonyms=[(key.name, value, source)],
            )
        )
    return out


_LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "FATAL", "NOTSET": "INFO"}
_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
ROOT_LOGGER = "root"


def _loggers() -> dict[str, logging.Logger]:
    found = {
        name: lg
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    return {ROOT_LOGGER: logging.getLogger(), **dict(sorted(found.items()))}


def _level_name(lg: logging.Logger) -> str:
    name = logging.getLevelName(lg.getEffectiveLevel())
    return _LEVEL_NAMES.get(name, "OFF" if lg.getEffectiveLevel() > logging.CRITICAL else name)


def logger_entries() -> list[ConfigEntry]:
    return [
        ConfigEntry(
            name=name,
            value=_level_name(lg),
            source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
            read_only=False,
            type=ConfigType.STRING,
            doc=None,
        )
        for name, lg in _loggers().items()
    ]


def _check_topic(broker: Broker, name: str) -> None:
    illegal = illegal_topic_name(name)
    if illegal is not None:
        raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)
    if name not in broker.metadata_cache.topics():
        raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")


def _check_broker_name(broker: Broker, name: str, allow_default: bool = True) -> bool:
    """Validates a BROKER/BROKER_LOGGER resource name; True for the cluster default ("")."""
    if not name:
        if allow_default:
            return True
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    try:
        broker_id = int(name)
    except ValueError:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if broker_id != broker.broker_id:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.broker_id} or empty string, "
            f"but received {name}",
        )
    return False


def _check_group(name: str) -> None:
    if not name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")


def _describe_resource(broker: Broker, rtype: int, name: str) -> list[ConfigEntry]:
    if rtype == ResourceType.TOPIC:
        _check_topic(broker, name)
        return topic_config_entries(broker.config, broker.topic_overrides(name))
    if rtype == ResourceType.BROKER:
        if _check_broker_name(broker, name):
            if broker.cluster is None:
                return [broker_config_entry(broker.config, n, True) for n in broker.config.dynamic]
            # A cluster's default layer (a broker's own may differ).
            return [
                replace(
                    broker_config_entry(broker.config, n, True),
                    value=_render(_known_setting(n), value),
                    source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                )
                for n, value in sorted(broker.config.dynamic_default.items())
            ]
        # Every setting, then the listeners' own settings that were given.
        names = [s.name for s in ALL_BROKER_SETTINGS]
        names += sorted(n for n in broker.config.given_names() if n not in BROKER)
        return [broker_config_entry(broker.config, n) for n in names]
    if rtype == ResourceType.BROKER_LOGGER:
        _check_broker_name(broker, name, allow_default=False)
        return logger_entries()
    if rtype == ResourceType.GROUP:
        _check_group(name)
        return group_config_entries(broker.config, broker.group_configs.overrides(name))
    raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {rtype}")


def _config_result(entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    Config = DescribeConfigsResponse.Result.Config
    return Config(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=entry.sensitive,
        synonyms=[Config.Synonym(n, v, s) for n, v, s in entry.synonyms] if synonyms else [],
        config_type=entry.type,
        documentation=entry.doc if documentation else None,
    )


def _refusal(
    broker: Broker, ctx: RequestContext, op: Op, resource_type: int, name: str
) -> ErrorCode | None:
    """The authorization error for ``op`` on a configs resource, or None when allowed."""
    if resource_type == ResourceType.TOPIC:
        allowed = authorize(broker, ctx, op, ACL_TOPIC, name)
        return None if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == ResourceType.GROUP:
        allowed = authorize(broker, ctx, op, ACL_GROUP, name)
        return None if allowed else ErrorCode.GROUP_AUTHORIZATION_FAILED
    if resource_type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
        allowed = authorize_cluster(broker, ctx, op)
        return None if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


# Kafka's texts for the two refusals of DescribeConfigs.
_REFUSAL_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}


def handle_describe_configs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    Result = DescribeConfigsResponse.Result
    results = []
    for res in request.resources:
        try:
            refused = _refusal(
                broker, ctx, Op.DESCRIBE_CONFIGS, res.resource_type, res.resource_name
            )
            if refused is not None:
                raise ResourceError(refused, _REFUSAL_MESSAGES[refused])
            entries = _describe_resource(broker, res.resource_type, res.resource_name)
            error, message = ErrorCode.NONE, None
        except ResourceError as exc:
            entries, error, message = [], exc.code, exc.message
        keys = res.configuration_keys
        if keys:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(
            Result(
                error_code=error,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=[
                    _config_result(e, request.include_synonyms, request.include_documentation)
                    for e in entries
                ],
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


# -- altering ----------------------------------------------------------------


def _code(name: str) -> ErrorCode:
    try:
        return ErrorCode[name]
    except KeyError:
        log.error("no error code named %s", name)
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _topic_text(broker: Broker, name: str) -> dict[str, str]:
    """A topic's current overrides, as text."""
    out: dict[str, str] = {}
    for key, value in broker.topic_overrides(name).items():
        text = topic_setting(key).render(value)
        if text is not None:
            out[key] = text
    return out


def _set_topic(broker: Broker, name: str, configs: dict[str, str], validate_only: bool) -> None:
    try:
        broker.set_topic_configs(name, configs, validate_only)
    except TopicError as exc:
        raise ResourceError(exc.code, str(exc)) from None


def _known_setting(name: str) -> Setting:
    setting = broker_setting(name)
    assert setting is not None, name
    return setting


def _broker_setting(name: str) -> Setting:
    setting = broker_setting(name)
    if setting is None:
        raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {name}")
    return setting


def _set_broker(
    broker: Broker, configs: Mapping[str, str], validate_only: bool, cluster_default: bool
) -> None:
    """Replaces the broker's dynamic settings (or, in a cluster, the cluster default's)
    with ``configs`` (validated as a whole)."""
    normalized: dict[str, str] = {}
    for name, text in configs.items():
        setting = _broker_setting(name)
        if setting.read_only:
            # Kafka's answer to a setting it cannot change while it runs.
            raise ResourceError(
                ErrorCode.INVALID_REQUEST,
                f"Cannot update these configs dynamically: {name} is read-only",
            )
        if setting.type is ConfigType.PASSWORD:
            raise ResourceError(
                ErrorCode.INVALID_CONFIG,
                f"{name} is a password: kbroker keeps no secret in ZooKeeper or in its "
                "metadata; set it in the broker's settings file",
            )
        if cluster_default and is_tls_setting(setting.name):
            raise ResourceError(
                ErrorCode.INVALID_REQUEST,
                f"Cannot update {name} at the cluster default level: it is set per broker",
            )
        try:
            value = setting.parse(text)
        except ConfigError as exc:
            raise ResourceError(
                ErrorCode.INVALID_CONFIG, f"Invalid value for {name}: {exc}"
            ) from None
        rendered = setting.render(value)
        if rendered is not None:
            normalized[setting.name] = rendered
    try:
        broker.check_tls_change(normalized, cluster_default)
    except ConfigError as exc:
        # As Kafka answers a dynamic keystore it cannot take.
        raise ResourceError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    if validate_only:
        return
    broker.set_dynamic_broker_configs(normalized, cluster_default)


def _check_duplicates(names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Duplicate config key: {name}")
        seen.add(name)


def _alter_resource(broker: Broker, res: Any, validate_only: bool) -> None:
    """AlterConfigs: the given values become the resource's whole set of overrides."""
    _check_duplicates(c.name for c in res.configs)
    configs = {c.name: c.value for c in res.configs if c.value is not None}
    if res.resource_type == ResourceType.TOPIC:
        _check_topic(broker, res.resource_name)
        _set_topic(broker, res.resource_name, configs, validate_only)
    elif res.resource_type == ResourceType.BROKER:
        default = _check_broker_name(broker, res.resource_name)
        _set_broker(broker, configs, validate_only, default)
    elif res.resource_type == ResourceType.GROUP:
        # As Kafka 4.1.1: the group's overrides not named are kept.
        _check_group(res.resource_name)
        current = broker.group_configs.overrides(res.resource_name)
        _set_group(broker, res.resource_name, {**current, **configs}, validate_only)
    else:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST,
            "AlterConfigs is only supported for topics, brokers and groups, "
            f"not resource type {res.resource_type}",
        )


def _alter_op(op: Any) -> AlterOp:
    """An IncrementalAlterConfigs operation's kind (INVALID_REQUEST when unknown)."""
    try:
        return AlterOp(op.config_operation)
    except ValueError:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"Unknown alter configs operation {op.config_operation} for {op.name}",
        ) from None


def _edit(
    current: dict[str, str],
    ops: Sequence[Any],
    setting_for: Callable[[str], Setting],
    effective: Callable[[str], Value],
) -> dict[str, str]:
    """Applies IncrementalAlterConfigs operations to a set of overrides (as text)."""
    out = dict(current)
    for op in ops:
        name, value = op.name, op.value
        setting = setting_for(name)
        kind = _alter_op(op)
        if kind is AlterOp.DELETE:
            out.pop(name, None)
            continue
        if value is None:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Null value not supported for: {name}")
        if kind is AlterOp.SET:
            out[name] = value
            continue
        verb = kind.name.lower()
        if setting.type is not ConfigType.LIST:
            raise ResourceError(
                ErrorCode.INVALID_REQUEST,
                f"Config value {verb} is not allowed for config key: {name}",
            )
        base = out.get(name)
        if base is None:
            base = setting.render(effective(name)) or ""
        items = [p.strip() for p in base.split(",") if p.strip()]
        given = [p.strip() for p in value.split(",") if p.strip()]
        if kind is AlterOp.APPEND:
            items += [g for g in dict.fromkeys(given) if g not in items]
        else:
            items = [i for i in items if i not in given]
        out[name] = ",".join(items)
    return out


def _topic_setting_checked(name: str) -> Setting:
    if name not in TOPIC:
        raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    return topic_setting(name)


def _set_group(broker: Broker, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
    """Replaces the group's overrides with ``configs``, checked as a whole."""
    _check_group(name)
    try:
        checked = check_group_configs(broker.config, configs)
    except GroupConfigError as exc:
        raise ResourceError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if validate_only:
        return
    try:
        broker.set_group_configs(name, checked)
    except ValueError as exc:
        raise ResourceError(ErrorCode.INVALID_REQUEST, str(exc)) from None


def _edit_group(current: Mapping[str, str], ops: Sequence[Any]) -> dict[str, str]:
    """Applies IncrementalAlterConfigs operations to a group's overrides, as Kafka 4.1.1
    answers them (INVALID_CONFIG)."""
    out = dict(current)
    for op in ops:
        name, value = op.name, op.value
        kind = _alter_op(op)
        if kind is AlterOp.DELETE:
            out.pop(name, None)
            continue
        try:
            group_config_key(name)
        except GroupConfigError as exc:
            raise ResourceError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if kind is not AlterOp.SET:
            raise ResourceError(
                ErrorCode.INVALID_CONFIG,
                f"Can't {kind.name} to key {name} because its type is not LIST.",
            )
        if value is None:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Null value not supported for: {name}")
        out[name] = value
    return out


def _set_logger_levels(ops: Sequence[Any], validate_only: bool) -> None:
    loggers = _loggers()
    changes: list[tuple[logging.Logger, int]] = []
    for op in ops:
        lg = loggers.get(op.name)
        if lg is None:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Logger {op.name} does not exist!")
        kind = op.config_operation
        if kind == AlterOp.SET:
            level = _LEVELS.get((op.value or "").strip().upper())
            if level is None:
                raise ResourceError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {op.name} to {op.value}: valid levels are "
                    + ", ".join(sorted(set(_LEVELS) - {"WARNING", "CRITICAL"})),
                )
            changes.append((lg, level))
        elif kind == AlterOp.DELETE:
            if op.name == ROOT_LOGGER:
                raise ResourceError(
                    ErrorCode.INVALID_REQUEST,
                    "Removing the log level of the root logger is not allowed",
                )
            changes.append((lg, logging.NOTSET))
        else:
            raise ResourceError(
                ErrorCode.INVALID_REQUEST,
                f"Operation {kind} is not supported for BROKER_LOGGER resources",
            )
    if not validate_only:
        for lg, level in changes:
            lg.setLevel(level)


def _incremental_alter_resource(broker: Broker, res: Any, validate_only: bool) -> None:
    _check_duplicates(c.name for c in res.configs)
    rtype, name = res.resource_type, res.resource_name
    if rtype == ResourceType.TOPIC:
        _check_topic(broker, name)
        topic_values = broker.topic_config(name)
        configs = _edit(
            _topic_text(broker, name), res.configs, _topic_setting_checked, topic_values.__getitem__
        )
        _set_topic(broker, name, configs, validate_only)
    elif rtype == ResourceType.BROKER:
        default = _check_broker_name(broker, name)
        configs = _edit(
            broker.dynamic_broker_configs(default),
            res.configs,
            _broker_setting,
            broker.config.__getitem__,
        )
        _set_broker(broker, configs, validate_only, default)
    elif rtype == ResourceType.BROKER_LOGGER:
        _check_broker_name(broker, name, allow_default=False)
        _set_logger_levels(res.configs, validate_only)
    elif rtype == ResourceType.GROUP:
        _check_group(name)
        configs = _edit_group(broker.group_configs.overrides(name), res.configs)
        _set_group(broker, name, configs, validate_only)
    else:
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {rtype}")


def _alter_all(
    broker: Broker,
    ctx: RequestContext,
    request: Any,
    alter_one: Callable[[Broker, Any, bool], None],
    response_cls: Any,
) -> Any:
    Result = response_cls.Result
    keys = [(r.resource_type, r.resource_name) for r in request.resources]
    results = []
    for res in request.resources:
        error, message = ErrorCode.NONE, None
        try:
            if keys.count((res.resource_type, res.resource_name)) > 1:
                raise ResourceError(ErrorCode.INVALID_REQUEST, "Duplicate resource.")
            refused = _refusal(broker, ctx, Op.ALTER_CONFIGS, res.resource_type, res.resource_name)
            if refused is not None:
                raise ResourceError(refused)
            alter_one(broker, res, request.validate_only)
        except ResourceError as exc:
            error, message = exc.code, exc.message
        results.append(
            Result(
                error_code=error,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    if request.validate_only:
        return response_cls(throttle_time_ms=0, responses=results)
    return _when_durable(broker, response_cls(throttle_time_ms=0, responses=results))


async def _when_durable(broker: Broker, response: Any) -> Any:
    """Answers once the changes are recorded (on disk, or in ZooKeeper); a change that
    could not be is reported."""
    try:
        await broker.config_changes_recorded()
    except (OSError, ClusterError) as exc:
        for result in response.responses:
            if result.error_code == ErrorCode.NONE:
                result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                result.error_message = (
                    f"applied, but not yet written to disk ({exc}); it is retried"
                    if isinstance(exc, OSError)
                    else f"applied on this broker only: ZooKeeper did not take it ({exc}); "
                    "set it again"
                )
    return response


def handle_alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return _alter_all(broker, ctx, request, _alter_resource, AlterConfigsResponse)


def handle_incremental_alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return _alter_all(
        broker, ctx, request, _incremental_alter_resource, IncrementalAlterConfigsResponse
    )


HANDLERS = {
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
}
