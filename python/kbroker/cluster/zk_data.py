"""Kafka 3.9's ZooKeeper tree: every znode's path, and its data as typed values (no I/O).

Each znode kind has a frozen dataclass, an ``encode_*`` that writes the JSON
Kafka 3.9 writes, and a ``decode_*`` that reads every version Kafka 3.9
reads. A decoder given anything else (bytes that are not UTF-8 JSON, a
missing field, a string where Kafka wants a number, an id out of range)
raises `ZkDataError` naming the znode kind and what was wrong, and never
another exception. Paths are chroot-relative, as `kbroker.cluster.zk`
uses them.

Formats worth knowing (as a live Kafka 3.9.1 writes them):

- /cluster/id: ``{"version":"1","id":"<22 chars>"}`` (the version is a string).
- /brokers/ids/<id>: registration version 5; ``timestamp`` is a string of
  milliseconds; ``host``/``port`` repeat the first PLAINTEXT endpoint (null
  and -1 without one). The broker epoch is the znode's czxid, not in the JSON.
- /brokers/topics/<t>: assignment version 3, partition numbers as JSON
  object keys, ``topic_id`` in Kafka's URL-safe base64 (not UUID hex).
- .../partitions/<p>/state: version 1; ``leader_recovery_state`` only when
  not 0. Its zkVersion is the partition epoch a conditional update names.
- /controller_epoch: the epoch as bare decimal text, not JSON.
- /latest_producer_id_block: block bounds as strings; the znode exists with
  no data until the first block is handed out.
- Sequential znodes (config_change_, isr_change_, acl_changes_) end in 10 digits.
- /kafka-acl/<Type>/<name> (LITERAL) and /kafka-acl-extended/prefixed/<Type>/<name>:
  ``{"acls":[{"principal":"User:a","permissionType":"Allow","host":"*",
  "operation":"Read"}],"version":1}``, names in PascalCase. Their change
  notifications: /kafka-acl-changes/acl_changes_<seq> holds ``TOPIC:t1`` (the
  enum name, upper case), /kafka-acl-extended-changes/acl_changes_<seq> holds
  ``{"version":1,"resourceType":"TOPIC","name":"t","patternType":"PREFIXED"}``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbroker.cluster.errors import ZkDataError
from kbroker.log.log import TopicPartition
from kbroker.log.partition_metadata import decode_topic_id, encode_topic_id
from kbroker.metadata.model import PartitionState
from kbroker.quota.entity import QuotaEntity, sanitize
from kbroker.security.acl import (
    CONCRETE_RESOURCE_TYPES,
    AccessControlEntry,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1

# -- paths ----------------------------------------------------------------------

CLUSTER_PATH = "/cluster"
CLUSTER_ID_PATH = "/cluster/id"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
BROKER_SEQUENCE_ID_PATH = "/brokers/seqid"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
FEATURE_PATH = "/feature"
CONSUMERS_PATH = "/consumers"

# Config entity types Kafka 3.9 keeps under /config (ConfigType.ALL).
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
# The entity name of cluster-wide defaults (/config/brokers/<default>).
DEFAULT_ENTITY = "<default>"

# Created (empty) by every Kafka 3.9 broker at start-up, before it registers.
PERSISTENT_PATHS = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQUENCE_ID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{t}" for t in CONFIG_ENTITY_TYPES),
)

# A znode name: ZooKeeper refuses "/" inside one, and "." / ".." as one.
_ZNODE_NAME = re.compile(r"^[^/\x00]{1,255}$")


def _name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _ZNODE_NAME.match(name) or name in (".", ".."):
        raise ZkDataError(f"{name!r} cannot be the name of a {kind} znode")
    return name


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{_check_int('broker id', broker_id, 0, INT32_MAX)}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{_name('topic', topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{_check_int('partition', partition, 0, INT32_MAX)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def config_path(entity_type: str, entity_name: str) -> str:
    """/config/<type>/<name>; the name `DEFAULT_ENTITY` holds the defaults of its type."""
    return f"{CONFIG_PATH}/{_name('config type', entity_type)}/{_name('config', entity_name)}"


def topic_config_path(topic: str) -> str:
    return config_path("topics", topic)


def broker_config_path(broker_id: int | None) -> str:
    """A broker's dynamic configs; None: the cluster-wide default (/config/brokers/<default>)."""
    if broker_id is None:
        return config_path("brokers", DEFAULT_ENTITY)
    return config_path("brokers", str(_check_int("broker id", broker_id, 0, INT32_MAX)))


# Where a group's own configs (Kafka 4.x's GROUP config resource) are kept: Kafka keeps
# them in KRaft's metadata; kbroker keeps them as an entity type of /config, named as
# users and clients are (sanitized: any group id makes one znode name).
GROUPS_CONFIG_TYPE = "groups"


def group_config_path(group_id: str) -> str:
    """/config/groups/<group id, sanitized>; ZkDataError for an id that cannot name a
    znode ("." or "..", or too long)."""
    return config_path(GROUPS_CONFIG_TYPE, sanitize(group_id))


def quota_entity_config_path(entity: QuotaEntity) -> str:
    """/config/users/<user>, /config/clients/<client-id> or /config/users/<user>/clients/<id>
    (names sanitized as Kafka's Sanitizer does, see kbroker.quota.entity)."""
    return f"{CONFIG_PATH}/{entity.path}"


def delete_topic_path(topic: str) -> str:
    """A request to delete the topic; the znode carries no data."""
    return f"{DELETE_TOPICS_PATH}/{_name('topic', topic)}"


def sequence_number(name: str, prefix: str) -> int:
    """The number ZooKeeper appended to a sequential znode's name (config_change_0000000042: 42)."""
    tail = name.rpartition("/")[2]
    digits = tail[len(prefix) :] if tail.startswith(prefix) else ""
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 10):
        raise ZkDataError(f"{name!r} is not a sequential znode named {prefix}<10 digits>")
    return int(digits)


# -- JSON helpers ---------------------------------------------------------------


def _preview(data: bytes) -> str:
    return repr(data[:120]) + ("..." if len(data) > 120 else "")


def _parse(kind: str, data: bytes | None) -> dict[str, Any]:
    """The znode's JSON object, or ZkDataError."""
    if data is None or not data:
        raise ZkDataError(f"{kind}: the znode has no data")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ZkDataError(f"{kind}: not JSON ({exc}): {_preview(data)}") from None
    if not isinstance(value, dict):
        raise ZkDataError(f"{kind}: expected a JSON object, got {type(value).__name__}")
    return value


def _check_int(what: str, value: object, lo: int, hi: int) -> int:
    # bool is an int in Python but never a number in Kafka's JSON.
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ZkDataError(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


class _Fields:
    """Typed reads of one JSON object's fields, each failure a ZkDataError naming the znode kind."""

    def __init__(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.kind = kind
        self.obj = obj

    def fail(self, message: str) -> ZkDataError:
        return ZkDataError(f"{self.kind}: {message}")

    def _get(self, key: str) -> Any:
        if key not in self.obj:
            raise self.fail(f"field {key!r} is missing")
        return self.obj[key]

    def num(
        self, key: str, lo: int = INT32_MIN, hi: int = INT32_MAX, default: int | None = None
    ) -> int:
        """An integer field; `default` when given and the field is missing or null."""
        if default is not None and self.obj.get(key) is None:
            return default
        try:
            return _check_int(f"field {key!r}", self._get(key), lo, hi)
        except ZkDataError as exc:
            raise self.fail(str(exc)) from None

    def text(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            raise self.fail(f"field {key!r} must be a string, got {value!r}")
        return value

    def opt_text(self, key: str) -> str | None:
        """A string field that may be missing or null."""
        return None if self.obj.get(key) is None else self.text(key)

    def int_string(self, key: str, lo: int, hi: int) -> int:
        """An integer Kafka writes as a JSON string ("timestamp", "block_start")."""
        value = self._get(key)
        if not (isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value)):
            raise self.fail(f"field {key!r} must be a decimal string, got {value!r}")
        number = int(value)
        if not lo <= number <= hi:
            raise self.fail(f"field {key!r} must be in [{lo}, {hi}], got {number}")
        return number

    def opt_int_string(self, key: str, lo: int, hi: int) -> int | None:
        return None if self.obj.get(key) is None else self.int_string(key, lo, hi)

    def mapping(self, key: str, required: bool = True) -> dict[str, Any]:
        """A JSON object field; when not `required`, missing or null reads as empty."""
        if not required and self.obj.get(key) is None:
            return {}
        value = self._get(key)
        if not isinstance(value, dict):
            raise self.fail(f"field {key!r} must be a JSON object, got {value!r}")
        return value

    def array(self, key: str) -> list[Any]:
        value = self._get(key)
        if not isinstance(value, list):
            raise self.fail(f"field {key!r} must be a JSON array, got {value!r}")
        return value

    def ids(self, what: str, value: object) -> tuple[int, ...]:
        if not isinstance(value, list):
            raise self.fail(f"{what} must be a JSON array of broker ids, got {value!r}")
        try:
            return tuple(_check_int(f"{what} broker id", v, 0, INT32_MAX) for v in value)
        except ZkDataError as exc:
            raise self.fail(str(exc)) from None

    def partition_key(self, key: str) -> int:
        if not (key.isascii() and key.isdigit() and len(key) <= 10 and int(key) <= INT32_MAX):
            raise self.fail(f"{key!r} is not a partition number")
        return int(key)


def _encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _topic_partitions(f: _Fields, items: list[Any], with_replicas: bool = False) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise f.fail(f"each partition must be a JSON object, got {item!r}")
        entry = _Fields(f.kind, item)
        tp = TopicPartition(entry.text("topic"), entry.num("partition", 0, INT32_MAX))
        out.append((tp, f.ids("replicas", item.get("replicas"))) if with_replicas else tp)
    return out


# -- /cluster/id ------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _encode({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    f = _Fields("cluster id", _parse("cluster id", data))
    cluster_id = f.text("id")
    if not cluster_id:
        raise f.fail("the id is empty")
    return cluster_id


# -- /brokers/ids/<id> --------------------------------------------------------------

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's endpoint form: LISTENER://host:port, an IPv6 host in brackets.
_ENDPOINT = re.compile(r"^([A-Za-z0-9_.\-]+)://\[?([0-9A-Za-z\-%._:]*)\]?:(-?[0-9]{1,5})$")


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener: clients reach `host`:`port` and speak `security_protocol`."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class SupportedFeature:
    """A feature version range the broker supports (KIP-584)."""

    name: str
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker, as /brokers/ids/<id> describes it (its epoch is the znode's czxid)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int | None = None
    features: tuple[SupportedFeature, ...] = ()
    # The JSON version it was read from (5 is what Kafka 3.9 writes).
    version: int = 5

    @property
    def plaintext(self) -> EndPoint | None:
        """The first PLAINTEXT endpoint: the top-level host and port old clients read."""
        return next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)


def encode_broker_registration(reg: BrokerRegistration, timestamp_ms: int) -> bytes:
    """Version 5 JSON (Kafka 3.9's); `timestamp_ms` is the registration time."""
    plain = reg.plaintext
    obj: dict[str, Any] = {
        "features": {
            f.name: {"min_version": f.min_version, "max_version": f.max_version}
            for f in reg.features
        },
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in reg.endpoints},
        "endpoints": [e.connection_string for e in reg.endpoints],
        "jmx_port": reg.jmx_port,
        "port": plain.port if plain else -1,
        "host": plain.host if plain else None,
        "version": 5,
        "timestamp": str(timestamp_ms),
    }
    if reg.rack is not None:
        obj["rack"] = reg.rack
    return _encode(obj)


def decode_broker_registration(broker_id: int, data: bytes | None) -> BrokerRegistration:
    kind = f"registration of broker {broker_id}"
    f = _Fields(kind, _parse(kind, data))
    version = f.num("version", 1, INT32_MAX)
    jmx_port = f.num("jmx_port", -1, 65535)
    if version == 1:
        host = f.text("host")
        endpoints: tuple[EndPoint, ...] = (
            EndPoint("PLAINTEXT", host, f.num("port", 0, 65535), "PLAINTEXT"),
        )
    else:
        protocols = f.mapping("listener_security_protocol_map", required=False)
        if "listener_security_protocol_map" not in f.obj:
            protocols = {p: p for p in SECURITY_PROTOCOLS}
        for name, proto in protocols.items():
            if proto not in SECURITY_PROTOCOLS:
                raise f.fail(f"listener {name!r} has unknown security protocol {proto!r}")
        found = []
        for text in f.array("endpoints"):
            match = _ENDPOINT.match(text) if isinstance(text, str) else None
            if match is None:
                raise f.fail(f"{text!r} is not an endpoint (LISTENER://host:port)")
            listener, host, port = match.group(1), match.group(2), int(match.group(3))
            if listener not in protocols:
                raise f.fail(f"listener {listener!r} has no security protocol in the map")
            if not 0 <= port <= 65535:
                raise f.fail(f"endpoint {text!r} has port {port} out of range")
            found.append(EndPoint(listener, host, port, protocols[listener]))
        endpoints = tuple(found)
    rack = f.opt_text("rack")
    features = []
    for name, versions in f.mapping("features", required=False).items():
        if not isinstance(versions, dict):
            raise f.fail(f"feature {name!r} must be a JSON object, got {versions!r}")
        vf = _Fields(f"{kind}, feature {name!r}", versions)
        features.append(
            SupportedFeature(name, vf.num("min_version", 0, 32767), vf.num("max_version", 0, 32767))
        )
    timestamp = f.opt_int_string("timestamp", 0, INT64_MAX)
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=endpoints,
        rack=rack,
        jmx_port=jmx_port,
        timestamp_ms=timestamp,
        features=tuple(features),
        version=version,
    )


# -- /brokers/topics/<t> --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One partition's replicas, and those a reassignment is adding or removing."""

    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """/brokers/topics/<t>: which brokers hold each partition of the topic (sorted by partition)."""

    partitions: tuple[ReplicaAssignment, ...]
    topic_id: uuid.UUID | None = None

    @classmethod
    def of(
        cls, replicas: Mapping[int, Sequence[int]], topic_id: uuid.UUID | None = None
    ) -> TopicAssignment:
        return cls(
            tuple(ReplicaAssignment(p, tuple(r)) for p, r in sorted(replicas.items())), topic_id
        )

    def replicas(self) -> dict[int, list[int]]:
        return {a.partition: list(a.replicas) for a in self.partitions}


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    parts = assignment.partitions
    obj: dict[str, Any] = {
        "partitions": {str(a.partition): list(a.replicas) for a in parts},
        "adding_replicas": {
            str(a.partition): list(a.adding_replicas) for a in parts if a.adding_replicas
        },
        "removing_replicas": {
            str(a.partition): list(a.removing_replicas) for a in parts if a.removing_replicas
        },
        "version": 3,
    }
    if assignment.topic_id is not None:
        obj["topic_id"] = encode_topic_id(assignment.topic_id)
    return _encode(obj)


def decode_topic_assignment(data: bytes | None) -> TopicAssignment:
    f = _Fields("topic assignment", _parse("topic assignment", data))
    topic_id = None
    text = f.opt_text("topic_id")
    if text is not None:
        try:
            if not re.fullmatch(r"[A-Za-z0-9_-]{22}", text):
                raise ValueError("not 22 characters of URL-safe base64")
            topic_id = decode_topic_id(text)
        except ValueError as exc:
            raise f.fail(f"topic_id {text!r} is not a Kafka topic id ({exc})") from None
    adding = f.mapping("adding_replicas", required=False)
    removing = f.mapping("removing_replicas", required=False)
    out: dict[int, ReplicaAssignment] = {}
    for key, replicas in f.mapping("partitions", required=False).items():
        partition = f.partition_key(key)
        if partition in out:
            raise f.fail(f"partition {partition} is listed twice")
        out[partition] = ReplicaAssignment(
            partition,
            f.ids(f"partition {key} replicas", replicas),
            f.ids(f"partition {key} adding_replicas", adding.get(key, [])),
            f.ids(f"partition {key} removing_replicas", removing.get(key, [])),
        )
    return TopicAssignment(tuple(out[p] for p in sorted(out)), topic_id)


# -- /brokers/topics/<t>/partitions/<p>/state -------------------------------------------

LEADER_RECOVERED, LEADER_RECOVERING = 0, 1
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership as its state znode holds it.

    `zk_version` is the znode's version when read (Kafka's partition epoch): a
    conditional update of the state names it. It is not part of the JSON.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERED
    zk_version: int = 0

    def to_partition_state(self, replicas: Sequence[int]) -> PartitionState:
        """The broker's view of the partition: replicas come from the topic's assignment."""
        return PartitionState(
            replicas=list(replicas),
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            isr=list(self.isr),
            controller_epoch=self.controller_epoch,
            version=self.zk_version,
        )

    @classmethod
    def from_partition_state(cls, state: PartitionState) -> LeaderAndIsr:
        return cls(
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            controller_epoch=state.controller_epoch,
            zk_version=state.version,
        )


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    obj: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state != LEADER_RECOVERED:
        obj["leader_recovery_state"] = state.leader_recovery_state
    return _encode(obj)


def decode_partition_state(data: bytes | None, zk_version: int = 0) -> LeaderAndIsr:
    f = _Fields("partition state", _parse("partition state", data))
    recovery = f.num("leader_recovery_state", default=LEADER_RECOVERED)
    if recovery not in (LEADER_RECOVERED, LEADER_RECOVERING):
        raise f.fail(f"leader_recovery_state {recovery} is neither 0 (recovered) nor 1")
    return LeaderAndIsr(
        leader=f.num("leader", NO_LEADER, INT32_MAX),
        leader_epoch=f.num("leader_epoch", -1, INT32_MAX),
        isr=f.ids("isr", f.obj.get("isr")),
        controller_epoch=f.num("controller_epoch", -1, INT32_MAX),
        leader_recovery_state=recovery,
        zk_version=zk_version,
    )


# -- /controller and /controller_epoch ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """The ephemeral /controller: which broker is the controller."""

    broker_id: int
    timestamp_ms: int | None = None
    # -1 for a ZooKeeper-mode controller (a KRaft controller during migration writes its epoch).
    kraft_controller_epoch: int = -1


def encode_controller(reg: ControllerRegistration, timestamp_ms: int) -> bytes:
    return _encode(
        {
            "version": 2,
            "brokerid": reg.broker_id,
            "timestamp": str(timestamp_ms),
            "kraftControllerEpoch": reg.kraft_controller_epoch,
        }
    )


def decode_controller(data: bytes | None) -> ControllerRegistration:
    f = _Fields("controller", _parse("controller", data))
    f.num("version", 1, INT32_MAX)
    return ControllerRegistration(
        broker_id=f.num("brokerid", 0, INT32_MAX),
        timestamp_ms=f.opt_int_string("timestamp", 0, INT64_MAX),
        kraft_controller_epoch=f.num("kraftControllerEpoch", -1, default=-1),
    )


def encode_controller_epoch(epoch: int) -> bytes:
    return str(_check_int("controller epoch", epoch, 0, INT32_MAX)).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    text = (data or b"").strip()
    if not re.fullmatch(rb"\+?[0-9]{1,10}", text) or int(text) > INT32_MAX:
        raise ZkDataError(f"controller epoch: {_preview(data or b'')} is not a decimal epoch")
    return int(text)


# -- /config ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntityConfig:
    """/config/<type>/<name>: the entity's dynamic configs (sorted name-value pairs)."""

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, configs: Mapping[str, str]) -> EntityConfig:
        return cls(tuple(sorted(configs.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)


def encode_entity_config(config: EntityConfig) -> bytes:
    return _encode({"version": 1, "config": dict(config.entries)})


def decode_entity_config(data: bytes | None) -> EntityConfig:
    """No data reads as no configs, as in Kafka."""
    if not data:
        return EntityConfig()
    f = _Fields("entity config", _parse("entity config", data))
    configs = f.mapping("config", required=False)
    for name, value in configs.items():
        if not isinstance(value, str):
            raise f.fail(f"config {name!r} must be a string, got {value!r}")
    return EntityConfig.of(configs)


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """/config/changes/config_change_<seq>: the entity whose configs changed ("topics/t1")."""

    entity_path: str

    @property
    def entity_type(self) -> str:
        return self.entity_path.partition("/")[0]

    @property
    def entity_name(self) -> str:
        return self.entity_path.partition("/")[2]


def encode_config_change(change: ConfigChange) -> bytes:
    return _encode({"version": 2, "entity_path": change.entity_path})


def decode_config_change(data: bytes | None) -> ConfigChange:
    f = _Fields("config change", _parse("config change", data))
    version = f.num("version", 1, 2)
    if version == 1:
        path = f"{f.text('entity_type')}/{f.text('entity_name')}"
    else:
        path = f.text("entity_path")
    entity_type, _, entity_name = path.partition("/")
    if not entity_type or not entity_name:
        raise f.fail(f"entity path {path!r} is not <type>/<name>")
    return ConfigChange(path)


# -- /kafka-acl, /kafka-acl-extended and their change notifications -------------------

ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
# The ACL stores: LITERAL patterns under /kafka-acl, PREFIXED ones under
# /kafka-acl-extended/prefixed (Kafka names the folder after the lower-cased type).
ACL_STORES = {
    PatternType.LITERAL: ACL_PATH,
    PatternType.PREFIXED: f"{EXTENDED_ACL_PATH}/{PatternType.PREFIXED.name.lower()}",
}
# Each store's change notifications.
ACL_CHANGE_PATHS = {
    PatternType.LITERAL: ACL_CHANGES_PATH,
    PatternType.PREFIXED: EXTENDED_ACL_CHANGES_PATH,
}


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    """/kafka-acl/Topic, /kafka-acl-extended/prefixed/Group, ..."""
    store = ACL_STORES.get(pattern_type)
    if store is None:
        raise ZkDataError(f"ACLs of pattern type {pattern_type.name} are not stored")
    return f"{store}/{resource_type.kafka_name}"


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a resource pattern's ACLs (/kafka-acl/Topic/t1)."""
    name = pattern.name
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        raise ZkDataError(f"{name!r} cannot be the name of an ACL resource znode")
    return f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/{name}"


def acl_pattern_of_path(path: str) -> ResourcePattern:
    """The resource pattern whose ACLs live at ``path`` (the inverse of `acl_path`)."""
    for pattern_type, store in ACL_STORES.items():
        if path.startswith(store + "/"):
            kind, slash, name = path[len(store) + 1 :].partition("/")
            resource_type = ResourceType.parse(kind)
            if slash and name and resource_type in CONCRETE_RESOURCE_TYPES:
                return ResourcePattern(resource_type, name, pattern_type)
    raise ZkDataError(f"{path!r} is not the path of a resource's ACLs")


def acls_to_json(entries: Iterable[AccessControlEntry]) -> dict[str, Any]:
    """A resource's ACLs as Kafka's JSON object (what its znode holds)."""
    return {
        "acls": [
            {
                "principal": e.principal,
                "permissionType": e.permission.kafka_name,
                "host": e.host,
                "operation": e.operation.kafka_name,
            }
            for e in sorted(entries)
        ],
        "version": 1,
    }


def acls_from_json(obj: Mapping[str, Any]) -> frozenset[AccessControlEntry]:
    """A resource's ACLs from Kafka's JSON object. An entry naming an operation or
    permission type Kafka does not know, or a principal without a type, could never
    match a request, so it is left out (Kafka keeps it, to the same effect)."""
    f = _Fields("ACLs", obj)
    f.num("version", 1, 1)
    out = set()
    for item in f.array("acls"):
        if not isinstance(item, dict):
            raise f.fail(f"each ACL must be a JSON object, got {item!r}")
        a = _Fields("ACL", item)
        principal, host = a.text("principal"), a.text("host")
        operation = AclOperation.parse(a.text("operation"))
        permission = PermissionType.parse(a.text("permissionType"))
        if (
            operation in (None, AclOperation.UNKNOWN, AclOperation.ANY)
            or permission not in (PermissionType.ALLOW, PermissionType.DENY)
            or ":" not in principal
        ):
            continue
        assert operation is not None and permission is not None
        out.add(AccessControlEntry(principal, host, operation, permission))
    return frozenset(out)


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    return _encode(acls_to_json(entries))


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """No data reads as no ACLs, as in Kafka."""
    if not data:
        return frozenset()
    return acls_from_json(_parse("ACLs", data))


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """A change notification: "TOPIC:t1" for a LITERAL pattern (the resource type's enum
    name, as Kafka writes it), Kafka's version 1 JSON for a PREFIXED one."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _encode(
        {
            "version": 1,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        }
    )


def decode_acl_change(changes_path: str, data: bytes | None) -> ResourcePattern:
    """The resource pattern a notification under ``changes_path`` announces."""
    if changes_path == ACL_CHANGES_PATH:
        try:
            text = (data or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise ZkDataError(f"ACL change: not UTF-8: {_preview(data or b'')}") from None
        kind, colon, name = text.partition(":")
        resource_type = ResourceType.parse(kind)
        if not colon or not name or resource_type not in CONCRETE_RESOURCE_TYPES:
            raise ZkDataError(f"ACL change: {text[:120]!r} is not ResourceType:name")
        return ResourcePattern(resource_type, name, PatternType.LITERAL)
    f = _Fields("extended ACL change", _parse("extended ACL change", data))
    f.num("version", 0, 1)
    resource_type = ResourceType.parse(f.text("resourceType"))
    pattern_type = PatternType.parse(f.text("patternType"))
    name = f.text("name")
    if resource_type not in CONCRETE_RESOURCE_TYPES or pattern_type not in ACL_STORES or not name:
        raise f.fail(f"{f.obj!r} does not name a stored resource pattern")
    assert resource_type is not None and pattern_type is not None
    return ResourcePattern(resource_type, name, pattern_type)


# -- /admin ---------------------------------------------------------------------------


def encode_partition_reassignment(moves: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    """/admin/reassign_partitions (the legacy, pre-2.4 way to move replicas)."""
    items = sorted(moves.items())
    return _encode(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
                for tp, r in items
            ],
        }
    )


def decode_partition_reassignment(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    f = _Fields("partition reassignment", _parse("partition reassignment", data))
    f.num("version", 1, 1)
    return dict(_topic_partitions(f, f.array("partitions"), with_replicas=True))


def _encode_partition_set(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition} for tp in sorted(set(partitions))
            ],
        }
    )


def _decode_partition_set(kind: str, data: bytes | None) -> frozenset[TopicPartition]:
    f = _Fields(kind, _parse(kind, data))
    f.num("version", 1, INT32_MAX, default=1)
    return frozenset(_topic_partitions(f, f.array("partitions")))


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode_partition_set(partitions)


def decode_preferred_replica_election(data: bytes | None) -> frozenset[TopicPartition]:
    return _decode_partition_set("preferred replica election", data)


# -- /isr_change_notification, /log_dir_event_notification -----------------------------


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode_partition_set(partitions)


def decode_isr_change(data: bytes | None) -> frozenset[TopicPartition]:
    return _decode_partition_set("isr change notification", data)


LOG_DIR_FAILURE_EVENT = 1


def encode_log_dir_event(broker_id: int) -> bytes:
    return _encode({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes | None) -> int:
    """The broker that reported a failed log directory."""
    f = _Fields("log dir event", _parse("log dir event", data))
    return f.num("broker", 0, INT32_MAX)


# -- /latest_producer_id_block ------------------------------------------------------------

PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids `first`..`last` (inclusive), handed to `broker_id`."""

    broker_id: int
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    @property
    def next_first(self) -> int:
        return self.last + 1


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _encode(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.first),
            "block_end": str(block.last),
        }
    )


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock | None:
    """None when the znode has no data yet (no block was ever handed out)."""
    if not data:
        return None
    f = _Fields("producer id block", _parse("producer id block", data))
    f.num("version", 1, 1, default=1)
    first = f.int_string("block_start", 0, INT64_MAX)
    last = f.int_string("block_end", 0, INT64_MAX)
    if last < first:
        raise f.fail(f"block_end {last} is before block_start {first}")
    return ProducerIdBlock(f.num("broker", -1, INT32_MAX), first, last)


# -- /feature -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """/feature: whether feature versioning is on (status 1) and each feature's finalized level."""

    enabled: bool
    features: tuple[tuple[str, int], ...] = ()


def encode_features(value: FinalizedFeatures) -> bytes:
    return _encode(
        {
            "features": {name: {"max_version_level": level} for name, level in value.features},
            "version": 2,
            "status": 1 if value.enabled else 0,
        }
    )


def decode_features(data: bytes | None) -> FinalizedFeatures:
    f = _Fields("features", _parse("features", data))
    version = f.num("version", 1, 2)
    status = f.num("status", 0, 1)
    features = []
    for name, levels in f.mapping("features").items():
        if not isinstance(levels, dict):
            raise f.fail(f"feature {name!r} must be a JSON object, got {levels!r}")
        lf = _Fields(f"features, {name!r}", levels)
        if version == 1:
            lf.num("min_version_level", 1, 32767)
        features.append((name, lf.num("max_version_level", 1, 32767)))
    return FinalizedFeatures(status == 1, tuple(sorted(features)))
