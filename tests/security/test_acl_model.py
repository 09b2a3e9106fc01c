"""Kafka's ACL model: wire codes and names, filter matching (MATCH, ANY), the operations an
ALLOW implies, client addresses as ACL hosts, and what CreateAcls refuses."""

from __future__ import annotations

import pytest

from kbroker.protocol import ErrorCode
from kbroker.security.acl import (
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    acl_host,
    allowing_operations,
    creation_error,
    operations_bitfield,
)

RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, PermissionType


def test_wire_codes_are_kafkas() -> None:
    assert {m.name: int(m) for m in RT} == {
        "UNKNOWN": 0,
        "ANY": 1,
        "TOPIC": 2,
        "GROUP": 3,
        "CLUSTER": 4,
        "TRANSACTIONAL_ID": 5,
        "DELEGATION_TOKEN": 6,
        "USER": 7,
    }
    assert {m.name: int(m) for m in PT} == {
        "UNKNOWN": 0,
        "ANY": 1,
        "MATCH": 2,
        "LITERAL": 3,
        "PREFIXED": 4,
    }
    assert [int(OP[n]) for n in ("ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE")] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert [int(OP[n]) for n in ("ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS")] == [
        7,
        8,
        9,
        10,
    ]
    assert [int(OP[n]) for n in ("ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS")] == [
        11,
        12,
        13,
    ]
    assert {m.name: int(m) for m in PERM} == {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}
    # A code Kafka does not know reads as UNKNOWN, as Kafka's fromCode does.
    assert RT.of(99) is RT.UNKNOWN and OP.of(-3) is OP.UNKNOWN and PERM.of(3) is PERM.ALLOW


def test_names_in_both_of_kafkas_spellings() -> None:
    assert RT.TRANSACTIONAL_ID.kafka_name == "TransactionalId"
    assert OP.IDEMPOTENT_WRITE.kafka_name == "IdempotentWrite"
    assert PERM.ALLOW.kafka_name == "Allow"
    for text in ("TransactionalId", "TRANSACTIONAL_ID", "TRANSACTIONALID", "transactionalid"):
        assert RT.parse(text) is RT.TRANSACTIONAL_ID
    assert OP.parse("ClusterAction") is OP.CLUSTER_ACTION
    assert PT.parse("prefixed") is PT.PREFIXED
    assert RT.parse("Topics") is None and OP.parse("") is None


@pytest.mark.parametrize(
    ("filter_type", "filter_name", "pattern", "matches"),
    [
        # LITERAL and PREFIXED filters name exactly one pattern.
        (PT.LITERAL, "t1", ResourcePattern(RT.TOPIC, "t1", PT.LITERAL), True),
        (PT.LITERAL, "t1", ResourcePattern(RT.TOPIC, "t1", PT.PREFIXED), False),
        (PT.LITERAL, "t1", ResourcePattern(RT.TOPIC, "*", PT.LITERAL), False),
        (PT.PREFIXED, "t", ResourcePattern(RT.TOPIC, "t", PT.PREFIXED), True),
        (PT.PREFIXED, "t", ResourcePattern(RT.TOPIC, "t1", PT.PREFIXED), False),
        # ANY: either pattern type, the same name.
        (PT.ANY, "t1", ResourcePattern(RT.TOPIC, "t1", PT.PREFIXED), True),
        (PT.ANY, "t1", ResourcePattern(RT.TOPIC, "t1", PT.LITERAL), True),
        (PT.ANY, "t1", ResourcePattern(RT.TOPIC, "*", PT.LITERAL), False),
        # MATCH: every pattern that applies to a resource of that name.
        (PT.MATCH, "orders-eu", ResourcePattern(RT.TOPIC, "orders-eu", PT.LITERAL), True),
        (PT.MATCH, "orders-eu", ResourcePattern(RT.TOPIC, "*", PT.LITERAL), True),
        (PT.MATCH, "orders-eu", ResourcePattern(RT.TOPIC, "orders-", PT.PREFIXED), True),
        (PT.MATCH, "orders-eu", ResourcePattern(RT.TOPIC, "orders-eu", PT.PREFIXED), True),
        (PT.MATCH, "orders-eu", ResourcePattern(RT.TOPIC, "orders-eu2", PT.PREFIXED), False),
        (PT.MATCH, "orders-eu", ResourcePattern(RT.TOPIC, "orders", PT.LITERAL), False),
        # A PREFIXED "*" is the character, not a wildcard.
        (PT.MATCH, "orders", ResourcePattern(RT.TOPIC, "*", PT.PREFIXED), False),
        (PT.MATCH, "*x", ResourcePattern(RT.TOPIC, "*", PT.PREFIXED), True),
        # No name: every name.
        (PT.ANY, None, ResourcePattern(RT.TOPIC, "t9", PT.PREFIXED), True),
        (PT.LITERAL, None, ResourcePattern(RT.TOPIC, "t9", PT.PREFIXED), False),
    ],
)
def test_resource_pattern_filters_match_as_kafkas(
    filter_type: PatternType, filter_name: str | None, pattern: ResourcePattern, matches: bool
) -> None:
    assert ResourcePatternFilter(RT.TOPIC, filter_name, filter_type).matches(pattern) is matches
    # The resource type must agree unless the filter says ANY.
    assert not ResourcePatternFilter(RT.GROUP, filter_name, filter_type).matches(pattern)
    assert ResourcePatternFilter(RT.ANY, filter_name, filter_type).matches(pattern) is matches


def test_exact_patterns_of_a_filter() -> None:
    assert ResourcePatternFilter(RT.TOPIC, "t", PT.ANY).exact_patterns == [
        ResourcePattern(RT.TOPIC, "t", PT.LITERAL),
        ResourcePattern(RT.TOPIC, "t", PT.PREFIXED),
    ]
    assert ResourcePatternFilter(RT.TOPIC, "t", PT.MATCH).exact_patterns == []
    assert ResourcePatternFilter(RT.ANY, "t", PT.LITERAL).exact_patterns == []
    assert ResourcePatternFilter(RT.TOPIC, None, PT.LITERAL).exact_patterns == []


def test_entry_filters() -> None:
    entry = AccessControlEntry("User:alice", "10.0.0.1", OP.READ, PERM.ALLOW)
    assert AccessControlEntryFilter(None, None, OP.ANY, PERM.ANY).matches(entry)
    assert AccessControlEntryFilter("User:alice", "10.0.0.1", OP.READ, PERM.ALLOW).matches(entry)
    assert not AccessControlEntryFilter("User:bob", None, OP.ANY, PERM.ANY).matches(entry)
    assert not AccessControlEntryFilter(None, "*", OP.ANY, PERM.ANY).matches(entry)
    assert not AccessControlEntryFilter(None, None, OP.ALL, PERM.ANY).matches(entry)
    assert not AccessControlEntryFilter(None, None, OP.ANY, PERM.DENY).matches(entry)


def test_what_an_allow_implies() -> None:
    assert allowing_operations(OP.DESCRIBE) == {
        OP.DESCRIBE,
        OP.READ,
        OP.WRITE,
        OP.DELETE,
        OP.ALTER,
        OP.ALL,
    }
    assert allowing_operations(OP.DESCRIBE_CONFIGS) == {
        OP.DESCRIBE_CONFIGS,
        OP.ALTER_CONFIGS,
        OP.ALL,
    }
    assert allowing_operations(OP.READ) == {OP.READ, OP.ALL}
    assert allowing_operations(OP.CLUSTER_ACTION) == {OP.CLUSTER_ACTION, OP.ALL}


def test_authorized_operations_bit_fields() -> None:
    # Read (3), Delete (6), Describe (8): what a group supports, as Kafka reports it.
    assert operations_bitfield(SUPPORTED_OPERATIONS[RT.GROUP]) == 0b1_0100_1000
    assert operations_bitfield([]) == 0


def test_client_addresses_as_acl_hosts() -> None:
    assert acl_host("/127.0.0.1") == "127.0.0.1"
    assert acl_host("10.1.2.3") == "10.1.2.3"
    # Java's form of an IPv6 address: no compression, no leading zeros.
    assert acl_host("/::1") == "0:0:0:0:0:0:0:1"
    assert acl_host("/fe80::1%eth0") == "fe80:0:0:0:0:0:0:1"
    assert acl_host("/not-an-address") == "not-an-address"


def _binding(
    rtype: ResourceType = RT.TOPIC,
    name: str = "t",
    ptype: PatternType = PT.LITERAL,
    principal: str = "User:a",
    host: str = "*",
    op: AclOperation = OP.READ,
    perm: PermissionType = PERM.ALLOW,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm)
    )


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        # Kafka's own checks and texts.
        (_binding(name=""), "Invalid empty resource name"),
        (_binding(name="", ptype=PT.PREFIXED), "Invalid empty resource name"),
        (
            _binding(RT.CLUSTER, "my-cluster", op=OP.ALTER),
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (_binding(name="a/b"), "Failed to create ACL"),
        # ZooKeeper could not store these names (Kafka 3.9 fails them with a server error).
        (_binding(name=".."), "Failed to create ACL"),
        (_binding(name="bell\x07"), "Failed to create ACL"),
        (_binding(name="emoji-\U0001f600"), "Failed to create ACL"),
        # Kafka 3.9's ZooKeeper authorizer answers these UNKNOWN_SERVER_ERROR; Kafka's
        # KRaft one, and kbroker, INVALID_REQUEST.
        (_binding(principal="alice"), "Could not parse principal"),
        (_binding(principal=""), "Could not parse principal"),
        (_binding(RT.ANY), "Invalid resource type ANY"),
        (_binding(RT.UNKNOWN), "Invalid resource type UNKNOWN"),
        (_binding(ptype=PT.MATCH), "Invalid pattern type MATCH"),
        (_binding(ptype=PT.ANY), "Invalid pattern type ANY"),
        (_binding(op=OP.ANY), "Invalid operation ANY"),
        (_binding(op=OP.UNKNOWN), "Invalid operation UNKNOWN"),
        (_binding(perm=PERM.ANY), "Invalid permission type ANY"),
    ],
)
def test_creation_is_refused_as_kafka_refuses_it(binding: AclBinding, message: str) -> None:
    refused = creation_error(binding)
    assert refused is not None
    code, text = refused
    assert code == ErrorCode.INVALID_REQUEST
    assert text.startswith(message), text


@pytest.mark.parametrize(
    "binding",
    [
        _binding(),
        # Kafka accepts all of these: a PREFIXED "*" (a prefix, not a wildcard), any
        # principal type, any host text, operations a resource type does not support.
        _binding(name="*", ptype=PT.PREFIXED),
        _binding(name="*"),
        _binding(principal="Group:ops"),
        _binding(principal="User:*"),
        _binding(principal=":nameless"),
        _binding(host="not a host"),
        _binding(host=""),
        _binding(RT.GROUP, "g", op=OP.WRITE),
        _binding(op=OP.ALL, perm=PERM.DENY),
        _binding(RT.CLUSTER, "kafka-cluster", op=OP.IDEMPOTENT_WRITE),
        _binding(RT.USER, "u", op=OP.CREATE_TOKENS),
        _binding(name="x" * 1000),
    ],
)
def test_what_kafka_accepts_is_accepted(binding: AclBinding) -> None:
    assert creation_error(binding) is None
