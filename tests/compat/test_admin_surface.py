"""The Java Admin client's whole surface, and the APIs behind its refusals, against Kafka
3.9.1 (ZooKeeper mode) and a kbroker single node.

tests/java/AdminSurface.java calls every Admin method once (topics by name and by id,
partitions, offsets, records, configs, log directories, consumer groups, elections,
reassignments, ACLs, quotas, SCRAM users, delegation tokens, features, the KRaft-only
calls, producers and transactions) and prints each call's outcome; the test expects the
outcome Kafka 3.9.1 gives, on both. Where Kafka refuses (no authorizer, delegation tokens
over PLAINTEXT, an unknown feature, KRaft-only APIs), kbroker must refuse the same way,
and the raw answers of the refusing APIs are compared field for field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from bench.systems import kafka_lib

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    AlterReplicaLogDirsRequest,
    CreateTopicsRequest,
    DescribeLogDirsRequest,
    UpdateFeaturesRequest,
)
from kbroker.protocol.messages.tokens import (
    CreateDelegationTokenRequest,
    DescribeDelegationTokenRequest,
    ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest,
)
from kbroker.tools.client import BrokerClient
from tests.cluster.kafka_zk import KAFKA_ZK_VERSION, require_kafka
from tests.compat.systems import SYSTEMS, single_node
from tests.java import run_java
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

# What Kafka 3.9.1 answers each call (the program's "call=outcome" lines).
OUTCOMES = {
    "describeCluster": "OK",
    "createTopics": "OK",
    "listTopics": "OK",
    "describeTopics": "OK",
    "describeTopicsById": "OK",
    "createPartitions": "OK",
    "listOffsets": "OK",
    "deleteRecords": "OK",
    "describeConfigs": "OK",
    "incrementalAlterConfigs": "OK",
    "alterConfigs": "OK",
    "describeLogDirs": "OK",
    "describeReplicaLogDirs": "OK",
    "alterReplicaLogDirs": "OK",
    "alterConsumerGroupOffsets": "OK",
    "listConsumerGroupOffsets": "OK",
    "listConsumerGroups": "OK",
    "describeConsumerGroups": "OK",
    # The client itself refuses to send a LeaveGroup for no member.
    "removeMembersFromConsumerGroup": "IllegalArgumentException",
    "deleteConsumerGroupOffsets": "OK",
    # The offsets were the group's only trace: deleting them removed the group.
    "deleteConsumerGroups": "GroupIdNotFoundException",
    "electLeaders": "OK",
    "alterPartitionReassignments": "OK",
    "listPartitionReassignments": "OK",
    "createAcls": "SecurityDisabledException",
    "describeAcls": "SecurityDisabledException",
    "deleteAcls": "SecurityDisabledException",
    "alterClientQuotas": "OK",
    "describeClientQuotas": "OK",
    "alterUserScramCredentials": "OK",
    "describeUserScramCredentials": "OK",
    "deleteUserScramCredentials": "OK",
    "createDelegationToken": "UnsupportedByAuthenticationException",
    "describeDelegationToken": "UnsupportedByAuthenticationException",
    "describeFeatures": "OK",
    "updateFeatures": "InvalidRequestException",
    "describeMetadataQuorum": "UnsupportedVersionException",
    "unregisterBroker": "UnsupportedVersionException",
    "listClientMetricsResources": "UnsupportedVersionException",
    "fenceProducers": "OK",
    "describeProducers": "OK",
    "describeTransactions": "OK",
    "listTransactions": "OK",
    "deleteTopics": "OK",
    "deleteTopicsById": "UnknownTopicIdException",
}
# What the successful calls returned, where that says more than "OK".
DETAILS = {
    "describeCluster": "controller_is_node:true cluster_id:true operations:7",
    "listTopics": "true",
    "describeTopics": "partitions:2",
    "describeTopicsById": "true",
    "listOffsets": "latest:5 earliest:0 max:4 at1002:2",
    "describeConfigs": "topic_has_retention:true broker_has_num_partitions:true",
    "describeLogDirs": "dirs:1 has_partition:true",
    "describeReplicaLogDirs": "true",
    "listConsumerGroupOffsets": "3",
    "listConsumerGroups": "true",
    "describeConsumerGroups": "Empty",
    "electLeaders": "ElectionNotNeededException",
    "listPartitionReassignments": "0",
    "describeClientQuotas": "{producer_byte_rate=1024.0}",
    "describeUserScramCredentials": "1",
    "describeFeatures": "0",
    "describeProducers": "1",
    "describeTransactions": "Empty",
    "listTransactions": "true",
}
MESSAGES = {
    "createAcls": "No Authorizer is configured.",
    "describeAcls": "No Authorizer is configured on the broker",
    "deleteAcls": "No Authorizer is configured.",
    "updateFeatures": "Could not apply finalized feature update because the provided feature "
    "is not supported.",
}


@pytest.fixture(scope="module", params=SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"surface-{request.param}")
    with single_node(request.param, zookeeper, root) as address:
        yield address


def test_every_admin_call(bootstrap: str, request: pytest.FixtureRequest) -> None:
    require_kafka()
    out = run_java(
        "AdminSurface", [kafka_lib(KAFKA_ZK_VERSION)], bootstrap, uuid.uuid4().hex[:6], timeout=180
    )
    assert out.get("done") == "true", out
    outcomes = {k: v for k, v in out.items() if "." not in k and k != "done"}
    assert outcomes == OUTCOMES
    # kbroker finalizes group.version (the KIP-848 consumer protocol it serves); Kafka 3.9
    # in ZooKeeper mode finalizes no feature.
    details = dict(DETAILS)
    if request.node.callspec.params["bootstrap"] == "kbroker":
        details["describeFeatures"] = "1"
    assert {k: out.get(f"{k}.detail") for k in DETAILS} == details
    assert {k: out.get(f"{k}.message") for k in MESSAGES} == MESSAGES


def _ask(bootstrap: str, key: int, version: int, body: Any) -> Any:
    with BrokerClient(bootstrap, timeout=30) as client:
        return client.request(key, version, body)


def test_delegation_tokens_over_plaintext(bootstrap: str) -> None:
    """Every version of the four token APIs: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, no token."""
    owner = CreateDelegationTokenRequest(
        owner_principal_type="User", owner_principal_name="alice", renewers=[], max_lifetime_ms=-1
    )
    asked = [
        *[(ApiKey.CREATE_DELEGATION_TOKEN, v, owner) for v in (1, 2, 3)],
        *[
            (
                ApiKey.RENEW_DELEGATION_TOKEN,
                v,
                RenewDelegationTokenRequest(hmac=b"x" * 8, renew_period_ms=1),
            )
            for v in (1, 2)
        ],
        *[
            (
                ApiKey.EXPIRE_DELEGATION_TOKEN,
                v,
                ExpireDelegationTokenRequest(hmac=b"x" * 8, expiry_time_period_ms=1),
            )
            for v in (1, 2)
        ],
        *[
            (ApiKey.DESCRIBE_DELEGATION_TOKEN, v, DescribeDelegationTokenRequest(owners=None))
            for v in (1, 2, 3)
        ],
    ]
    answers = [(key, v, _ask(bootstrap, key, v, body)) for key, v, body in asked]
    for key, v, resp in answers:
        assert resp.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, (key, v)
    created = [resp for key, _, resp in answers if key == ApiKey.CREATE_DELEGATION_TOKEN]
    assert [
        (
            r.principal_type,
            r.principal_name,
            r.token_requester_principal_type,
            r.token_requester_principal_name,
            r.issue_timestamp_ms,
            r.expiry_timestamp_ms,
            r.max_timestamp_ms,
            r.token_id,
            bytes(r.hmac),
        )
        for r in created
    ] == [
        ("User", "ANONYMOUS", "", "", -1, -1, -1, "", b""),
        ("User", "ANONYMOUS", "", "", -1, -1, -1, "", b""),
        ("User", "alice", "User", "ANONYMOUS", -1, -1, -1, "", b""),
    ]
    for key, _, resp in answers:
        if key in (ApiKey.RENEW_DELEGATION_TOKEN, ApiKey.EXPIRE_DELEGATION_TOKEN):
            assert resp.expiry_timestamp_ms == -1
        if key == ApiKey.DESCRIBE_DELEGATION_TOKEN:
            assert resp.tokens == []


def test_update_features(bootstrap: str) -> None:
    """Every update refused, each for its reason (Kafka lists the results in its hash map's
    order: compared by feature)."""
    Update = UpdateFeaturesRequest.FeatureUpdate
    cases = [
        Update(feature="no.such", max_version_level=1, upgrade_type=1),
        Update(feature="", max_version_level=1, upgrade_type=1),
        Update(feature="zero", max_version_level=0, upgrade_type=1),
        Update(feature="delete", max_version_level=0, upgrade_type=2),
        Update(feature="unsafe", max_version_level=2, upgrade_type=3),
        Update(feature="bad", max_version_level=2, upgrade_type=7),
    ]
    not_supported = (
        "Could not apply finalized feature update because the provided feature is not supported."
    )
    zero = (
        "Can not provide versionLevel: 0 less than 1 without setting the SAFE downgradeType "
        "in the request."
    )
    expected = {
        "no.such": not_supported,
        "": "Feature name can not be empty.",
        "zero": zero,
        "unsafe": not_supported,
    }
    for version, more in (
        # v0 has allow_downgrade (false here) instead of an upgrade type.
        (0, {"delete": zero, "bad": not_supported}),
        (
            1,
            {
                "delete": "Can not delete non-existing finalized feature.",
                "bad": "Received unknown upgrade type.",
            },
        ),
    ):
        resp = _ask(
            bootstrap,
            ApiKey.UPDATE_FEATURES,
            version,
            UpdateFeaturesRequest(timeout_ms=10000, feature_updates=cases, validate_only=False),
        )
        assert (resp.error_code, resp.error_message) == (ErrorCode.NONE, None)
        assert {r.error_code for r in resp.results} == {ErrorCode.INVALID_REQUEST}
        assert {r.feature: r.error_message for r in resp.results} == expected | more, version


def test_alter_replica_log_dirs(bootstrap: str) -> None:
    topic = f"dirs-{uuid.uuid4().hex[:6]}"
    created = _ask(
        bootstrap,
        ApiKey.CREATE_TOPICS,
        7,
        CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.Topic(
                    name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[]
                )
            ],
            timeout_ms=20000,
        ),
    )
    assert created.topics[0].error_code == ErrorCode.NONE
    (result,) = _ask(
        bootstrap, ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None)
    ).results
    Dir, Topic = AlterReplicaLogDirsRequest.Dir, AlterReplicaLogDirsRequest.Dir.Topic
    long_name = "l" * 220
    request = AlterReplicaLogDirsRequest(
        dirs=[
            Dir(
                path=result.log_dir,
                topics=[
                    Topic(name=topic, partitions=[0, 5]),
                    Topic(name=long_name, partitions=[0]),
                ],
            ),
            Dir(path="/no/such/dir", topics=[Topic(name=f"{topic}-x", partitions=[0])]),
        ]
    )
    for version in (1, 2):
        resp = _ask(bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, version, request)
        # Kafka lists them in its hash map's order.
        assert {
            (r.topic_name, p.partition_index, p.error_code)
            for r in resp.results
            for p in r.partitions
        } == {
            (topic, 0, ErrorCode.NONE),
            (topic, 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (long_name, 0, ErrorCode.INVALID_TOPIC_EXCEPTION),
            (f"{topic}-x", 0, ErrorCode.LOG_DIR_NOT_FOUND),
        }, version
