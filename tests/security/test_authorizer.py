"""AclAuthorizer's decisions, as Kafka's AclAuthorizer makes them, and its changes written
through a real single-node metadata store (LocalAclStorage)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, ConfigError
from kbroker.metadata.acls import LocalAclStorage
from kbroker.metadata.store import METADATA_FILE, METADATA_LOG, LocalMetadataStore
from kbroker.protocol import ErrorCode
from kbroker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    operations_bitfield,
)
from kbroker.security.authorizer import AclAuthorizer, VersionedAcls, parse_super_users

RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, PermissionType
ALICE, BOB = "User:alice", "User:bob"
HOST = "/10.0.0.1"


def acl(principal: str, op: AclOperation, perm: PermissionType = PERM.ALLOW, host: str = "*"):  # type: ignore[no-untyped-def]
    return AccessControlEntry(principal, host, op, perm)


def authorizer(
    acls: dict[tuple[ResourceType, str, PatternType], list[AccessControlEntry]],
    super_users: tuple[str, ...] = (),
    allow_everyone: bool = False,
) -> AclAuthorizer:
    az = AclAuthorizer(super_users, allow_everyone)
    az.replace_all(
        {
            ResourcePattern(t, n, p): VersionedAcls(frozenset(entries), 0)
            for (t, n, p), entries in acls.items()
        }
    )
    return az


def may(
    az: AclAuthorizer, op: AclOperation, name: str, principal: str = ALICE, host: str = HOST
) -> bool:
    return az.authorize(principal, host, op, RT.TOPIC, name)


def test_no_acl_at_all_follows_allow_everyone_if_no_acl_found() -> None:
    assert not may(authorizer({}), OP.READ, "t")
    assert may(authorizer({}, allow_everyone=True), OP.READ, "t")
    # An ACL for someone else on the resource: allow.everyone no longer applies.
    az = authorizer({(RT.TOPIC, "t", PT.LITERAL): [acl(BOB, OP.READ)]}, allow_everyone=True)
    assert not may(az, OP.READ, "t")
    assert may(az, OP.READ, "other")


def test_super_users_may_do_everything() -> None:
    az = authorizer(
        {(RT.TOPIC, "t", PT.LITERAL): [acl(ALICE, OP.ALL, PERM.DENY)]}, super_users=(ALICE,)
    )
    assert may(az, OP.WRITE, "t")
    assert az.authorize(ALICE, HOST, OP.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    assert not may(az, OP.READ, "t", principal=BOB)
    assert parse_super_users(" User:a ; User:b;;") == {"User:a", "User:b"}
    with pytest.raises(ConfigError, match="User:alice"):
        parse_super_users("User:a;alice")


def test_literal_wildcard_and_prefixed_patterns() -> None:
    az = authorizer(
        {
            (RT.TOPIC, "exact", PT.LITERAL): [acl(ALICE, OP.READ)],
            (RT.TOPIC, "*", PT.LITERAL): [acl(BOB, OP.WRITE)],
            (RT.TOPIC, "orders-", PT.PREFIXED): [acl(ALICE, OP.WRITE)],
            (RT.TOPIC, "*", PT.PREFIXED): [acl(ALICE, OP.DELETE)],
        }
    )
    assert may(az, OP.READ, "exact") and not may(az, OP.READ, "exact2")
    # "*" LITERAL: every topic.
    assert may(az, OP.WRITE, "anything", principal=BOB)
    # PREFIXED: names that start with the prefix, the prefix itself included.
    assert may(az, OP.WRITE, "orders-eu") and may(az, OP.WRITE, "orders-")
    assert not may(az, OP.WRITE, "orders") and not may(az, OP.WRITE, "xorders-")
    # A PREFIXED "*" is the character "*", not a wildcard.
    assert may(az, OP.DELETE, "*topic") and not may(az, OP.DELETE, "topic")
    # ACLs of another resource type do not apply.
    assert not az.authorize(ALICE, HOST, OP.READ, RT.GROUP, "exact")


def test_deny_wins_over_allow() -> None:
    az = authorizer(
        {
            (RT.TOPIC, "orders-", PT.PREFIXED): [acl(ALICE, OP.READ), acl(ALICE, OP.ALL)],
            (RT.TOPIC, "orders-secret", PT.LITERAL): [acl(ALICE, OP.READ, PERM.DENY)],
            (RT.TOPIC, "*", PT.LITERAL): [acl("User:*", OP.WRITE, PERM.DENY)],
            (RT.TOPIC, "log-", PT.PREFIXED): [acl(BOB, OP.ALL, PERM.DENY)],
            (RT.TOPIC, "log-app", PT.LITERAL): [acl(BOB, OP.READ)],
        }
    )
    assert may(az, OP.READ, "orders-eu") and not may(az, OP.READ, "orders-secret")
    # The DENY of Read leaves what ALL allows otherwise.
    assert may(az, OP.DELETE, "orders-secret")
    # A wildcard DENY for every principal beats the prefixed ALLOW of ALL.
    assert not may(az, OP.WRITE, "orders-eu")
    # A prefixed DENY of ALL beats a literal ALLOW.
    assert not may(az, OP.READ, "log-app", principal=BOB)


def test_describe_is_implied_but_a_deny_is_exact() -> None:
    az = authorizer(
        {
            (RT.TOPIC, "r", PT.LITERAL): [acl(ALICE, OP.READ)],
            (RT.TOPIC, "w", PT.LITERAL): [acl(ALICE, OP.WRITE)],
            (RT.TOPIC, "c", PT.LITERAL): [acl(ALICE, OP.ALTER_CONFIGS)],
            (RT.TOPIC, "d", PT.LITERAL): [acl(ALICE, OP.READ), acl(ALICE, OP.DESCRIBE, PERM.DENY)],
            (RT.TOPIC, "x", PT.LITERAL): [acl(ALICE, OP.DESCRIBE), acl(ALICE, OP.READ, PERM.DENY)],
        }
    )
    assert may(az, OP.DESCRIBE, "r") and may(az, OP.DESCRIBE, "w")
    assert not may(az, OP.WRITE, "r") and not may(az, OP.READ, "w")
    assert may(az, OP.DESCRIBE_CONFIGS, "c") and not may(az, OP.DESCRIBE, "c")
    # A DENY of Describe refuses Describe only; a DENY of Read does not refuse Describe.
    assert may(az, OP.READ, "d") and not may(az, OP.DESCRIBE, "d")
    assert may(az, OP.DESCRIBE, "x") and not may(az, OP.READ, "x")


def test_hosts_and_principal_wildcards() -> None:
    az = authorizer(
        {
            (RT.TOPIC, "t", PT.LITERAL): [
                acl(ALICE, OP.READ, host="10.0.0.1"),
                acl("User:*", OP.WRITE, host="*"),
                acl(BOB, OP.ALL, PERM.DENY, host="10.0.0.9"),
                acl(ALICE, OP.DELETE, host="0:0:0:0:0:0:0:1"),
            ]
        }
    )
    assert may(az, OP.READ, "t", host="/10.0.0.1") and may(az, OP.READ, "t", host="10.0.0.1")
    assert not may(az, OP.READ, "t", host="/10.0.0.2")
    # "User:*" is every principal, of any type.
    assert may(az, OP.WRITE, "t", principal="User:carol") and may(
        az, OP.WRITE, "t", principal="Group:x"
    )
    assert may(az, OP.WRITE, "t", principal=BOB, host="/10.0.0.8")
    assert not may(az, OP.WRITE, "t", principal=BOB, host="/10.0.0.9")
    # IPv6 clients are compared in Java's form.
    assert may(az, OP.DELETE, "t", host="/::1")


def test_cached_decisions_follow_every_change() -> None:
    az = authorizer({})
    assert not may(az, OP.READ, "t")
    pattern = ResourcePattern(RT.TOPIC, "t", PT.PREFIXED)
    az.set_resource(pattern, VersionedAcls(frozenset({acl(ALICE, OP.READ)}), 0))
    assert may(az, OP.READ, "t") and may(az, OP.READ, "t2")
    az.set_resource(pattern, VersionedAcls(frozenset({acl(ALICE, OP.READ, PERM.DENY)}), 1))
    assert not may(az, OP.READ, "t2")
    az.set_resource(pattern, VersionedAcls(frozenset()))
    assert not may(az, OP.READ, "t2") and az.count() == 0
    az.replace_all({pattern: VersionedAcls(frozenset({acl(ALICE, OP.READ)}), 2)})
    assert may(az, OP.READ, "t2")


def test_authorized_operations() -> None:
    az = authorizer(
        {
            (RT.GROUP, "g", PT.LITERAL): [acl(ALICE, OP.READ)],
            (RT.CLUSTER, "kafka-cluster", PT.LITERAL): [acl(ALICE, OP.ALL)],
        }
    )
    # Read implies Describe; Delete is not allowed.
    assert az.authorized_operations(ALICE, HOST, RT.GROUP, "g") == operations_bitfield(
        [OP.READ, OP.DESCRIBE]
    )
    assert az.authorized_operations(ALICE, HOST, RT.CLUSTER, "kafka-cluster") == (
        operations_bitfield(
            [
                OP.CREATE,
                OP.CLUSTER_ACTION,
                OP.DESCRIBE_CONFIGS,
                OP.ALTER_CONFIGS,
                OP.IDEMPOTENT_WRITE,
                OP.ALTER,
                OP.DESCRIBE,
            ]
        )
    )
    assert az.authorized_operations(BOB, HOST, RT.GROUP, "g") == 0


@pytest.mark.parametrize(
    ("acls", "allow_everyone", "expected"),
    [
        ({}, False, False),
        ({}, True, True),
        ({(RT.TOPIC, "t", PT.LITERAL): [acl(ALICE, OP.WRITE)]}, False, True),
        ({(RT.TOPIC, "t", PT.LITERAL): [acl(ALICE, OP.ALL)]}, False, True),
        ({(RT.TOPIC, "t", PT.LITERAL): [acl(ALICE, OP.READ)]}, False, False),
        ({(RT.GROUP, "t", PT.LITERAL): [acl(ALICE, OP.WRITE)]}, False, False),
        # The only ALLOW is on a name a DENY covers.
        (
            {(RT.TOPIC, "t", PT.LITERAL): [acl(ALICE, OP.WRITE), acl(ALICE, OP.WRITE, PERM.DENY)]},
            False,
            False,
        ),
        (
            {
                (RT.TOPIC, "t-1", PT.LITERAL): [acl(ALICE, OP.WRITE)],
                (RT.TOPIC, "t-", PT.PREFIXED): [acl(ALICE, OP.WRITE, PERM.DENY)],
            },
            False,
            False,
        ),
        (
            {
                (RT.TOPIC, "t-", PT.PREFIXED): [acl(ALICE, OP.WRITE)],
                (RT.TOPIC, "t-1", PT.LITERAL): [acl(ALICE, OP.WRITE, PERM.DENY)],
            },
            False,
            True,
        ),
        # A DENY of "*" refuses whatever else is allowed, allow.everyone included.
        (
            {
                (RT.TOPIC, "*", PT.LITERAL): [acl(ALICE, OP.WRITE, PERM.DENY)],
                (RT.TOPIC, "t", PT.PREFIXED): [acl(ALICE, OP.WRITE)],
            },
            True,
            False,
        ),
        ({(RT.TOPIC, "*", PT.LITERAL): [acl("User:*", OP.WRITE)]}, False, True),
    ],
)
def test_authorize_any_topic_as_kafkas_authorize_by_resource_type(
    acls: dict[tuple[ResourceType, str, PatternType], list[AccessControlEntry]],
    allow_everyone: bool,
    expected: bool,
) -> None:
    az = authorizer(acls, allow_everyone=allow_everyone)
    assert az.authorize_any(ALICE, HOST, OP.WRITE, RT.TOPIC) is expected


def test_from_config() -> None:
    assert AclAuthorizer.from_config(BrokerConfig.from_strings([])) is None
    for name in (
        "kafka.security.authorizer.AclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ):
        az = AclAuthorizer.from_config(
            BrokerConfig.from_strings(
                [
                    ("authorizer.class.name", name),
                    ("super.users", "User:admin;User:broker"),
                    ("allow.everyone.if.no.acl.found", "true"),
                ]
            )
        )
        assert az is not None
        assert az.super_users == {"User:admin", "User:broker"} and az.allow_everyone_if_no_acl
    with pytest.raises(ConfigError, match="not one of"):
        BrokerConfig.from_strings([("authorizer.class.name", "com.example.Mine")])


# -- changes, through a real single-node metadata store ----------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalMetadataStore]:
    s = LocalMetadataStore(tmp_path, 0)
    s.load()
    yield s
    s.close()


def binding(
    name: str,
    principal: str = ALICE,
    op: AclOperation = OP.READ,
    perm: PermissionType = PERM.ALLOW,
    ptype: PatternType = PT.LITERAL,
    rtype: ResourceType = RT.TOPIC,
) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype), acl(principal, op, perm))


def topic_filter(
    name: str | None, ptype: PatternType = PT.ANY, principal: str | None = None
) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(RT.TOPIC, name, ptype),
        AccessControlEntryFilter(principal, None, OP.ANY, PERM.ANY),
    )


def test_create_and_delete_through_the_metadata_store(
    store: LocalMetadataStore, tmp_path: Path
) -> None:
    az = AclAuthorizer(storage=LocalAclStorage(store))

    async def scenario() -> None:
        errors = await az.create_acls(
            [
                binding("t1"),
                binding("t1", BOB, OP.WRITE),
                binding("pre-", ptype=PT.PREFIXED, op=OP.WRITE),
                binding("", op=OP.WRITE),
                binding("t1"),  # twice in one request: one ACL
            ]
        )
        assert [None if e is None else e.code for e in errors] == [
            None,
            None,
            None,
            ErrorCode.INVALID_REQUEST,
            None,
        ]
        assert az.count() == 3
        assert may(az, OP.READ, "t1") and may(az, OP.WRITE, "pre-x")
        # What the store keeps: Kafka's znode JSON under Kafka's paths.
        assert store.entry("/kafka-acl/Topic/t1") == {
            "acls": [
                {"principal": ALICE, "permissionType": "Allow", "host": "*", "operation": "Read"},
                {"principal": BOB, "permissionType": "Allow", "host": "*", "operation": "Write"},
            ],
            "version": 1,
        }
        assert store.entry("/kafka-acl-extended/prefixed/Topic/pre-") is not None
        # Creating what exists changes nothing.
        assert await az.create_acls([binding("t1")]) == [None]
        assert az.count() == 3

        # Each removed ACL is reported under the first filter that matched it.
        deleted = await az.delete_acls(
            [topic_filter("t1", PT.LITERAL, BOB), topic_filter(None), topic_filter("none")]
        )
        assert [[(b.pattern.name, b.entry.principal, e) for b, e in r] for r in deleted] == [
            [("t1", BOB, None)],
            [("pre-", ALICE, None), ("t1", ALICE, None)],
            [],
        ]
        assert az.count() == 0
        assert store.entry("/kafka-acl/Topic/t1") is None
        assert store.entries("/kafka-acl") == {}

        await az.create_acls([binding("kept", op=OP.DESCRIBE, perm=PERM.DENY)])

    asyncio.run(scenario())
    store.close()
    # A restarted node loads what was recorded.
    again = LocalMetadataStore(tmp_path, 0)
    again.load()
    try:
        loaded = LocalAclStorage(again).read_all()
        assert loaded == {
            ResourcePattern(RT.TOPIC, "kept"): VersionedAcls(
                frozenset({acl(ALICE, OP.DESCRIBE, PERM.DENY)}), 0
            )
        }
    finally:
        again.close()
    recorded = (tmp_path / METADATA_LOG).read_text() + (
        (tmp_path / METADATA_FILE).read_text() if (tmp_path / METADATA_FILE).exists() else ""
    )
    assert "/kafka-acl/Topic/kept" in recorded
    assert json.loads(recorded.splitlines()[-1])["data"]["acls"][0]["permissionType"] == "Deny"


def test_listing_with_filters(store: LocalMetadataStore) -> None:
    az = AclAuthorizer(storage=LocalAclStorage(store))

    async def scenario() -> None:
        await az.create_acls(
            [
                binding("orders-eu"),
                binding("orders-", ptype=PT.PREFIXED, op=OP.WRITE),
                binding("*", BOB),
                binding("g", rtype=RT.GROUP),
            ]
        )

    asyncio.run(scenario())
    names = [
        (b.pattern.name, b.pattern.pattern_type)
        for b in az.acls(topic_filter("orders-eu", PT.MATCH))
    ]
    # Ordered by resource type, then name.
    assert names == [("*", PT.LITERAL), ("orders-", PT.PREFIXED), ("orders-eu", PT.LITERAL)]
    assert len(az.acls(AclBindingFilter.any())) == 4
    assert [b.pattern.name for b in az.acls(topic_filter(None, principal=BOB))] == ["*"]
