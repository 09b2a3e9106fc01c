"""Kafka's ACL model: what an ACL is, how filters match it, and which ACLs may be created.

The four enums carry Kafka's wire codes (`ResourceType`, `PatternType`,
`AclOperation`, `PermissionType`) and Kafka's names: the PascalCase form
stored in ZooKeeper ("TransactionalId", "IdempotentWrite", "Allow") and
the upper-case enum form of the literal change notifications
("TRANSACTIONAL_ID"). `parse` reads any of them, as Kafka does.

An ACL is an `AclBinding`: a `ResourcePattern` (type, name, LITERAL or
PREFIXED) and an `AccessControlEntry` (principal, host, operation,
ALLOW or DENY). `AclBindingFilter` is what DescribeAcls and DeleteAcls
send; its matching is Kafka's, including pattern type MATCH (every
pattern that would apply to a resource of that name: the literal name,
the literal "*", and every prefix of it) and ANY.

`creation_error` is what CreateAcls refuses and how (Kafka's checks; the
ones Kafka 3.9's ZooKeeper authorizer answers UNKNOWN_SERVER_ERROR for are
answered INVALID_REQUEST, as Kafka's own KRaft authorizer does).
`allowing_operations` and `SUPPORTED_OPERATIONS` say which ACLs grant an
operation (itself, the operations that imply it, and ALL) and what a resource
type can be granted.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Self

from kbroker.protocol.errors import ErrorCode

CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaEnum(enum.IntEnum):
    """An enum with Kafka's wire code and Kafka's two spellings of its name."""

    @property
    def kafka_name(self) -> str:
        """The PascalCase name Kafka writes in ZooKeeper and its tools print ("Topic")."""
        return _pascal(self.name)

    @classmethod
    def parse(cls, text: str) -> Self | None:
        """The member named ``text`` in either of Kafka's spellings, any case; None if none."""
        key = text.replace("_", "").upper()
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        return None

    @classmethod
    def of(cls, code: int) -> Self:
        """The member with wire code ``code``; UNKNOWN (0) for codes Kafka does not know."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The resource types an ACL can name (what Kafka creates a ZooKeeper folder for).
CONCRETE_RESOURCE_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN,
    ResourceType.USER,
)

_O = AclOperation
# What each resource type can be granted: the operations whose bits an
# "authorized operations" answer may carry.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER}
        | {_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
        | {_O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}

# An ALLOW of any of these also allows the key (an ALLOW of ALL allows everything).
_IMPLIED_BY = {
    _O.DESCRIBE: frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER}),
    _O.DESCRIBE_CONFIGS: frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
}

# The error a request gets when it may not touch a resource of this type.
AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}


def allowing_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW grants ``operation``: itself, those that imply it
    (Read, Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs)
    and ALL."""
    return _IMPLIED_BY.get(operation, frozenset({operation})) | {_O.ALL}


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """Kafka's 32-bit "authorized operations" field: bit ``code`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def principal_parts(principal: str) -> tuple[str, str] | None:
    """("User", "alice") for "User:alice" (split at the first colon); None without one."""
    kind, colon, name = principal.partition(":")
    return (kind, name) if colon else None


def acl_host(client_host: str) -> str:
    """A client's address as ACL hosts name it: "/127.0.0.1" -> "127.0.0.1"; an IPv6
    address in Java's form ("0:0:0:0:0:0:0:1"), as Kafka compares them."""
    host = client_host.lstrip("/")
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        return ":".join(format(int(group, 16), "x") for group in address.exploded.split(":"))
    return host


# -- ACLs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """What an ACL applies to: a resource of ``resource_type`` named ``name`` (LITERAL;
    "*" is every one) or whose name starts with ``name`` (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        kind = self.resource_type.kafka_name
        return f"{kind}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    """Who may (ALLOW) or may not (DENY) do ``operation`` from ``host`` ("*": any host)."""

    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def __str__(self) -> str:
        return (
            f"{self.permission.kafka_name} {self.principal} {self.operation.kafka_name} "
            f"from {self.host}"
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Which patterns a DescribeAcls or DeleteAcls filter selects (None: any name)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that apply to a resource named self.name.
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)

    @property
    def exact_patterns(self) -> list[ResourcePattern]:
        """The patterns this filter names exactly (empty when it could match more)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or self.name is None:
            return []
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return [ResourcePattern(self.resource_type, self.name, self.pattern_type)]
        if self.pattern_type is PatternType.ANY:
            return [
                ResourcePattern(self.resource_type, self.name, PatternType.LITERAL),
                ResourcePattern(self.resource_type, self.name, PatternType.PREFIXED),
            ]
        return []


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Which entries a filter selects (None: any principal, any host; ANY: any operation,
    any permission)."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission in (PermissionType.ANY, entry.permission)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    @classmethod
    def any(cls) -> AclBindingFilter:
        return cls(
            ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
            AccessControlEntryFilter(None, None, AclOperation.ANY, PermissionType.ANY),
        )


def filter_error(f: AclBindingFilter) -> str | None:
    """Why DescribeAcls or DeleteAcls cannot use ``f`` (a code Kafka does not know), or None."""
    for what, value in (
        ("resource type", f.pattern.resource_type),
        ("pattern type", f.pattern.pattern_type),
        ("operation", f.entry.operation),
        ("permission type", f.entry.permission),
    ):
        if value == 0:
            return f"the filter's {what} is UNKNOWN"
    return None


def _unstorable(name: str) -> str | None:
    """Why ``name`` cannot be a ZooKeeper node name (ZooKeeper's own path rules, with
    characters beyond U+FFFF refused as the UTF-16 surrogates they are in Java), or None."""
    if "/" in name:
        return "it contains '/'"
    if name in (".", ".."):
        return "a relative path"
    for ch in name:
        c = ord(ch)
        if c == 0 or c <= 0x1F or 0x7F <= c <= 0x9F or 0xD800 <= c <= 0xF8FF or c >= 0xFFF0:
            return f"character U+{c:04X} is not allowed"
    return None


def storable_name(name: str) -> bool:
    """Whether ``name`` can name an ACL resource in storage (see `creation_error`)."""
    return bool(name) and _unstorable(name) is None


def creation_error(binding: AclBinding) -> tuple[ErrorCode, str] | None:
    """Why CreateAcls refuses ``binding`` (the code and message it answers), or None.

    Kafka's checks, in Kafka's order and words where Kafka has them: a concrete
    resource type, pattern type, operation and permission; the cluster resource
    named kafka-cluster; a name that can be a ZooKeeper node's (no "/", as
    Kafka checks, and none of what ZooKeeper itself refuses, which Kafka
    reports as a server error); a principal of the form Type:name. Hosts
    are not checked, as in Kafka.
    """
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return ErrorCode.INVALID_REQUEST, f"Invalid resource type {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return ErrorCode.INVALID_REQUEST, f"Invalid pattern type {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return ErrorCode.INVALID_REQUEST, f"Invalid operation {entry.operation.name}"
    if entry.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return ErrorCode.INVALID_REQUEST, f"Invalid permission type {entry.permission.name}"
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return (
            ErrorCode.INVALID_REQUEST,
            f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}",
        )
    if not pattern.name:
        return ErrorCode.INVALID_REQUEST, "Invalid empty resource name"
    unstorable = _unstorable(pattern.name)
    if unstorable is not None:
        return (
            ErrorCode.INVALID_REQUEST,
            f"Failed to create ACL: invalid resource name {pattern.name!r} ({unstorable})",
        )
    if principal_parts(entry.principal) is None:
        return (
            ErrorCode.INVALID_REQUEST,
            f"Could not parse principal from {entry.principal!r} (no colon is present "
            "separating the principal type from the principal name)",
        )
    return None
