"""ACLs on one kbroker node, where it has no Kafka counterpart to compare with: they survive
a restart (kept in the metadata store), a super user may do everything whatever the ACLs
say, a node with an authorizer and no ACL refuses everything by default, one without an
authorizer answers the ACL APIs SECURITY_DISABLED, and a bad super.users stops the start
in one line. (tests/security/test_acls_vs_kafka.py runs the rest against Kafka 3.9.1 too.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.acls import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from kbroker.protocol.messages.admin import (
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    ListConfigResourcesRequest,
)
from kbroker.protocol.messages.group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from tests.helpers import (
    KBROKER,
    BrokerProcess,
    Wire,
    metadata,
    produce_req,
    single_error_line,
    wire_create_topic,
)

pytestmark = pytest.mark.timeout(120)

AUTHORIZER = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
EVERYTHING = DescribeAclsRequest(
    resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
)


def acl(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KBROKER, "acl", *args, "-b", bootstrap], capture_output=True, text=True, timeout=60
    )


def write(w: Wire, topic: str, transactional: bool = False) -> int:
    batch = build_batch([(None, b"v", [])], transactional=transactional)
    resp = w.request(ApiKey.PRODUCE, 9, produce_req(topic, batch))
    return int(resp.responses[0].partition_responses[0].error_code)


def test_acls_survive_a_restart_and_super_users_pass_them(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra=[AUTHORIZER, "super.users=User:ANONYMOUS"])
    broker.start()
    try:
        w = Wire(broker.bootstrap)
        assert wire_create_topic(w, "kept", 1) == ErrorCode.NONE
        created = acl(
            "create",
            "--deny-principal",
            "User:ANONYMOUS",
            "--topic",
            "kept",
            bootstrap=broker.bootstrap,
        )
        assert created.returncode == 0, created.stderr
        # User:ANONYMOUS is a super user: a DENY of All does not stop it.
        assert write(w, "kept") == ErrorCode.NONE
        w.close()
        assert broker.stop() == 0
        broker.start()
        listed = acl("list", bootstrap=broker.bootstrap)
        assert listed.returncode == 0
        assert "kept" in listed.stdout and "Deny" in listed.stdout
        assert "Traceback" not in broker.output()
    finally:
        broker.kill()
    # The same data without the super user: the stored DENY applies.
    strict = BrokerProcess(tmp_path / "data", extra=[AUTHORIZER], port=broker.port)
    strict.start()
    try:
        w = Wire(strict.bootstrap)
        assert write(w, "kept") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        w.close()
    finally:
        strict.kill()


def test_no_acl_means_no_access_by_default(tmp_path: Path) -> None:
    """allow.everyone.if.no.acl.found is false: without ACLs or super users, nothing."""
    broker = BrokerProcess(tmp_path / "data", extra=[AUTHORIZER])
    broker.start()
    try:
        w = Wire(broker.bootstrap)
        assert wire_create_topic(w, "t", 1) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert write(w, "t") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        # A transactional batch needs Write on its transactional id first.
        assert write(w, "t", transactional=True) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # Not even whether it exists is told.
        assert [(t.name, t.error_code) for t in metadata(w, ["t"]).topics] == [
            ("t", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ]
        assert w.request(ApiKey.DESCRIBE_ACLS, 3, EVERYTHING).error_code == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        creation = CreateAclsRequest.Creation(
            resource_type=2,
            resource_name="t",
            resource_pattern_type=3,
            principal="User:ANONYMOUS",
            host="*",
            operation=2,
            permission_type=3,
        )
        (result,) = w.request(
            ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[creation])
        ).results
        assert result.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # A group's configs: DescribeConfigs, then AlterConfigs on the group (Kafka 4.x);
        # which resources have configs: DescribeConfigs on the cluster.
        describe = DescribeConfigsRequest
        (described,) = w.request(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            describe(resources=[describe.Resource(32, "g", None)], include_synonyms=False),
        ).results
        assert (described.error_code, described.error_message, described.configs) == (
            ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "Group authorization failed.",
            [],
        )
        alter = IncrementalAlterConfigsRequest
        op = alter.Resource.Config(
            name="consumer.session.timeout.ms", config_operation=0, value="50000"
        )
        (altered,) = w.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            alter(resources=[alter.Resource(32, "g", [op])], validate_only=False),
        ).responses
        assert altered.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        listed = w.request(
            ApiKey.LIST_CONFIG_RESOURCES, 1, ListConfigResourcesRequest(resource_types=[32])
        )
        assert (listed.error_code, listed.config_resources) == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            [],
        )
        # The consumer group protocol: Read on the group to heartbeat, Describe to describe.
        beat = w.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            ConsumerGroupHeartbeatRequest(
                group_id="g",
                member_id="m-1",
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=["t"],
                topic_partitions=[],
            ),
        )
        assert (beat.error_code, beat.assignment) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
        (group,) = w.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            1,
            ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=True),
        ).groups
        assert (group.error_code, group.members) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
        w.close()
        refused = acl("list", bootstrap=broker.bootstrap)
        assert refused.returncode == 1
        assert "CLUSTER_AUTHORIZATION_FAILED" in single_error_line(refused.stderr)
    finally:
        broker.kill()


def test_without_an_authorizer_the_acl_apis_are_disabled(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    try:
        described = w.request(ApiKey.DESCRIBE_ACLS, 3, EVERYTHING)
        assert (described.error_code, described.error_message) == (
            ErrorCode.SECURITY_DISABLED,
            "No Authorizer is configured on the broker",
        )
        creation = CreateAclsRequest.Creation(
            resource_type=2,
            resource_name="t",
            resource_pattern_type=3,
            principal="User:a",
            host="*",
            operation=3,
            permission_type=3,
        )
        created = w.request(ApiKey.CREATE_ACLS, 2, CreateAclsRequest(creations=[creation] * 2))
        assert [(r.error_code, r.error_message) for r in created.results] == [
            (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
        ] * 2
        f = DeleteAclsRequest.Filter(
            resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
        )
        deleted = w.request(ApiKey.DELETE_ACLS, 1, DeleteAclsRequest(filters=[f]))
        assert [
            (r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results
        ] == [(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.", [])]
    finally:
        w.close()
    listed = acl("list", bootstrap=broker.bootstrap)
    assert listed.returncode == 1
    assert "SECURITY_DISABLED" in single_error_line(listed.stderr)


def test_a_bad_super_users_setting_stops_the_start_in_one_line(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra=[AUTHORIZER, "super.users=User:a;alice"])
    with pytest.raises(RuntimeError, match="exited with 1"):
        broker.start(timeout=20)
    errors = [line for line in broker.output().splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "super.users" in errors[0] and "'alice'" in errors[0]
    assert "Traceback" not in broker.output()
