"""Broker and topic settings: the one table of names, types, defaults and checks.

Every setting kbroker understands is declared once here with its standard
Kafka name. A topic-level setting (``retention.ms``) names the broker setting
that supplies its default (``log.retention.ms``), as in Kafka; DescribeConfigs,
the CLI and the log layer all read this table.

Every other setting of Kafka 3.9.1 (kafka_settings, generated from a real broker by
bench/kafka/config_catalogue.py) is known too, with Kafka's type and default, so a
server.properties written for Kafka starts kbroker and admin tools read every name.
Those settings are read-only (nothing changes while kbroker runs) and follow one rule:
a tuning knob of Kafka's own implementation (thread counts, socket buffers, quota
windows, purgatories, metrics sampling, KRaft and Kerberos timings, settings Kafka 3.x
itself ignores) is accepted with any valid value and has no effect; a value other
than Kafka's default is refused, with a one-line reason, where it would promise
behaviour kbroker does not have: a Java plug-in class or metrics reporter, the switches
of KRaft and of the migration to it, tiered storage, delegation tokens, eligible leader
replicas, TLS or ACLs towards ZooKeeper, a separate control plane listener, connection
limits, and ``log.dir`` and a broker-wide ``sasl.jaas.config`` (kbroker reads
``log.dirs`` and each listener's JAAS configuration) (``refusal_reason``). Kafka's
dynamic-only replication throttles are known too, and take only their default (no limit).
Unknown names are refused.
"""

from __future__ import annotations

import enum
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from kbroker import kafka_settings

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
DOUBLE_MAX = sys.float_info.max
INT_MAX = 2**31 - 1


class ConfigType(enum.IntEnum):
    """Kafka's config types, as DescribeConfigs v3+ reports them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigError(ValueError):
    """A setting with an unknown name or a value it cannot take."""


class UnsupportedSetting(ConfigError):
    """A value for a setting kbroker does not support yet (`Setting.unsupported`)."""


Value = int | float | bool | str | list[str] | None


@dataclass(frozen=True)
class Setting:
    name: str
    type: ConfigType
    default: Value
    doc: str
    # Inclusive bounds for numbers; allowed values for strings and lists.
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    # Settings a running broker cannot change.
    read_only: bool = False
    # Broker settings whose value, when given, is used for this one, with a
    # factor (log.retention.hours * 3600000 -> log.retention.ms).
    fallbacks: tuple[tuple[str, int], ...] = ()
    # Not supported yet: why. A value given for it (settings file, --set,
    # AlterConfigs, a topic override) is refused with this reason instead of
    # being accepted and ignored; the default stands meanwhile.
    unsupported: str | None = None
    # Values of an unsupported setting that today's code does honour (e.g.
    # preallocate=false: nothing is preallocated), so they are accepted.
    honoured: tuple[Value, ...] = ()

    @property
    def supported(self) -> bool:
        return self.unsupported is None

    def parse(self, raw: Any) -> Value:
        """Turns a string (from a properties file or the wire) into a checked value.

        The one place where a value for a setting that is not supported yet is
        refused (`UnsupportedSetting`).
        """
        if raw is None:
            if self.nullable:
                return None
            raise ConfigError(f"{self.name}: a value is required")
        try:
            value = self._convert(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"{self.name}: {raw!r} is not a valid {self.type.name.lower()}"
            ) from exc
        self.check(value)
        if self.unsupported is not None and value not in self.honoured:
            raise UnsupportedSetting(f"{self.name}: {self.unsupported}")
        return value

    def _convert(self, raw: Any) -> Value:
        t = self.type
        if t is ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(text)
            return text == "true"
        if t in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            if isinstance(raw, bool):
                raise TypeError("bool")
            return int(str(raw).strip()) if not isinstance(raw, int) else raw
        if t is ConfigType.DOUBLE:
            return float(str(raw).strip())
        if t is ConfigType.LIST:
            if isinstance(raw, list):
                return [str(x) for x in raw]
            return [part.strip() for part in str(raw).split(",") if part.strip()]
        return str(raw).strip()

    def check(self, value: Value) -> None:
        if value is None:
            return
        if isinstance(value, int | float) and not isinstance(value, bool):
            lo, hi = self.min, self.max
            if self.type is ConfigType.INT:
                lo = -(2**31) if lo is None else lo
                hi = INT_MAX if hi is None else hi
            elif self.type is ConfigType.LONG:
                lo = -(2**63) if lo is None else lo
                hi = LONG_MAX if hi is None else hi
            if lo is not None and value < lo:
                raise ConfigError(f"{self.name}: {value} is below the minimum {lo:g}")
            if hi is not None and value > hi:
                raise ConfigError(f"{self.name}: {value} is above the maximum {hi:g}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [str(value)]
            for item in items:
                if item not in self.choices:
                    raise ConfigError(
                        f"{self.name}: {item!r} is not one of {', '.join(self.choices)}"
                    )

    def render(self, value: Value) -> str | None:
        """The string form DescribeConfigs and properties files use (doubles as Java
        prints them, as Kafka's tools and clients see them from Kafka)."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return ",".join(value)
        if isinstance(value, float):
            return java_double(value)
        return str(value)


def java_double(value: float) -> str:
    """``value`` as Java's Double.toString writes it: the shortest digits that read back
    to it, plain from 10^-3 to 10^7 (``0.5``, ``100.0``), else ``1.7976931348623157E308``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign = "-" if value < 0 else ""
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    power = len(text) - 1 + exponent  # value = d.ddd * 10^power
    if -3 <= power < 7:
        if power >= 0:
            whole, frac = text[: power + 1].ljust(power + 1, "0"), text[power + 1 :]
        else:
            whole, frac = "0", "0" * (-power - 1) + text
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{text[0]}.{text[1:] or '0'}E{power}"


@dataclass(frozen=True)
class TopicSetting:
    """A topic-level setting and the broker setting that supplies its default (None: no
    broker setting does; ``own`` is then its declaration)."""

    name: str
    broker_setting: str | None
    own: Setting | None = None


_S = ConfigType
_DAY_MS = 24 * 3600 * 1000

# Settings a listener may override as listener.name.<listener>.<setting> (Kafka's
# listener-scoped settings): TLS, SASL and re-authentication. The keystore's may
# change while the broker runs (new certificates, per broker); the others need a
# restart.
SECURITY_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "ssl.protocol",
        _S.STRING,
        "TLSv1.3",
        "The TLS protocol of the broker's own outgoing connections (the highest it offers).",
        choices=("TLSv1.2", "TLSv1.3", "TLS"),
        read_only=True,
    ),
    Setting(
        "ssl.enabled.protocols",
        _S.LIST,
        ["TLSv1.2", "TLSv1.3"],
        "TLS versions accepted.",
        choices=("TLSv1.2", "TLSv1.3"),
        read_only=True,
    ),
    Setting(
        "ssl.cipher.suites",
        _S.LIST,
        [],
        "TLS 1.2 cipher suites offered (OpenSSL or IANA names); empty: OpenSSL's secure "
        "defaults. TLS 1.3 suites are always OpenSSL's.",
        read_only=True,
    ),
    Setting(
        "ssl.client.auth",
        _S.STRING,
        "none",
        "Whether a client must present a certificate: none, requested, required.",
        choices=("none", "requested", "required"),
        read_only=True,
    ),
    Setting(
        "ssl.endpoint.identification.algorithm",
        _S.STRING,
        "https",
        "https: the broker's outgoing connections check the other broker's host name against "
        "its certificate; empty: they do not.",
        choices=("https", ""),
        read_only=True,
    ),
    Setting(
        "ssl.keystore.type",
        _S.STRING,
        "JKS",
        "The keystore's format; PEM is supported.",
        choices=("JKS", "PKCS12", "PEM"),
        unsupported="JKS and PKCS12 keystores are not supported yet: convert the keystore to "
        "PEM (a PKCS#8 key and its certificate chain in one file) and set ssl.keystore.type=PEM",
        honoured=("PEM",),
    ),
    Setting(
        "ssl.keystore.location",
        _S.STRING,
        None,
        "A PEM file holding the private key (PKCS#8) and the certificate chain.",
        nullable=True,
    ),
    Setting(
        "ssl.keystore.password",
        _S.PASSWORD,
        None,
        "The keystore's password (unused for PEM: see ssl.key.password).",
        nullable=True,
    ),
    Setting(
        "ssl.key.password",
        _S.PASSWORD,
        None,
        "The password of an encrypted private key.",
        nullable=True,
    ),
    Setting(
        "ssl.keystore.certificate.chain",
        _S.PASSWORD,
        None,
        "The certificate chain in PEM, given inline (instead of ssl.keystore.location).",
        nullable=True,
    ),
    Setting(
        "ssl.keystore.key",
        _S.PASSWORD,
        None,
        "The private key in PEM (PKCS#8), given inline (instead of ssl.keystore.location).",
        nullable=True,
    ),
    Setting(
        "ssl.truststore.type",
        _S.STRING,
        "JKS",
        "The truststore's format; PEM is supported.",
        choices=("JKS", "PKCS12", "PEM"),
        unsupported="JKS and PKCS12 truststores are not supported yet: convert the "
        "truststore to PEM certificates and set ssl.truststore.type=PEM",
        honoured=("PEM",),
        read_only=True,
    ),
    Setting(
        "ssl.truststore.location",
        _S.STRING,
        None,
        "A PEM file of the certificate authorities trusted; unset: the system's.",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "ssl.truststore.password",
        _S.PASSWORD,
        None,
        "The truststore's password (unused for PEM).",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "ssl.truststore.certificates",
        _S.PASSWORD,
        None,
        "Trusted certificates in PEM, given inline (instead of ssl.truststore.location).",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "ssl.allow.dn.changes",
        _S.BOOLEAN,
        False,
        "Whether a keystore changed while the broker runs may hold a certificate for another "
        "distinguished name.",
        read_only=True,
    ),
    Setting(
        "ssl.allow.san.changes",
        _S.BOOLEAN,
        False,
        "Whether a keystore changed while the broker runs may hold a certificate without some "
        "of the old one's subject alternative names.",
        read_only=True,
    ),
    Setting(
        "ssl.principal.mapping.rules",
        _S.STRING,
        "DEFAULT",
        "Rules mapping a client certificate's distinguished name to a user name "
        "(RULE:pattern/replacement/[LU], ..., DEFAULT).",
        read_only=True,
    ),
    Setting(
        "sasl.enabled.mechanisms",
        _S.LIST,
        ["GSSAPI"],
        "SASL mechanisms SASL listeners offer; PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are "
        "supported.",
        read_only=True,
    ),
    Setting(
        "sasl.server.max.receive.size",
        _S.INT,
        524288,
        "Largest SASL token a client may send before it is authenticated.",
        min=1,
        read_only=True,
    ),
    Setting(
        "connections.max.reauth.ms",
        _S.LONG,
        0,
        "A SASL session's lifetime: the client must authenticate again before it ends, or the "
        "connection is closed at its next request (KIP-368); 0: sessions do not expire.",
        min=0,
        read_only=True,
    ),
)

BROKER_SETTINGS: tuple[Setting, ...] = (
    Setting("broker.id", _S.INT, 0, "This broker's id.", min=0, read_only=True),
    Setting(
        "cluster.id",
        _S.STRING,
        None,
        "Cluster id (made at first start when absent).",
        nullable=True,
        read_only=True,
        unsupported="not supported yet: a node makes its cluster id at its first start and "
        "keeps it in meta.properties in its data directory (`kbroker cluster brokers` shows it); "
        "remove the setting",
    ),
    Setting("log.dirs", _S.STRING, "./data", "The data directory.", read_only=True),
    Setting(
        "listeners",
        _S.STRING,
        "PLAINTEXT://127.0.0.1:9092",
        "Where the broker listens.",
        read_only=True,
    ),
    Setting(
        "advertised.listeners",
        _S.STRING,
        None,
        "Where clients are told to connect, per listener (NAME://HOST:PORT,...); unset: "
        "the listeners' own addresses.",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "listener.security.protocol.map",
        _S.STRING,
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "Each listener name's security protocol (NAME:PROTOCOL,...).",
        read_only=True,
    ),
    Setting(
        "inter.broker.listener.name",
        _S.STRING,
        None,
        "The listener brokers use to reach each other; unset: the listener named by "
        "security.inter.broker.protocol.",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "security.inter.broker.protocol",
        _S.STRING,
        "PLAINTEXT",
        "The security protocol (and listener name) brokers use to reach each other, when "
        "inter.broker.listener.name is not set.",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        read_only=True,
    ),
    *SECURITY_SETTINGS,
    Setting(
        "zookeeper.connect",
        _S.STRING,
        None,
        "ZooKeeper ensemble (host:port[,host:port...][/chroot]) of the cluster this broker "
        "joins; none runs a single node that keeps its metadata in its data directory.",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "zookeeper.session.timeout.ms",
        _S.INT,
        18000,
        "ZooKeeper session timeout: a broker silent this long is dead to the cluster.",
        min=1,
        max=3_600_000,
        read_only=True,
    ),
    Setting(
        "zookeeper.connection.timeout.ms",
        _S.INT,
        None,
        "How long to wait for a ZooKeeper connection at start (none: the session timeout).",
        nullable=True,
        min=1,
        max=3_600_000,
        read_only=True,
    ),
    Setting(
        "controlled.shutdown.enable",
        _S.BOOLEAN,
        True,
        "On SIGTERM, ask the controller to move leadership off this broker before it stops.",
        read_only=True,
    ),
    Setting(
        "controlled.shutdown.max.retries",
        _S.INT,
        3,
        "Attempts at a controlled shutdown before the broker stops anyway.",
        min=0,
        read_only=True,
    ),
    Setting(
        "controlled.shutdown.retry.backoff.ms",
        _S.LONG,
        5000,
        "Wait between attempts at a controlled shutdown.",
        min=0,
        read_only=True,
    ),
    Setting(
        "auto.leader.rebalance.enable",
        _S.BOOLEAN,
        True,
        "The controller moves leadership back to preferred replicas when brokers are unbalanced.",
        read_only=True,
    ),
    Setting(
        "leader.imbalance.check.interval.seconds",
        _S.LONG,
        300,
        "How often the controller checks the leadership balance.",
        min=1,
        read_only=True,
    ),
    Setting(
        "leader.imbalance.per.broker.percentage",
        _S.INT,
        10,
        "Share of a broker's partitions led elsewhere that triggers a rebalance.",
        min=0,
        max=100,
        read_only=True,
    ),
    Setting(
        "broker.rack",
        _S.STRING,
        None,
        "This broker's rack: replicas of a partition are spread over racks.",
        nullable=True,
        read_only=True,
    ),
    Setting("num.partitions", _S.INT, 1, "Partitions of an auto-created topic.", min=1),
    Setting("default.replication.factor", _S.INT, 1, "Replicas of an auto-created topic.", min=1),
    Setting(
        "auto.create.topics.enable", _S.BOOLEAN, True, "Create topics on first Metadata or Produce."
    ),
    Setting("delete.topic.enable", _S.BOOLEAN, True, "Allow topic deletion."),
    Setting(
        "max.broker.partitions",
        _S.INT,
        100_000,
        "Most partitions this broker serves (KIP-578's name); CreateTopics and CreatePartitions "
        "beyond it are refused with POLICY_VIOLATION.",
        min=1,
    ),
    Setting(
        "message.max.bytes", _S.INT, 1048588, "Largest record batch the broker accepts.", min=0
    ),
    Setting("log.segment.bytes", _S.INT, 1073741824, "Size of a log segment file.", min=14),
    Setting(
        "log.roll.ms",
        _S.LONG,
        7 * _DAY_MS,
        "Longest time before a new segment is rolled.",
        min=1,
        fallbacks=(("log.roll.hours", 3600_000),),
    ),
    Setting("log.roll.hours", _S.INT, 168, "log.roll.ms in hours.", min=1),
    Setting(
        "log.retention.ms",
        _S.LONG,
        7 * _DAY_MS,
        "How long to keep data; -1 keeps it forever.",
        min=-1,
        fallbacks=(("log.retention.minutes", 60_000), ("log.retention.hours", 3600_000)),
    ),
    Setting("log.retention.minutes", _S.INT, None, "log.retention.ms in minutes.", nullable=True),
    Setting("log.retention.hours", _S.INT, 168, "log.retention.ms in hours."),
    Setting(
        "log.retention.bytes",
        _S.LONG,
        -1,
        "Largest size of a partition before old segments go; -1 no limit.",
        min=-1,
    ),
    Setting(
        "log.retention.check.interval.ms",
        _S.LONG,
        300_000,
        "How often retention is applied.",
        min=1,
    ),
    Setting(
        "log.flush.interval.messages",
        _S.LONG,
        LONG_MAX,
        "Messages written before a forced flush (M).",
        min=1,
    ),
    Setting(
        "log.flush.interval.ms",
        _S.LONG,
        None,
        "Longest time data sits unflushed (S); unset: log.flush.scheduler.interval.ms.",
        nullable=True,
        min=0,
    ),
    Setting(
        "log.flush.scheduler.interval.ms",
        _S.LONG,
        LONG_MAX,
        "How often logs are checked for a time-based flush.",
        min=0,
    ),
    Setting(
        "log.index.interval.bytes",
        _S.INT,
        4096,
        "Bytes of log between offset-index entries.",
        min=0,
    ),
    Setting("log.index.size.max.bytes", _S.INT, 10485760, "Largest offset-index file.", min=4),
    Setting(
        "log.cleanup.policy",
        _S.LIST,
        ["delete"],
        "delete, compact, or both.",
        choices=("delete", "compact"),
    ),
    Setting(
        "log.cleaner.delete.retention.ms",
        _S.LONG,
        _DAY_MS,
        "How long tombstones are kept on compacted topics.",
        min=0,
    ),
    Setting(
        "log.cleaner.min.cleanable.ratio",
        _S.DOUBLE,
        0.5,
        "Dirty ratio that makes a log eligible for cleaning.",
        min=0,
        max=1,
    ),
    Setting(
        "log.cleaner.min.compaction.lag.ms",
        _S.LONG,
        0,
        "Youngest age a record must reach before it is compacted.",
        min=0,
    ),
    Setting(
        "log.cleaner.max.compaction.lag.ms",
        _S.LONG,
        LONG_MAX,
        "Oldest age an uncompacted record may reach.",
        min=1,
    ),
    Setting(
        "log.cleaner.enable",
        _S.BOOLEAN,
        True,
        "Run the log cleaner (compaction of cleanup.policy=compact topics).",
    ),
    Setting(
        "log.cleaner.dedupe.buffer.size",
        _S.LONG,
        134217728,
        "Memory of the cleaner's key -> offset map; more keys than fit are cleaned in passes.",
        min=1024,
    ),
    Setting(
        "log.cleaner.io.buffer.size",
        _S.INT,
        524288,
        "Read and write buffer of the cleaner.",
        min=4096,
    ),
    Setting(
        "log.cleaner.io.buffer.load.factor",
        _S.DOUBLE,
        0.9,
        "How full the cleaner's map may get.",
        min=0.1,
        max=0.95,
    ),
    Setting(
        "log.cleaner.io.max.bytes.per.second",
        _S.DOUBLE,
        DOUBLE_MAX,
        "Cap on the cleaner's read + write rate.",
        min=1,
    ),
    Setting(
        "log.cleaner.backoff.ms",
        _S.LONG,
        15_000,
        "Sleep of the cleaner when no log needs cleaning.",
        min=0,
    ),
    Setting(
        "log.message.timestamp.type",
        _S.STRING,
        "CreateTime",
        "CreateTime or LogAppendTime.",
        choices=("CreateTime", "LogAppendTime"),
    ),
    Setting(
        "log.message.timestamp.before.max.ms",
        _S.LONG,
        LONG_MAX,
        "How far behind the broker's clock a CreateTime record's timestamp may be; an older "
        "record fails its batch with INVALID_TIMESTAMP.",
        min=0,
    ),
    Setting(
        "log.message.timestamp.after.max.ms",
        _S.LONG,
        LONG_MAX,
        "How far ahead of the broker's clock a CreateTime record's timestamp may be; a later "
        "record fails its batch with INVALID_TIMESTAMP.",
        min=0,
    ),
    Setting(
        "log.message.timestamp.difference.max.ms",
        _S.LONG,
        LONG_MAX,
        "Deprecated: the before and after bounds where those are left at their default.",
        min=0,
    ),
    Setting(
        "log.segment.delete.delay.ms",
        _S.LONG,
        60_000,
        "Wait before a deleted segment's files are removed.",
        min=0,
    ),
    Setting(
        "log.max.open.files",
        _S.INT,
        None,
        "Most segment files kept open at once; idle ones are closed and reopened on use. Unset: "
        "half the RLIMIT_NOFILE soft limit at start (kbroker's own setting).",
        nullable=True,
        min=16,
        read_only=True,
    ),
    Setting(
        "num.io.threads",
        _S.INT,
        8,
        "Threads that write the partitions' logs (appends, and the fdatasyncs flush.messages "
        "asks for) off the event loop, each partition's writes in order; 0 writes on the "
        "event loop (kbroker's own value).",
        min=0,
    ),
    Setting(
        "log.preallocate",
        _S.BOOLEAN,
        False,
        "Preallocate segment files.",
        # Preallocating needs every reader of segment files (recovery, the
        # file cache, `log verify`, dump-log, sizes) to tell a zero-filled
        # tail from data; until then only false, what the log does, is taken.
        unsupported="preallocation is not supported yet (segment files grow as they are "
        "written); remove it or set it to false",
        honoured=(False,),
    ),
    Setting(
        "compression.type",
        _S.STRING,
        "producer",
        "Compression of stored batches; producer keeps what came.",
        choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    ),
    Setting(
        "min.insync.replicas", _S.INT, 1, "Replicas that must acknowledge an acks=all write.", min=1
    ),
    Setting(
        "unclean.leader.election.enable",
        _S.BOOLEAN,
        False,
        "Allow a replica outside the ISR to become leader (acknowledged records may be lost).",
    ),
    Setting(
        "socket.request.max.bytes",
        _S.INT,
        104857600,
        "Largest request the broker reads.",
        min=1,
        read_only=True,
    ),
    Setting(
        "queued.max.request.bytes",
        _S.LONG,
        268435456,
        "Memory for requests, shared by all connections: a request's whole size is reserved when "
        "its size header is read, and a connection stops reading while the pool cannot grant it. "
        "Requests over 1 MiB together get at most 3/4 of it (a lone one, all that is free), so "
        "huge slow uploads leave room for small requests. At least socket.request.max.bytes; -1 no"
        " bound (Kafka's default). 256 MiB bounds request memory whatever clients send, yet takes "
        "a request of the default largest size beside ordinary traffic.",
        min=-1,
        read_only=True,
    ),
    Setting(
        "connections.max.idle.ms",
        _S.LONG,
        600_000,
        "Idle connections are closed after this (read at start).",
        min=1,
        read_only=True,
    ),
    Setting(
        "sasl.mechanism.inter.broker.protocol",
        _S.STRING,
        "GSSAPI",
        "The SASL mechanism brokers authenticate to each other with, on a SASL inter-broker "
        "listener.",
        read_only=True,
    ),
    Setting(
        "connection.failed.authentication.delay.ms",
        _S.INT,
        100,
        "How long a failed authentication waits before its answer and the close.",
        min=0,
        read_only=True,
    ),
    Setting(
        "principal.builder.class",
        _S.CLASS,
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        "How principals are built: Kafka's default rules (User:<SASL name>, the mapped "
        "certificate name, or User:ANONYMOUS).",
        choices=("org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",),
        read_only=True,
    ),
    Setting(
        "authorizer.class.name",
        _S.STRING,
        "",
        "The ACL authorizer: Kafka's kafka.security.authorizer.AclAuthorizer or "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer name kbroker's own; empty: "
        "nothing is checked.",
        choices=(
            "",
            "kafka.security.authorizer.AclAuthorizer",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        read_only=True,
    ),
    Setting(
        "super.users",
        _S.STRING,
        None,
        "Principals allowed everything (User:a;User:b).",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "allow.everyone.if.no.acl.found",
        _S.BOOLEAN,
        False,
        "Allow a resource that has no ACL at all to everyone.",
        read_only=True,
    ),
    Setting(
        "quota.window.num",
        _S.INT,
        11,
        "How many samples client quotas keep.",
        min=1,
        read_only=True,
    ),
    Setting(
        "quota.window.size.seconds",
        _S.INT,
        1,
        "How long one client quota sample lasts.",
        min=1,
        read_only=True,
    ),
    Setting(
        "replica.lag.time.max.ms",
        _S.LONG,
        30_000,
        "A follower that has not caught up with its leader for this long leaves the ISR.",
        min=1,
        read_only=True,
    ),
    Setting(
        "num.replica.fetchers",
        _S.INT,
        1,
        "Fetch connections a follower keeps to each leader broker.",
        min=1,
        read_only=True,
    ),
    Setting(
        "replica.fetch.max.bytes",
        _S.INT,
        1048576,
        "Most bytes a follower fetches of one partition per request (at least a batch).",
        min=0,
        read_only=True,
    ),
    Setting(
        "replica.fetch.response.max.bytes",
        _S.INT,
        10485760,
        "Most bytes a follower fetches per request (at least a batch).",
        min=0,
        read_only=True,
    ),
    Setting(
        "replica.fetch.wait.max.ms",
        _S.INT,
        500,
        "Longest a follower's fetch waits at the leader for new records.",
        min=0,
        read_only=True,
    ),
    Setting(
        "replica.fetch.min.bytes",
        _S.INT,
        1,
        "Bytes a follower's fetch waits for at the leader.",
        min=1,
        read_only=True,
    ),
    Setting(
        "replica.fetch.backoff.ms",
        _S.INT,
        1000,
        "Wait before a follower fetches a partition again after an error.",
        min=0,
        read_only=True,
    ),
    Setting(
        "replica.socket.timeout.ms",
        _S.INT,
        30000,
        "Longest a follower waits for its leader's answer beyond the fetch wait.",
        min=1,
        read_only=True,
    ),
    Setting(
        "replica.high.watermark.checkpoint.interval.ms",
        _S.LONG,
        5000,
        "How often each partition's high watermark is written to the data directory.",
        min=1,
        read_only=True,
    ),
    Setting(
        "offsets.topic.num.partitions",
        _S.INT,
        50,
        "Partitions of __consumer_offsets.",
        min=1,
        read_only=True,
    ),
    Setting(
        "offsets.topic.replication.factor",
        _S.SHORT,
        3,
        "Replicas of __consumer_offsets.",
        min=1,
        read_only=True,
    ),
    Setting(
        "offsets.topic.segment.bytes",
        _S.INT,
        104857600,
        "Segment size of __consumer_offsets.",
        min=1,
        read_only=True,
    ),
    Setting(
        "offsets.commit.timeout.ms",
        _S.INT,
        5000,
        "How long a group or offset write waits for the replicas of __consumer_offsets.",
        min=1,
    ),
    Setting(
        "offsets.load.buffer.size",
        _S.INT,
        5242880,
        "Bytes read at a time while loading __consumer_offsets.",
        min=1,
    ),
    Setting(
        "offsets.retention.minutes",
        _S.INT,
        10080,
        "How long an empty group's offsets are kept.",
        min=1,
    ),
    Setting(
        "offsets.retention.check.interval.ms",
        _S.LONG,
        600_000,
        "How often expired offsets are removed.",
        min=1,
    ),
    Setting(
        "offset.metadata.max.bytes",
        _S.INT,
        4096,
        "Largest metadata string of a committed offset.",
        min=0,
    ),
    Setting(
        "group.initial.rebalance.delay.ms",
        _S.INT,
        3000,
        "Wait for more members before the first rebalance.",
        min=0,
    ),
    Setting(
        "group.min.session.timeout.ms",
        _S.INT,
        6000,
        "Smallest session timeout a member may ask for.",
        min=0,
    ),
    Setting(
        "group.max.session.timeout.ms",
        _S.INT,
        1800000,
        "Largest session timeout a member may ask for.",
        min=0,
    ),
    Setting("group.max.size", _S.INT, 2147483647, "Most members a consumer group may have.", min=1),
    # The consumer group protocol's timings (KIP-848): the defaults of a group's
    # consumer.session.timeout.ms and consumer.heartbeat.interval.ms configs, and the
    # bounds those configs are checked against.
    Setting(
        "group.consumer.session.timeout.ms",
        _S.INT,
        45000,
        "Session timeout of a consumer-protocol group member, unless its group's "
        "consumer.session.timeout.ms says otherwise.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.consumer.min.session.timeout.ms",
        _S.INT,
        45000,
        "Smallest consumer.session.timeout.ms a group may be given.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.consumer.max.session.timeout.ms",
        _S.INT,
        60000,
        "Largest consumer.session.timeout.ms a group may be given.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.consumer.heartbeat.interval.ms",
        _S.INT,
        5000,
        "Heartbeat interval given to consumer-protocol group members, unless their "
        "group's consumer.heartbeat.interval.ms says otherwise.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.consumer.min.heartbeat.interval.ms",
        _S.INT,
        5000,
        "Smallest consumer.heartbeat.interval.ms a group may be given.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.consumer.max.heartbeat.interval.ms",
        _S.INT,
        15000,
        "Largest consumer.heartbeat.interval.ms a group may be given.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.coordinator.rebalance.protocols",
        _S.LIST,
        ["classic", "consumer"],
        "Group protocols served: classic (JoinGroup/SyncGroup) and consumer (KIP-848's "
        "ConsumerGroupHeartbeat).",
        choices=("classic", "consumer"),
        read_only=True,
    ),
    Setting(
        "group.consumer.assignors",
        _S.LIST,
        [
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        ],
        "Server-side assignors of consumer groups, the default first (Kafka's class names or "
        "their short names uniform and range).",
        choices=(
            "uniform",
            "range",
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        ),
        read_only=True,
    ),
    Setting(
        "group.consumer.migration.policy",
        _S.STRING,
        "bidirectional",
        "Whether a group converts between the classic and the consumer protocol while it has "
        "members: upgrade (a consumer-protocol member joins a classic group), downgrade (the "
        "last one leaves a group of classic members), both, or neither.",
        choices=("disabled", "upgrade", "downgrade", "bidirectional"),
        read_only=True,
    ),
    Setting(
        "group.consumer.max.size",
        _S.INT,
        2147483647,
        "Most members a consumer group (consumer protocol) may have.",
        min=1,
        read_only=True,
    ),
    Setting(
        "group.member.metadata.max.bytes",
        _S.INT,
        1048576,
        "Largest protocol metadata a member may send in JoinGroup (kbroker's own bound).",
        min=0,
    ),
    Setting(
        "transactional.id.expiration.ms",
        _S.INT,
        604800000,
        "A transactional id whose state has not changed for this long, with no transaction "
        "open, is forgotten (its producer id and epoch with it).",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.max.timeout.ms",
        _S.INT,
        900000,
        "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT "
        "otherwise).",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        _S.INT,
        10000,
        "How often transactions open longer than their timeout are looked for (and aborted, "
        "their producer fenced).",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        _S.INT,
        3600000,
        "How often transactional ids past transactional.id.expiration.ms are looked for.",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.state.log.num.partitions",
        _S.INT,
        50,
        "Partitions of __transaction_state.",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.state.log.replication.factor",
        _S.SHORT,
        3,
        "Replicas of __transaction_state (one on a single node; a cluster with fewer live "
        "brokers refuses transactions until there are enough).",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.state.log.min.isr",
        _S.INT,
        2,
        "min.insync.replicas of __transaction_state (at most its replication factor on a "
        "single node).",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.state.log.segment.bytes",
        _S.INT,
        104857600,
        "Segment size of __transaction_state.",
        min=1,
        read_only=True,
    ),
    Setting(
        "transaction.state.log.load.buffer.size",
        _S.INT,
        5242880,
        "Bytes read at a time while loading __transaction_state.",
        min=1,
        read_only=True,
    ),
    Setting(
        "producer.id.expiration.ms",
        _S.INT,
        86400000,
        "A partition forgets an idempotent producer whose last write (its batch's max "
        "timestamp) is this old; its next write is then taken at any sequence.",
        min=1,
    ),
    Setting(
        "producer.id.expiration.check.interval.ms",
        _S.INT,
        600000,
        "How often idle producers are looked for (producer.id.expiration.ms).",
        min=1,
    ),
    Setting(
        "transaction.partition.verification.enable",
        _S.BOOLEAN,
        True,
        "KIP-890: a partition leader asks the transaction coordinator whether a partition is "
        "in a producer's transaction before it appends the transaction's first batch there.",
    ),
    Setting(
        "metrics.listeners",
        _S.STRING,
        None,
        "HOST:PORT (or http://HOST:PORT) serving /metrics (Prometheus), /healthz and /readyz off "
        "the event loop; unset: none (kbroker's own setting; --metrics).",
        nullable=True,
        read_only=True,
    ),
    Setting(
        "metrics.partition.level.enable",
        _S.BOOLEAN,
        True,
        "Export per-partition series (log size, segments, start and end offsets, consumer group "
        "lag per partition); false keeps only the per-topic and per-group sums, for brokers with "
        "very many partitions (kbroker's own setting).",
    ),
)

TOPIC_SETTINGS: tuple[TopicSetting, ...] = (
    TopicSetting("cleanup.policy", "log.cleanup.policy"),
    TopicSetting("compression.type", "compression.type"),
    TopicSetting("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    TopicSetting("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    TopicSetting("flush.messages", "log.flush.interval.messages"),
    TopicSetting("flush.ms", "log.flush.interval.ms"),
    TopicSetting("index.interval.bytes", "log.index.interval.bytes"),
    TopicSetting("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    TopicSetting("max.message.bytes", "message.max.bytes"),
    TopicSetting("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms"),
    TopicSetting("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms"),
    TopicSetting("message.timestamp.difference.max.ms", "log.message.timestamp.difference.max.ms"),
    TopicSetting("message.timestamp.type", "log.message.timestamp.type"),
    TopicSetting("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio"),
    TopicSetting("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    TopicSetting("min.insync.replicas", "min.insync.replicas"),
    TopicSetting("preallocate", "log.preallocate"),
    TopicSetting("retention.bytes", "log.retention.bytes"),
    TopicSetting("retention.ms", "log.retention.ms"),
    TopicSetting("segment.bytes", "log.segment.bytes"),
    TopicSetting("segment.index.bytes", "log.index.size.max.bytes"),
    TopicSetting("segment.ms", "log.roll.ms"),
    TopicSetting("unclean.leader.election.enable", "unclean.leader.election.enable"),
)

# -- Kafka's other settings ---------------------------------------------------------
#
# Every setting of Kafka 3.9.1 (kafka_settings, generated from a real broker) is known,
# so a server.properties written for Kafka starts kbroker. The ones kbroker does not
# declare above are described with Kafka's default and are read-only (they mean nothing
# while kbroker runs). A value given for one is either accepted and has no effect (a
# tuning knob of Kafka's JVM implementation: thread counts, socket buffers, purgatory and
# quota windows, metrics sampling, KRaft and Kerberos timings, deprecated settings Kafka
# 3.x itself ignores) or, if it differs from Kafka's default, refused with a one-line
# reason because it would promise behaviour kbroker does not have (the rules below).

NO_EFFECT = "Accepted for compatibility with Kafka; has no effect in kbroker."
NOT_SUPPORTED = "Not supported by kbroker: only Kafka's default is accepted."

# Settings whose non-default value kbroker refuses, by name prefix, with why. Only the
# switches of a missing feature are refused; its tuning knobs (remote.log.manager.*,
# controller.quorum.*.ms ...) do nothing while the switch is off, so they are accepted.
_REFUSED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("max.connection", "connection limits are not enforced yet"),
)
_KRAFT = "KRaft mode is not supported: kbroker runs with ZooKeeper"
# Settings whose non-default value kbroker refuses, by name, with why.
_REFUSED_NAMES: Mapping[str, str] = {
    "remote.log.storage.system.enable": "tiered storage (remote log storage) is not supported",
    "delegation.token.secret.key": "delegation tokens are not supported",
    "delegation.token.master.key": "delegation tokens are not supported",
    "process.roles": _KRAFT,
    "node.id": "KRaft mode is not supported: set broker.id",
    "controller.quorum.voters": _KRAFT,
    "controller.quorum.bootstrap.servers": _KRAFT,
    "controller.listener.names": _KRAFT,
    "early.start.listeners": _KRAFT,
    "metadata.log.dir": _KRAFT,
    "zookeeper.metadata.migration.enable": "migration to KRaft is not supported",
    "eligible.leader.replicas.enable": "eligible leader replicas (KIP-966) are not supported",
    "zookeeper.ssl.client.enable": "TLS to ZooKeeper is not supported",
    "zookeeper.set.acl": "ZooKeeper ACLs on kbroker's znodes are not supported",
    "zookeeper.clientCnxnSocket": "kbroker's ZooKeeper client has no pluggable socket",
    "control.plane.listener.name": "a separate control plane listener is not supported",
    "log.dir": "set log.dirs (kbroker reads its data directory from log.dirs only)",
    "sasl.jaas.config": "set each listener's JAAS configuration as "
    "listener.name.<listener>.<mechanism>.sasl.jaas.config",
    "metric.reporters": "Java metrics reporters cannot run in kbroker: see metrics.listeners",
    "kafka.metrics.reporters": "Java metrics reporters cannot run in kbroker",
}
_CLASS_REFUSAL = "Java plug-in classes cannot run in kbroker"


def refusal_reason(name: str, config_type: ConfigType) -> str | None:
    """Why kbroker refuses a non-default value of Kafka's setting ``name`` (None: any valid
    value is accepted and has no effect). Pluggable Java classes are always refused."""
    if config_type is ConfigType.CLASS:
        return _CLASS_REFUSAL
    if name in _REFUSED_NAMES:
        return _REFUSED_NAMES[name]
    for prefix, reason in _REFUSED_PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


def kafka_default(config_type: ConfigType, text: str | None) -> Value:
    """Kafka's default as reported by DescribeConfigs, as a typed value."""
    if text is None:
        return None
    probe = Setting("default", config_type, None, "", nullable=True)
    return probe._convert(text)


def _kafka_setting(row: kafka_settings.Row) -> Setting:
    name, type_code, default_text, _sensitive, _read_only, _synonyms = row
    config_type = ConfigType(type_code)
    default = kafka_default(config_type, default_text)
    reason = refusal_reason(name, config_type)
    honoured: tuple[Value, ...] = (default,)
    if default is None:
        honoured += ("", [])
    return Setting(
        name,
        config_type,
        default,
        NO_EFFECT if reason is None else NOT_SUPPORTED,
        nullable=True,
        read_only=True,
        unsupported=None if reason is None else f"{reason} (only {default_text!r} is accepted)",
        honoured=honoured,
    )


_DECLARED = {s.name for s in BROKER_SETTINGS}
KAFKA_ONLY_SETTINGS: tuple[Setting, ...] = tuple(
    _kafka_setting(row) for row in kafka_settings.BROKER if row[0] not in _DECLARED
)
# Kafka's broker settings whose own default Kafka reports as null (a coarser setting,
# log.retention.hours, supplies the value): DescribeConfigs reports them so at default.
KAFKA_NULL_DEFAULTS: frozenset[str] = frozenset(
    row[0] for row in kafka_settings.BROKER if row[2] is None
)


def _kafka_topic_setting(row: kafka_settings.Row) -> TopicSetting:
    name, type_code, default_text, _sensitive, _read_only, synonyms = row
    if synonyms:
        return TopicSetting(name, synonyms[0])
    config_type = ConfigType(type_code)
    reason = (
        "tiered storage (remote log storage) is not supported"
        if name == "remote.storage.enable"
        else None
    )
    default = kafka_default(config_type, default_text)
    own = Setting(
        name,
        config_type,
        default,
        NO_EFFECT if reason is None else NOT_SUPPORTED,
        unsupported=None if reason is None else f"{reason} (only {default_text!r} is accepted)",
        honoured=(default,),
    )
    return TopicSetting(name, None, own)


_DECLARED_TOPIC = {t.name for t in TOPIC_SETTINGS}
KAFKA_ONLY_TOPIC_SETTINGS: tuple[TopicSetting, ...] = tuple(
    _kafka_topic_setting(row) for row in kafka_settings.TOPIC if row[0] not in _DECLARED_TOPIC
)
ALL_TOPIC_SETTINGS: tuple[TopicSetting, ...] = tuple(
    sorted((*TOPIC_SETTINGS, *KAFKA_ONLY_TOPIC_SETTINGS), key=lambda t: t.name)
)
ALL_BROKER_SETTINGS: tuple[Setting, ...] = (*BROKER_SETTINGS, *KAFKA_ONLY_SETTINGS)

# Kafka's broker settings that exist only as dynamic ones (set by AlterConfigs, never in
# server.properties, not listed by DescribeConfigs): the replication throttles that
# kafka-reassign-partitions.sh sets with --throttle and clears at --verify. kbroker does
# not throttle replication, so only their default (no limit) is accepted, and clearing
# them works.
_NO_REPLICATION_THROTTLE = "replication throttling is not supported"
DYNAMIC_ONLY_BROKER_SETTINGS: Mapping[str, Setting] = {
    name: Setting(
        name,
        _S.LONG,
        LONG_MAX,
        "Replication throttle: not supported by kbroker, only Kafka's default is accepted.",
        min=0,
        unsupported=f"{_NO_REPLICATION_THROTTLE} (only {LONG_MAX} is accepted)",
        honoured=(LONG_MAX,),
    )
    for name in (
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    )
}

BROKER: Mapping[str, Setting] = {s.name: s for s in ALL_BROKER_SETTINGS}
TOPIC: Mapping[str, TopicSetting] = {t.name: t for t in ALL_TOPIC_SETTINGS}

# The SASL mechanisms whose JAAS configuration a listener takes as
# listener.name.<listener>.<mechanism>.sasl.jaas.config.
JAAS_MECHANISMS = ("plain", "scram-sha-256", "scram-sha-512")
_JAAS = Setting(
    "sasl.jaas.config",
    _S.PASSWORD,
    None,
    "A listener's JAAS configuration for one SASL mechanism: PLAIN's users "
    '(user_<name>="<password>") and the broker\'s own inter-broker credentials '
    '(username="..." password="...").',
    nullable=True,
    read_only=True,
)
_LISTENER_SCOPED: Mapping[str, Setting] = {s.name: s for s in SECURITY_SETTINGS}
_LISTENER_PREFIXED = re.compile(r"listener\.name\.([A-Za-z0-9_-]+)\.(.+)$")


def is_tls_setting(name: str) -> bool:
    """Whether ``name`` (maybe listener-prefixed) is one of the keystore settings, which
    a broker may change while it runs (new certificates)."""
    base = _LISTENER_PREFIXED.match(name)
    rest = base.group(2) if base is not None else name
    return rest.startswith(("ssl.keystore.", "ssl.key.password"))


def _known(name: str) -> Setting:
    setting = broker_setting(name)
    if setting is None:
        raise KeyError(name)
    return setting


def listener_prefix(listener: str) -> str:
    """Where a listener's own settings start: ``listener.name.<lower-case name>.``."""
    return f"listener.name.{listener.lower()}."


def broker_setting(name: str) -> Setting | None:
    """The broker setting called ``name``, or None when there is none.

    Besides the table's names, a listener's own value of a TLS, SASL or
    re-authentication setting (``listener.name.internal.ssl.keystore.location``)
    and a listener's JAAS configuration for a mechanism
    (``listener.name.internal.plain.sasl.jaas.config``) are settings; their
    names are normalised as Kafka reads them (the listener name lower-cased).
    """
    setting = BROKER.get(name) or DYNAMIC_ONLY_BROKER_SETTINGS.get(name)
    if setting is not None:
        return setting
    match = _LISTENER_PREFIXED.match(name)
    if match is None:
        return None
    listener, rest = match.groups()
    base = _LISTENER_SCOPED.get(rest)
    if base is None:
        mechanism, _, tail = rest.partition(".")
        if tail != _JAAS.name or mechanism.lower() not in JAAS_MECHANISMS:
            return None
        base, rest = _JAAS, f"{mechanism.lower()}.{tail}"
    return replace(base, name=listener_prefix(listener) + rest)


# Topic-level checks stricter than the broker setting's own.
_TOPIC_CHECKS: Mapping[str, Callable[[Value], str | None]] = {
    "flush.ms": lambda v: "must be >= 0" if v is None or (isinstance(v, int) and v < 0) else None,
}


def as_int(value: Value) -> int:
    """A numeric setting's value, typed (the table guarantees the type)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"expected a whole number, got {value!r}")
    return value


def as_list(value: Value) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"expected a list, got {value!r}")
    return value


_T = TypeVar("_T")


def _typed(name: str, value: Value, kind: type[_T]) -> _T:
    """``value`` as ``kind``; the settings table guarantees it, so a miss is a bug."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{name}: expected {kind.__name__}, got {value!r}")
    return value


class TypedReads:
    """Typed reads of settings: the table fixes each setting's type, these check it once.

    A class using it supplies ``value(name)``, the untyped effective value.
    """

    __slots__ = ()

    def value(self, name: str) -> Value:
        raise NotImplementedError

    def get_int(self, name: str) -> int:
        return _typed(name, self.value(name), int)

    def get_optional_int(self, name: str) -> int | None:
        value = self.value(name)
        return None if value is None else _typed(name, value, int)

    def get_float(self, name: str) -> float:
        value = self.value(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return _typed(name, value, float)

    def get_bool(self, name: str) -> bool:
        return _typed(name, self.value(name), bool)

    def get_str(self, name: str) -> str:
        return _typed(name, self.value(name), str)

    def get_optional_str(self, name: str) -> str | None:
        value = self.value(name)
        return None if value is None else _typed(name, value, str)

    def get_list(self, name: str) -> list[str]:
        return _typed(name, self.value(name), list)


@dataclass(frozen=True, slots=True)
class AppendSettings:
    """The topic settings every append to it reads, read once per `TopicConfig`."""

    max_message_bytes: int
    compacted: bool
    # (before, after), or None: `TopicConfig.timestamp_bounds_ms`.
    timestamp_bounds_ms: tuple[int, int] | None
    compression_type: str
    min_insync_replicas: int
    log_append_time: bool


class TopicConfig(TypedReads, Mapping[str, Value]):
    """Every topic-level setting of one topic (overrides over broker defaults), typed reads.
    Never changed once made (a change of settings makes a new one)."""

    __slots__ = ("_append", "_values")

    def __init__(self, values: Mapping[str, Value]) -> None:
        self._values = dict(values)
        self._append: AppendSettings | None = None

    @property
    def append(self) -> AppendSettings:
        """What an append reads, from these settings (read at the first append)."""
        if self._append is None:
            self._append = AppendSettings(
                self.get_int("max.message.bytes"),
                self.compacted,
                self.timestamp_bounds_ms,
                self.get_str("compression.type"),
                self.get_int("min.insync.replicas"),
                self.get_str("message.timestamp.type") == "LogAppendTime",
            )
        return self._append

    def __getitem__(self, name: str) -> Value:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def value(self, name: str) -> Value:
        return self._values[name]

    @property
    def compacted(self) -> bool:
        return "compact" in self.get_list("cleanup.policy")

    @property
    def timestamp_bounds_ms(self) -> tuple[int, int] | None:
        """(before, after): how far a record's timestamp may lie behind and ahead of the
        broker's clock, or None on a LogAppendTime topic (the broker stamps the time).
        message.timestamp.difference.max.ms stands in for a bound left at its default,
        as Kafka 3.x reads them."""
        if self.get_str("message.timestamp.type") != "CreateTime":
            return None
        difference = self.get_int("message.timestamp.difference.max.ms")
        before = self.get_int("message.timestamp.before.max.ms")
        after = self.get_int("message.timestamp.after.max.ms")
        return (
            difference if before == LONG_MAX else before,
            difference if after == LONG_MAX else after,
        )


def topic_setting(name: str) -> Setting:
    """The Setting that parses and checks the topic-level ``name``."""
    try:
        ts = TOPIC[name]
    except KeyError:
        raise ConfigError(f"unknown topic setting {name!r}") from None
    if ts.own is not None:
        return ts.own
    assert ts.broker_setting is not None
    base = BROKER[ts.broker_setting]
    return Setting(
        ts.name,
        base.type,
        base.default,
        base.doc,
        base.min,
        base.max,
        base.choices,
        nullable=False,
        unsupported=base.unsupported,
        honoured=base.honoured,
    )


def parse_topic_configs(raw: Mapping[str, str | None]) -> dict[str, Value]:
    """Checks a set of topic-level overrides, as CreateTopics/AlterConfigs give them."""
    out: dict[str, Value] = {}
    for name, text in raw.items():
        setting = topic_setting(name)
        value = setting.parse(text)
        check = _TOPIC_CHECKS.get(name)
        problem = check(value) if check else None
        if problem:
            raise ConfigError(f"{name}: {problem}")
        out[name] = value
    return out


def parse_stored_topic_configs(topic: str, raw: Mapping[str, str | None]) -> dict[str, Value]:
    """`parse_topic_configs` for a topic's overrides as the metadata kept them.

    An override an earlier release accepted but this one does not support
    yet (`Setting.unsupported`) is left out with a warning, so the topic gets
    the default, rather than stopping the start; CreateTopics and
    AlterConfigs refuse such values.
    """
    kept: dict[str, str | None] = {}
    for name, text in raw.items():
        try:
            topic_setting(name).parse(text)
        except UnsupportedSetting as exc:
            log.warning("topic %s: ignoring its stored override %s=%s: %s", topic, name, text, exc)
            continue
        except ConfigError:
            pass  # refused below, as before
        kept[name] = text
    return parse_topic_configs(kept)


def load_properties(path: Path) -> dict[str, str]:
    """Reads a Kafka properties file as Java's ``Properties.load`` reads it: ``#``/``!``
    comment lines; a line ending in an odd number of backslashes continues on the next
    (whose leading spaces go), as multi-line JAAS settings are written; the key ends at the
    first unescaped ``=``, ``:`` or space; backslash escapes (``\\t``, ``\\uXXXX``, ``\\=``
    ...) are undone. Values are stripped; a key alone on its line is refused (one line)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read config file {path}: it is not UTF-8 text") from None
    for lineno, line in _logical_lines(text):
        key, value = _split_property(line)
        if key is None or value is None:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {line.strip()!r}")
        out[_unescape(key)] = _unescape(value).strip()
    return out


def _continues(line: str) -> bool:
    """Whether a natural line goes on in the next one (an odd number of backslashes ends it)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, logical line) of each line holding a property."""
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        lineno, line = i + 1, lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i == len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        yield lineno, line


def _split_property(line: str) -> tuple[str | None, str | None]:
    """(raw key, raw value) of a logical line: the key ends at the first unescaped ``=``,
    ``:`` or space; spaces and one ``=`` or ``:`` separate it from the value (None: the
    key is alone on its line)."""
    pos = 0
    while pos < len(line):
        ch = line[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch in "=: \t\f":
            break
        pos += 1
    key, rest = line[:pos], line[pos:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    elif not rest:
        return (key or None), None
    return (key or None), rest.lstrip(" \t\f")


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\" or pos + 1 == len(text):
            out.append(ch)
            pos += 1
            continue
        nxt = text[pos + 1]
        if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", text[pos + 2 : pos + 6]):
            out.append(chr(int(text[pos + 2 : pos + 6], 16)))
            pos += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


@dataclass
class BrokerConfig(TypedReads):
    """The broker's effective settings: defaults, overlaid with the static
    settings given at start (``given``), overlaid with dynamic ones: a cluster's
    defaults (``dynamic_default``), then this broker's own (``dynamic``)."""

    given: dict[str, Value] = field(default_factory=dict)
    # Set while running (AlterConfigs), persisted by the metadata store (in a cluster:
    # ZooKeeper's /config/brokers/<id>). A single node keeps its defaults here too.
    dynamic: dict[str, Value] = field(default_factory=dict)
    # A cluster's dynamic defaults (ZooKeeper's /config/brokers/<default>).
    dynamic_default: dict[str, Value] = field(default_factory=dict)
    # Bumped by every change, so derived values can be cached safely.
    generation: int = 0

    @classmethod
    def from_strings(cls, pairs: Iterable[tuple[str, str]]) -> BrokerConfig:
        given: dict[str, Value] = {}
        for name, text in pairs:
            setting = broker_setting(name)
            if setting is None:
                raise ConfigError(f"unknown setting {name!r}")
            given[setting.name] = setting.parse(text)
        config = cls(given)
        config.check_together()
        return config

    def check_together(self) -> None:
        """Checks the settings that bound one another."""
        pool, largest = self["queued.max.request.bytes"], self["socket.request.max.bytes"]
        if pool != -1 and pool < largest:
            raise ConfigError(
                f"queued.max.request.bytes ({pool}) must be at least "
                f"socket.request.max.bytes ({largest}), or -1 for no bound"
            )
        # As Kafka's group coordinator checks its consumer group bounds at start.
        for what in ("session.timeout.ms", "heartbeat.interval.ms"):
            low = self[f"group.consumer.min.{what}"]
            default = self[f"group.consumer.{what}"]
            high = self[f"group.consumer.max.{what}"]
            if not low <= default <= high:
                raise ConfigError(
                    f"group.consumer.{what} ({default}) must lie between "
                    f"group.consumer.min.{what} ({low}) and group.consumer.max.{what} ({high})"
                )

    def value(self, name: str) -> Value:
        """The effective value of ``name``, untyped (for rendering and comparison)."""
        setting = BROKER.get(name) or _known(name)
        layers = (self.dynamic, self.dynamic_default, self.given)
        for layer in layers:
            if name in layer:
                return layer[name]
        for other, factor in setting.fallbacks:
            for layer in layers:
                value = layer.get(other)
                if value is not None:
                    assert isinstance(value, int)
                    return value * factor
        return setting.default

    def __getitem__(self, name: str) -> Any:
        # Prefer the typed readers above; this stays for rendering call sites.
        return self.value(name)

    def with_dynamic(self, configs: Mapping[str, str], cluster_default: bool) -> BrokerConfig:
        """A copy whose dynamic settings (the cluster default's, or this broker's) are
        ``configs`` (already checked): to try a change before making it."""
        parsed = {name: _known(name).parse(text) for name, text in configs.items()}
        if cluster_default:
            return BrokerConfig(dict(self.given), dict(self.dynamic), parsed)
        return BrokerConfig(dict(self.given), parsed, dict(self.dynamic_default))

    def listener_value(self, listener: str, name: str) -> Value:
        """A listener's value of ``name``: its own (listener.name.<listener>.<name>) when
        set, else the broker's."""
        own = listener_prefix(listener) + name
        if any(own in layer for layer in (self.dynamic, self.dynamic_default, self.given)):
            return self.value(own)
        return self.value(name)

    def given_names(self) -> set[str]:
        """Every setting given a value (static or dynamic), listener-prefixed ones included."""
        return set(self.given) | set(self.dynamic) | set(self.dynamic_default)

    def is_default(self, name: str) -> bool:
        setting = BROKER.get(name) or _known(name)
        names = (name, *(o for o, _ in setting.fallbacks))
        return not any(
            n in self.given or n in self.dynamic or n in self.dynamic_default for n in names
        )

    def set(self, name: str, text: str | None, cluster_default: bool = False) -> None:
        """Sets (or with None, resets) a dynamic broker setting (``cluster_default``: in
        the cluster's default layer).

        Dynamic values sit over the static ones (properties file, ``--set``):
        resetting one brings the static value back.
        """
        setting = broker_setting(name)
        if setting is None:
            raise ConfigError(f"unknown setting {name!r}")
        if setting.read_only:
            raise ConfigError(f"{name} cannot be changed while the broker runs")
        layer = self.dynamic_default if cluster_default else self.dynamic
        if text is None:
            layer.pop(setting.name, None)
        else:
            layer[setting.name] = setting.parse(text)
        self.generation += 1

    def topic_default(self, topic_name: str) -> Value:
        """The value a topic without an override gets for ``topic_name``."""
        ts = TOPIC[topic_name]
        if ts.broker_setting is None:
            assert ts.own is not None
            return ts.own.default
        return self.value(ts.broker_setting)

    def effective_topic_config(self, overrides: Mapping[str, Value]) -> TopicConfig:
        """Every topic-level setting for a topic with these overrides."""
        out: dict[str, Value] = {}
        for ts in ALL_TOPIC_SETTINGS:
            out[ts.name] = (
                overrides[ts.name] if ts.name in overrides else self.topic_default(ts.name)
            )
        # Unset flush.ms means: flush on the scheduler's interval.
        if out["flush.ms"] is None:
            out["flush.ms"] = self["log.flush.scheduler.interval.ms"]
        return TopicConfig(out)
