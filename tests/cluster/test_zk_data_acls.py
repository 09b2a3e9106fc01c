"""The ACL znodes' codecs (kbroker.cluster.zk_data), against the bytes a Kafka 3.9.1 broker
wrote (captured from its ZooKeeper with kafka-acls.sh and CreateAcls), and their refusal of
anything else with ZkDataError only."""

from __future__ import annotations

import pytest

from kbroker.cluster.errors import ZkDataError
from kbroker.cluster.zk_data import (
    acl_path,
    acl_pattern_of_path,
    decode_acl_change,
    decode_acls,
    encode_acl_change,
    encode_acls,
)
from kbroker.security.acl import (
    AccessControlEntry,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)

RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, PermissionType

# /kafka-acl/Topic/x as Kafka 3.9.1 wrote it after CreateAcls.
KAFKA_TOPIC_ACLS = (
    b'{"acls":[{"principal":"Group:a","permissionType":"Allow","host":"*","operation":"Read"},'
    b'{"principal":"User:a","permissionType":"Deny","host":"*","operation":"All"},'
    b'{"principal":"User:a","permissionType":"Allow","host":"not a host","operation":"Read"},'
    b'{"principal":":a","permissionType":"Allow","host":"*","operation":"Read"},'
    b'{"principal":"User:*","permissionType":"Allow","host":"10.0.0.1","operation":"Read"},'
    b'{"principal":"User:a","permissionType":"Allow","host":"","operation":"IdempotentWrite"}],'
    b'"version":1}'
)


def test_kafkas_acl_znode_decodes() -> None:
    assert decode_acls(KAFKA_TOPIC_ACLS) == {
        AccessControlEntry("Group:a", "*", OP.READ, PERM.ALLOW),
        AccessControlEntry("User:a", "*", OP.ALL, PERM.DENY),
        AccessControlEntry("User:a", "not a host", OP.READ, PERM.ALLOW),
        AccessControlEntry(":a", "*", OP.READ, PERM.ALLOW),
        AccessControlEntry("User:*", "10.0.0.1", OP.READ, PERM.ALLOW),
        AccessControlEntry("User:a", "", OP.IDEMPOTENT_WRITE, PERM.ALLOW),
    }
    # No data: no ACLs, as Kafka reads it.
    assert decode_acls(b"") == frozenset() and decode_acls(None) == frozenset()


def test_an_acl_znode_is_written_as_kafka_writes_it() -> None:
    entries = [
        AccessControlEntry("User:alice", "*", OP.READ, PERM.ALLOW),
        AccessControlEntry("User:bob", "10.0.0.9", OP.DESCRIBE_CONFIGS, PERM.DENY),
    ]
    assert encode_acls(entries) == (
        b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*",'
        b'"operation":"Read"},{"principal":"User:bob","permissionType":"Deny",'
        b'"host":"10.0.0.9","operation":"DescribeConfigs"}],"version":1}'
    )
    assert decode_acls(encode_acls(entries)) == set(entries)


def test_paths_of_both_stores() -> None:
    cases = {
        ResourcePattern(RT.TOPIC, "t1"): "/kafka-acl/Topic/t1",
        ResourcePattern(RT.TRANSACTIONAL_ID, "tx", PT.PREFIXED): (
            "/kafka-acl-extended/prefixed/TransactionalId/tx"
        ),
        ResourcePattern(RT.CLUSTER, "kafka-cluster"): "/kafka-acl/Cluster/kafka-cluster",
        ResourcePattern(RT.GROUP, "*"): "/kafka-acl/Group/*",
    }
    for pattern, path in cases.items():
        assert acl_path(pattern) == path
        assert acl_pattern_of_path(path) == pattern
    for bad in ("/kafka-acl/Topic", "/kafka-acl/Nope/x", "/config/topics/t", "/kafka-acl/Any/x"):
        with pytest.raises(ZkDataError):
            acl_pattern_of_path(bad)
    for name in ("", "a/b", "..", "nul\x00"):
        with pytest.raises(ZkDataError):
            acl_path(ResourcePattern(RT.TOPIC, name))
    with pytest.raises(ZkDataError):
        acl_path(ResourcePattern(RT.TOPIC, "t", PT.MATCH))


def test_change_notifications_as_kafka_writes_them() -> None:
    # The literal store names the resource type's enum constant, as Kafka 3.9.1 does.
    assert encode_acl_change(ResourcePattern(RT.TOPIC, "t1")) == b"TOPIC:t1"
    assert encode_acl_change(ResourcePattern(RT.TRANSACTIONAL_ID, "tx1")) == b"TRANSACTIONAL_ID:tx1"
    assert encode_acl_change(ResourcePattern(RT.TOPIC, "pre", PT.PREFIXED)) == (
        b'{"version":1,"resourceType":"TOPIC","name":"pre","patternType":"PREFIXED"}'
    )
    for data, pattern in (
        (b"GROUP:*", ResourcePattern(RT.GROUP, "*")),
        (b"CLUSTER:kafka-cluster", ResourcePattern(RT.CLUSTER, "kafka-cluster")),
        (b"Topic:with:colons", ResourcePattern(RT.TOPIC, "with:colons")),
        (b"USER:u", ResourcePattern(RT.USER, "u")),
    ):
        assert decode_acl_change("/kafka-acl-changes", data) == pattern
    assert decode_acl_change(
        "/kafka-acl-extended-changes",
        b'{"version":1,"resourceType":"TOPIC","name":"pre","patternType":"PREFIXED"}',
    ) == ResourcePattern(RT.TOPIC, "pre", PT.PREFIXED)


@pytest.mark.parametrize(
    "data",
    [
        b"x",
        b"\xff\xfe",
        b"[]",
        b'{"version":2,"acls":[]}',
        b'{"version":1}',
        b'{"version":1,"acls":{}}',
        b'{"version":1,"acls":[1]}',
        b'{"version":1,"acls":[{"principal":5,"permissionType":"Allow","host":"*",'
        b'"operation":"Read"}]}',
        b'{"version":1,"acls":[{"principal":"User:a"}]}',
        b"[" * 100_000,
    ],
)
def test_unreadable_acl_znodes_are_zk_data_errors(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        decode_acls(data)


def test_entries_that_can_match_nothing_are_left_out() -> None:
    data = (
        b'{"version":1,"acls":['
        b'{"principal":"User:a","permissionType":"Allow","host":"*","operation":"Fly"},'
        b'{"principal":"User:a","permissionType":"Maybe","host":"*","operation":"Read"},'
        b'{"principal":"nobody","permissionType":"Allow","host":"*","operation":"Read"},'
        b'{"principal":"User:a","permissionType":"Allow","host":"*","operation":"Write"}]}'
    )
    assert decode_acls(data) == {AccessControlEntry("User:a", "*", OP.WRITE, PERM.ALLOW)}


@pytest.mark.parametrize(
    ("changes", "data"),
    [
        ("/kafka-acl-changes", b"TOPIC"),
        ("/kafka-acl-changes", b"TOPIC:"),
        ("/kafka-acl-changes", b"NOPE:x"),
        ("/kafka-acl-changes", b"ANY:x"),
        ("/kafka-acl-changes", b"\xff"),
        ("/kafka-acl-changes", None),
        ("/kafka-acl-extended-changes", b"TOPIC:x"),
        (
            "/kafka-acl-extended-changes",
            b'{"version":2,"resourceType":"TOPIC","name":"x","patternType":"PREFIXED"}',
        ),
        (
            "/kafka-acl-extended-changes",
            b'{"version":1,"resourceType":"TOPIC","name":"x","patternType":"MATCH"}',
        ),
        (
            "/kafka-acl-extended-changes",
            b'{"version":1,"resourceType":"TOPIC","name":"","patternType":"PREFIXED"}',
        ),
    ],
)
def test_unreadable_notifications_are_zk_data_errors(changes: str, data: bytes | None) -> None:
    with pytest.raises(ZkDataError):
        decode_acl_change(changes, data)
