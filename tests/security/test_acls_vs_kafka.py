"""ACLs on a single kbroker node and on Apache Kafka 3.9.1 (ZooKeeper mode, AclAuthorizer),
with the same assertions: each test runs against both (``target``: one broker per system for
the whole module, ``allow.everyone.if.no.acl.found=true`` so that resources without ACLs stay
open, as a cluster being secured step by step has them).

- ACLs are managed through Kafka's own kafka-acls.sh (AclCommand), confluent-kafka's
  AdminClient and raw CreateAcls, whose refusals are Kafka's codes and messages.
- They are enforced: a consumer denied Read, a topic hidden from Metadata, a PREFIXED ALLOW
  that holds only from the host it names (the test's raw client connects from 127.0.0.2),
  group APIs denied, the inter-broker APIs and a replica fetch refused without
  ClusterAction, and the authorized-operations bit fields.

Until SASL is there every client is User:ANONYMOUS; the host is what sets clients apart.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.acls import CreateAclsRequest, DescribeAclsRequest
from kbroker.protocol.messages.admin import DescribeClusterRequest, DescribeLogDirsRequest
from kbroker.protocol.messages.core import FetchRequest, InitProducerIdRequest, MetadataRequest
from kbroker.protocol.messages.group import (
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    OffsetFetchRequest,
)
from kbroker.protocol.messages.inter_broker import AllocateProducerIdsRequest
from kbroker.protocol.messages.txn import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
)
from kbroker.tools.client import ClientError
from tests.broker.test_inter_broker_refusals import (
    alter_partition,
    leader_and_isr,
    stop_replica,
    update_metadata,
)
from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import (
    KBROKER,
    BrokerProcess,
    Wire,
    create_topic,
    init_producer_id,
    knows_controller,
    produce,
    produce_req,
    read_error,
    single_error_line,
    topic_name,
    wait_for,
)
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}
ANONYMOUS = "User:ANONYMOUS"
# The raw client's address: ACLs naming 127.0.0.1 do not cover it.
OTHER_HOST = "127.0.0.2"


@dataclass
class Target:
    system: str
    bootstrap: str
    admin: AdminClient


@pytest.fixture(scope="module", params=["kafka", "kbroker"])
def target(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Target]:
    root = tmp_path_factory.mktemp(f"acls-{request.param}")
    if request.param == "kafka":
        chroot = f"/acls-{uuid.uuid4().hex[:8]}"
        with kafka_zk_broker(zookeeper.connect, chroot, root, settings=SETTINGS) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield Target(
                "kafka", kafka.bootstrap, AdminClient({"bootstrap.servers": kafka.bootstrap})
            )
        return
    broker = BrokerProcess(root / "data", extra=[f"{k}={v}" for k, v in SETTINGS.items()])
    broker.start()
    try:
        yield Target(
            "kbroker", broker.bootstrap, AdminClient({"bootstrap.servers": broker.bootstrap})
        )
        assert "Traceback" not in broker.output()
    finally:
        broker.kill()


def admin(target: Target) -> AdminClient:
    """The module's admin client for ``target`` (kept: its futures die with it)."""
    return target.admin


def binding(
    name: str,
    op: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    restype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    principal: str = ANONYMOUS,
    host: str = "*",
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, op, permission)


def create_acls(target: Target, *bindings: AclBinding) -> None:
    for future in admin(target).create_acls(list(bindings)).values():
        future.result(15)


def delete_acls(target: Target, f: AclBindingFilter) -> list[AclBinding]:
    (future,) = admin(target).delete_acls([f]).values()
    return sorted(future.result(15), key=str)


def describe_acls(target: Target, f: AclBindingFilter) -> list[AclBinding]:
    return sorted(admin(target).describe_acls(f).result(15), key=str)


def every_acl_of(name: str, restype: ResourceType = ResourceType.TOPIC) -> AclBindingFilter:
    return AclBindingFilter(
        restype,
        name,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def acl_command(target: Target, *args: str) -> str:
    java, lib = require_kafka()
    done = subprocess.run(
        [
            java,
            "-cp",
            f"{lib}/*",
            "kafka.admin.AclCommand",
            "--bootstrap-server",
            target.bootstrap,
            *list(args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# -- managing ACLs ---------------------------------------------------------------------


def test_kafka_acls_sh_adds_lists_and_removes(target: Target) -> None:
    topic, group = topic_name("cmd"), topic_name("cmd-group")
    out = acl_command(
        target,
        "--add",
        "--allow-principal",
        "User:alice",
        "--allow-principal",
        "User:bob",
        "--allow-host",
        "10.0.0.7",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        topic,
        "--group",
        group,
        "--resource-pattern-type",
        "prefixed",
    )
    assert out.count("Adding ACLs for resource") == 2
    listed = acl_command(
        target, "--list", "--topic", topic, "--group", group, "--resource-pattern-type", "prefixed"
    )
    for kind, name in (("TOPIC", topic), ("GROUP", group)):
        head = f"resource `ResourcePattern(resourceType={kind}, name={name}, patternType=PREFIXED)`"
        assert f"Current ACLs for {head}:" in listed, listed
        section = listed.split(f"Current ACLs for {head}:")[1].split("\n\n")[0]
        for who in ("User:alice", "User:bob"):
            for op in ("READ", "DESCRIBE"):
                entry = f"(principal={who}, host=10.0.0.7, operation={op}, permissionType=ALLOW)"
                assert entry in section, listed
    assert len(describe_acls(target, every_acl_of(topic))) == 4
    assert len(describe_acls(target, every_acl_of(group, ResourceType.GROUP))) == 4
    acl_command(
        target,
        "--remove",
        "--force",
        "--topic",
        topic,
        "--group",
        group,
        "--resource-pattern-type",
        "prefixed",
    )
    assert describe_acls(target, every_acl_of(topic)) == []
    assert describe_acls(target, every_acl_of(group, ResourceType.GROUP)) == []


def test_admin_client_creates_describes_and_deletes(target: Target) -> None:
    prefix = topic_name("admin")
    literal = binding(f"{prefix}-t", AclOperation.READ, principal="User:alice")
    prefixed = binding(
        prefix,
        AclOperation.WRITE,
        AclPermissionType.DENY,
        pattern=ResourcePatternType.PREFIXED,
        principal="User:bob",
        host="10.0.0.9",
    )
    group = binding(prefix, AclOperation.READ, restype=ResourceType.GROUP, principal="User:alice")
    create_acls(target, literal, prefixed, group)
    # MATCH: every ACL that applies to the topic named.
    match = AclBindingFilter(
        ResourceType.TOPIC,
        f"{prefix}-t",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert describe_acls(target, match) == sorted([literal, prefixed], key=str)
    by_principal = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert [b for b in describe_acls(target, by_principal) if prefix in b.name] == sorted(
        [literal, group], key=str
    )
    # Deleting with a filter returns what it deleted.
    assert delete_acls(target, every_acl_of(prefix)) == [prefixed]
    assert delete_acls(target, every_acl_of(prefix)) == []
    assert delete_acls(target, every_acl_of(f"{prefix}-t")) == [literal]
    assert delete_acls(target, every_acl_of(prefix, ResourceType.GROUP)) == [group]


C = CreateAclsRequest.Creation


def creation(**fields: Any) -> Any:
    base = {
        "resource_type": 2,
        "resource_name": "validated",
        "resource_pattern_type": 3,
        "principal": "User:alice",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    return C(**base | fields)


def test_create_acls_refuses_what_kafka_refuses(target: Target) -> None:
    name = topic_name("valid")
    cases: list[tuple[Any, int, str | None]] = [
        (creation(resource_name=name), ErrorCode.NONE, ""),
        (creation(resource_name=""), ErrorCode.INVALID_REQUEST, "Invalid empty resource name"),
        (
            creation(resource_name="", resource_pattern_type=4),
            ErrorCode.INVALID_REQUEST,
            "Invalid empty resource name",
        ),
        (
            creation(resource_type=4, resource_name="my-cluster", operation=7),
            ErrorCode.INVALID_REQUEST,
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (creation(resource_name="a/b"), ErrorCode.INVALID_REQUEST, "Failed to create ACL"),
        (creation(resource_type=99), ErrorCode.INVALID_REQUEST, None),
        # Accepted by Kafka: a PREFIXED "*" (the character), any principal type, a host
        # that is no address, an operation the resource type has no use for.
        (creation(resource_name=name, resource_pattern_type=4), ErrorCode.NONE, ""),
        (creation(resource_name=name, principal="Group:ops"), ErrorCode.NONE, ""),
        (creation(resource_name=name, host="not a host"), ErrorCode.NONE, ""),
        (creation(resource_type=3, resource_name=name, operation=4), ErrorCode.NONE, ""),
    ]
    w = Wire(target.bootstrap)
    try:
        for c, code, message in cases:
            (result,) = w.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[c])).results
            assert result.error_code == code, c
            if message is not None:
                assert (result.error_message or "").startswith(message), result
        # A principal without a type: Kafka 3.9's ZooKeeper authorizer fails it with
        # UNKNOWN_SERVER_ERROR, kbroker (as Kafka's KRaft authorizer) INVALID_REQUEST.
        (bad,) = w.request(
            ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[creation(principal="alice")])
        ).results
        expected = (
            ErrorCode.UNKNOWN_SERVER_ERROR
            if target.system == "kafka"
            else ErrorCode.INVALID_REQUEST
        )
        assert bad.error_code == expected
    finally:
        w.close()
    assert len(describe_acls(target, every_acl_of(name, ResourceType.ANY))) == 5
    delete_acls(target, every_acl_of(name, ResourceType.ANY))

    # A filter with a code Kafka does not know: Kafka closes the connection, kbroker
    # answers INVALID_REQUEST (and the connection serves on).
    w = Wire(target.bootstrap)
    try:
        unknown = DescribeAclsRequest(
            resource_type_filter=1, pattern_type_filter=1, operation=0, permission_type=1
        )
        if target.system == "kafka":
            with pytest.raises(ClientError, match="closed the connection"):
                w.request(ApiKey.DESCRIBE_ACLS, 3, unknown)
        else:
            resp = w.request(ApiKey.DESCRIBE_ACLS, 3, unknown)
            assert (resp.error_code, resp.resources) == (ErrorCode.INVALID_REQUEST, [])
            assert w.request(ApiKey.DESCRIBE_ACLS, 3, everything()).error_code == ErrorCode.NONE
    finally:
        w.close()


def everything() -> Any:
    return DescribeAclsRequest(
        resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
    )


# -- enforcement -------------------------------------------------------------------------


def test_a_consumer_denied_read_gets_topic_authorization_failed(target: Target) -> None:
    topic = topic_name("deny-read")
    create_topic(target.bootstrap, topic)
    assert produce(target.bootstrap, topic, [(None, b"before")])[0][0] is None
    assert read_error(target.bootstrap, topic) is None
    create_acls(
        target,
        binding(topic, AclOperation.DESCRIBE),
        binding(topic, AclOperation.READ, AclPermissionType.DENY),
    )
    # The consumer finds the topic (Describe) and is refused its records (Read).
    assert read_error(target.bootstrap, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The topic has ACLs now: allow.everyone.if.no.acl.found no longer opens it to writes.
    reports = produce(target.bootstrap, topic, [(None, b"after")], **{"message.timeout.ms": 5000})
    error = reports[0][0]
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    delete_acls(target, every_acl_of(topic))
    assert read_error(target.bootstrap, topic) is None


def test_metadata_hides_a_topic_that_may_not_be_described(target: Target) -> None:
    hidden, seen = topic_name("hidden"), topic_name("seen")
    create_topic(target.bootstrap, hidden)
    create_topic(target.bootstrap, seen)
    create_acls(target, binding(hidden, AclOperation.DESCRIBE, AclPermissionType.DENY))
    topics = admin(target).list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    named = admin(target).list_topics(hidden, timeout=10).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    delete_acls(target, every_acl_of(hidden))
    assert hidden in admin(target).list_topics(timeout=10).topics


def test_a_prefixed_allow_holds_from_the_host_it_names(target: Target) -> None:
    prefix = topic_name("pfx") + "-"
    topic = prefix + "orders"
    create_topic(target.bootstrap, topic)
    create_acls(
        target,
        binding(prefix, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED, host="127.0.0.1"),
    )
    # From 127.0.0.1: Write, and Describe (implied), are allowed.
    assert produce(target.bootstrap, topic, [(None, b"ok")])[0][0] is None
    w = Wire(target.bootstrap, source_host=OTHER_HOST)
    try:
        resp = w.request(ApiKey.PRODUCE, 9, produce_req(topic, build_batch([(None, b"v", [])])))
        assert resp.responses[0].partition_responses[0].error_code == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        md = w.request(
            ApiKey.METADATA,
            12,
            MetadataRequest(
                topics=[MetadataRequest.Topic(name=topic)], allow_auto_topic_creation=False
            ),
        )
        assert [(t.name, t.error_code) for t in md.topics] == [
            (topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ]
    finally:
        w.close()
    delete_acls(target, every_acl_of(prefix))


def test_group_apis_need_the_groups_permissions(target: Target) -> None:
    group = topic_name("group")
    create_acls(
        target,
        binding(group, AclOperation.ALL, AclPermissionType.DENY, restype=ResourceType.GROUP),
    )
    w = Wire(target.bootstrap)
    try:
        fc = w.request(
            ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=[group])
        )
        assert fc.coordinators[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        join = w.request(
            ApiKey.JOIN_GROUP,
            5,
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.Protocol(name="range", metadata=b"")],
            ),
        )
        assert (join.error_code, join.member_id) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, "")
        fetched = w.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id=group, topics=None))
        assert fetched.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        described = w.request(
            ApiKey.DESCRIBE_GROUPS,
            5,
            DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
        )
        (g,) = described.groups
        assert (g.error_code, g.group_state, g.authorized_operations) == (
            ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "",
            -(2**31),
        )
    finally:
        w.close()
    delete_acls(target, every_acl_of(group, ResourceType.GROUP))


def test_authorized_operations(target: Target) -> None:
    topic, group = topic_name("ops"), topic_name("ops-group")
    create_topic(target.bootstrap, topic)
    create_acls(
        target,
        binding(topic, AclOperation.READ),
        binding(topic, AclOperation.ALTER_CONFIGS),
        binding(group, AclOperation.DELETE, restype=ResourceType.GROUP),
    )
    w = Wire(target.bootstrap)
    try:
        md = w.request(
            ApiKey.METADATA,
            10,
            MetadataRequest(
                topics=[MetadataRequest.Topic(name=topic)],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True,
                include_topic_authorized_operations=True,
            ),
        )
        # Read, Describe (implied by Read), AlterConfigs, DescribeConfigs (implied).
        assert md.topics[0].topic_authorized_operations == (1 << 3) | (1 << 8) | (1 << 11) | (
            1 << 10
        )
        # No cluster ACL: everything a cluster supports (allow.everyone.if.no.acl.found).
        # Create, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite.
        cluster_ops = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
        assert md.cluster_authorized_operations == cluster_ops
        plain = w.request(
            ApiKey.METADATA,
            10,
            MetadataRequest(
                topics=[MetadataRequest.Topic(name=topic)], allow_auto_topic_creation=False
            ),
        )
        assert plain.topics[0].topic_authorized_operations == -(2**31)
        assert plain.cluster_authorized_operations == -(2**31)
        dc = w.request(
            ApiKey.DESCRIBE_CLUSTER,
            0,
            DescribeClusterRequest(include_cluster_authorized_operations=True),
        )
        assert dc.cluster_authorized_operations == md.cluster_authorized_operations
        # A group that exists only in name (Dead): Delete, and Describe, are all it grants.
        (g,) = w.request(
            ApiKey.DESCRIBE_GROUPS,
            5,
            DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
        ).groups
        assert g.error_code == ErrorCode.NONE
        assert g.authorized_operations == (1 << 6) | (1 << 8)
    finally:
        w.close()
    delete_acls(target, every_acl_of(topic))
    delete_acls(target, every_acl_of(group, ResourceType.GROUP))


def replica_fetch(topic: str) -> Any:
    partition = FetchRequest.Topic.Partition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return FetchRequest(
        replica_id=5,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.Topic(topic=topic, partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
    )


INTER_BROKER = [
    (ApiKey.LEADER_AND_ISR, 7, leader_and_isr),
    (ApiKey.STOP_REPLICA, 4, stop_replica),
    (ApiKey.UPDATE_METADATA, 8, update_metadata),
    (ApiKey.ALTER_PARTITION, 3, alter_partition),
    (
        ApiKey.ALLOCATE_PRODUCER_IDS,
        0,
        lambda: AllocateProducerIdsRequest(broker_id=1, broker_epoch=-1),
    ),
]


def test_only_brokers_may_send_broker_requests(target: Target) -> None:
    """ClusterAction is allowed from 127.0.0.1 only (where the Kafka broker's controller
    connects from): a client at 127.0.0.2 is refused the inter-broker APIs and replica
    fetches (CVE-2018-1288), and every cluster-level operation."""
    topic = topic_name("replica")
    create_topic(target.bootstrap, topic)
    assert produce(target.bootstrap, topic, [(None, b"secret")])[0][0] is None
    # confluent-kafka calls the cluster resource type (4) BROKER.
    cluster_acl = binding(
        "kafka-cluster", AclOperation.ALL, restype=ResourceType.BROKER, host="127.0.0.1"
    )
    create_acls(target, cluster_acl)
    w = Wire(target.bootstrap, source_host=OTHER_HOST)
    try:
        for key, version, build in INTER_BROKER:
            resp = w.request(key, version, build())
            assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, key
            if key == ApiKey.LEADER_AND_ISR:
                assert [
                    (p.partition_index, p.error_code)
                    for t in resp.topics
                    for p in t.partition_errors
                ] == [(0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
            if key == ApiKey.STOP_REPLICA:
                assert [
                    (p.topic_name, p.partition_index, p.error_code) for p in resp.partition_errors
                ] == [("refusals", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
        fetched = w.request(ApiKey.FETCH, 12, replica_fetch(topic))
        (part,) = fetched.responses[0].partitions
        assert (part.error_code, bytes(part.records or b"")) == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            b"",
        )
        logs = w.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
        assert (logs.error_code, logs.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        (refused,) = w.request(
            ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[creation(resource_name=topic)])
        ).results
        assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        dc = w.request(
            ApiKey.DESCRIBE_CLUSTER,
            0,
            DescribeClusterRequest(include_cluster_authorized_operations=True),
        )
        assert dc.cluster_authorized_operations == 0
        # Auto-creation needs Create on the cluster (refused here) or on the topic (this
        # one has an ACL, and none allows Create).
        missing = topic_name("auto")
        create_acls(target, binding(missing, AclOperation.DESCRIBE))
        md = w.request(
            ApiKey.METADATA,
            12,
            MetadataRequest(
                topics=[MetadataRequest.Topic(name=missing)], allow_auto_topic_creation=True
            ),
        )
        assert [(t.name, t.error_code) for t in md.topics] == [
            (missing, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ]
        assert missing not in admin(target).list_topics(timeout=10).topics
        delete_acls(target, every_acl_of(missing))
        # An idempotent producer may still start: Kafka's "Write on some topic" check is
        # allowed for topics without ACLs (allow.everyone.if.no.acl.found). (Kafka's first
        # answer may be COORDINATOR_LOAD_IN_PROGRESS while it reserves producer ids.)
        started = wait_for(
            lambda: (code := init_producer_id(w).error_code) != 14 and [code],
            "an answer to InitProducerId",
        )
        assert started == [ErrorCode.NONE]
    finally:
        w.close()
    # From 127.0.0.1 the same fetch passes authorization (and is refused as one from a
    # broker that is no replica of the partition).
    local = Wire(target.bootstrap)
    try:
        fetched = local.request(ApiKey.FETCH, 12, replica_fetch(topic))
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        local.close()
    delete_acls(target, every_acl_of("kafka-cluster", ResourceType.BROKER))


def test_transaction_apis_need_the_transactional_ids_permissions(target: Target) -> None:
    """Write on a transactional id to use it, Describe to find or describe it; Write on each
    topic a transaction adds, Read on the group whose offsets it adds; ClusterAction for the
    brokers' verify-only AddPartitionsToTxn."""
    denied, hidden, allowed = topic_name("txn-denied"), topic_name("txn-hidden"), "txn-ok"
    topic, closed, group = topic_name("txn"), topic_name("txn-closed"), topic_name("txn-group")
    create_topic(target.bootstrap, topic)
    create_topic(target.bootstrap, closed)
    txn_id = ResourceType.TRANSACTIONAL_ID
    create_acls(
        target,
        binding(denied, AclOperation.ALL, AclPermissionType.DENY, restype=txn_id),
        binding(hidden, AclOperation.WRITE, restype=txn_id),
        binding(hidden, AclOperation.DESCRIBE, AclPermissionType.DENY, restype=txn_id),
        binding(closed, AclOperation.WRITE, AclPermissionType.DENY),
        binding(group, AclOperation.READ, AclPermissionType.DENY, restype=ResourceType.GROUP),
    )
    refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    w = Wire(target.bootstrap)
    try:
        fc = w.request(
            ApiKey.FIND_COORDINATOR,
            4,
            FindCoordinatorRequest(key_type=1, coordinator_keys=[denied]),
        )
        assert fc.coordinators[0].error_code == refused
        assert init_txn(w, denied).error_code == refused
        assert add_txn_partitions(w, denied, 0, 0, {topic: [0]}) == {(topic, 0): refused}
        assert add_txn_offsets(w, denied, 0, 0, "g").error_code == refused
        ended = w.request(
            ApiKey.END_TXN,
            3,
            EndTxnRequest(transactional_id=denied, producer_id=0, producer_epoch=0, committed=True),
        )
        assert ended.error_code == refused
        # FindCoordinator makes __transaction_state (Kafka makes it on no other request).
        wait_for(
            lambda: (
                w.request(
                    ApiKey.FIND_COORDINATOR,
                    4,
                    FindCoordinatorRequest(key_type=1, coordinator_keys=[allowed]),
                )
                .coordinators[0]
                .error_code
                == ErrorCode.NONE
            ),
            "the transaction coordinator",
        )
        # Write but no Describe: usable, but neither described nor listed.
        started = wait_for(
            lambda: (a := init_txn(w, hidden)).error_code not in (14, 15, 16) and a,
            "the coordinator of " + hidden,
        )
        assert started.error_code == ErrorCode.NONE
        (state,) = w.request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[hidden])
        ).transaction_states
        assert state.error_code == refused
        listed = w.request(
            ApiKey.LIST_TRANSACTIONS,
            0,
            ListTransactionsRequest(state_filters=[], producer_id_filters=[]),
        )
        assert hidden not in {t.transactional_id for t in listed.transaction_states}
        # A topic the producer may not write: the transaction adds nothing.
        ok = wait_for(
            lambda: (a := init_txn(w, allowed)).error_code not in (14, 15, 16) and a,
            "the coordinator of " + allowed,
        )
        pid, epoch = ok.producer_id, ok.producer_epoch
        assert add_txn_partitions(w, allowed, pid, epoch, {topic: [0], closed: [0]}) == {
            (topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            (closed, 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        }
        assert add_txn_offsets(w, allowed, pid, epoch, group).error_code == (
            ErrorCode.GROUP_AUTHORIZATION_FAILED
        )
    finally:
        w.close()
    # Only brokers ask whether partitions are in a transaction (ClusterAction, allowed here
    # from 127.0.0.1 only).
    create_acls(
        target,
        binding("kafka-cluster", AclOperation.ALL, restype=ResourceType.BROKER, host="127.0.0.1"),
    )
    other = Wire(target.bootstrap, source_host=OTHER_HOST)
    try:
        verify = AddPartitionsToTxnRequest(
            transactions=[
                AddPartitionsToTxnRequest.Transaction(
                    transactional_id=allowed,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=[AddPartitionsToTxnTopic(name=topic, partitions=[0])],
                )
            ]
        )
        answer = other.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, verify)
        assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        other.close()
    delete_acls(target, every_acl_of("kafka-cluster", ResourceType.BROKER))
    for name in (denied, hidden):
        delete_acls(target, every_acl_of(name, txn_id))
    delete_acls(target, every_acl_of(closed))
    delete_acls(target, every_acl_of(group, ResourceType.GROUP))


def init_txn(w: Wire, txn: str) -> Any:
    request = InitProducerIdRequest(
        transactional_id=txn, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    return w.request(ApiKey.INIT_PRODUCER_ID, 4, request)


def add_txn_partitions(
    w: Wire, txn: str, pid: int, epoch: int, parts: dict[str, list[int]]
) -> dict[tuple[str, int], int]:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnTopic(name=name, partitions=ids) for name, ids in parts.items()
        ],
    )
    answer = w.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, request)
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def add_txn_offsets(w: Wire, txn: str, pid: int, epoch: int, group: str) -> Any:
    request = AddOffsetsToTxnRequest(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    return w.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)


def kbroker_acl(target: Target, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KBROKER, "acl", *args, "-b", target.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_kbroker_acl_cli(target: Target) -> None:
    """`kbroker acl` speaks only the Kafka protocol: the same commands against both."""
    prefix = topic_name("cli") + "-"
    done = kbroker_acl(
        target,
        "create",
        "--allow-principal",
        "User:alice",
        "--operation",
        "read",
        "--operation",
        "Describe",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
        "--deny-principal",
        "User:bob",
        "--deny-host",
        "10.0.0.9",
    )
    assert done.returncode == 0, done.stderr
    # As kafka-acls.sh: every principal, allowed or denied, for every operation.
    assert done.stdout.startswith("4 ACL(s) created.")
    listed = kbroker_acl(
        target, "list", "--topic", prefix, "--resource-pattern-type", "any", "--json"
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(
        (r["principal"], r["host"], r["operation"], r["permission"])
        for r in json.loads(listed.stdout)
    ) == [
        ("User:alice", "*", "Describe", "Allow"),
        ("User:alice", "*", "Read", "Allow"),
        ("User:bob", "10.0.0.9", "Describe", "Deny"),
        ("User:bob", "10.0.0.9", "Read", "Deny"),
    ]
    assert {r["pattern_type"] for r in json.loads(listed.stdout)} == {"PREFIXED"}
    # What the broker refuses: one line each, exit 1.
    bad_usage = kbroker_acl(target, "create", "--allow-principal", "alice", "--topic", "t")
    assert bad_usage.returncode == 2 and "Type:name" in bad_usage.stderr
    empty = kbroker_acl(target, "create", "--allow-principal", "User:x", "--topic", "")
    assert empty.returncode == 1
    assert single_error_line(empty.stderr).startswith(
        "Error: ACL refused: INVALID_REQUEST (Invalid empty resource name)"
    )
    deleted = kbroker_acl(
        target,
        "delete",
        "--force",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
        "--deny-principal",
        "User:bob",
        "--json",
    )
    assert deleted.returncode == 0, deleted.stderr
    assert [r["principal"] for r in json.loads(deleted.stdout)] == ["User:bob", "User:bob"]
    gone = kbroker_acl(
        target, "delete", "--force", "--topic", prefix, "--resource-pattern-type", "prefixed"
    )
    assert gone.returncode == 0 and gone.stdout.startswith("2 ACL(s) deleted.")
    assert json.loads(kbroker_acl(target, "list", "--topic", prefix, "--json").stdout) == []
