"""The API table: the single list of APIs kbroker declares, with their versions.

`APIS` is what ApiVersions advertises (intersected with the keys the broker
actually handles, see `advertised_versions`); codecs for every request and
response are derived from the declarations it points to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .codec import Codec
from .messages import acls, admin, core, group, inter_broker, quotas, sasl, tokens, txn


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74


@dataclass(frozen=True)
class ApiSpec:
    """One API: its key, supported versions, first flexible version and schemas."""

    key: ApiKey
    min_version: int
    max_version: int
    flexible_from: int | None  # None: never flexible
    request: Any  # generated Message class
    response: Any
    _codecs: dict[tuple[bool, int], Codec] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return str(self.request.__name__).removesuffix("Request")

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        # ControlledShutdown v0 predates client ids: its header is v0.
        if self.key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
            return 0
        return 2 if self.flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 at every version so that a client
        # can parse the reply before it knows what the broker supports (KIP-511).
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.flexible(version) else 0

    def _codec(self, is_request: bool, version: int) -> Codec:
        c = self._codecs.get((is_request, version))
        if c is None:
            if not self.supports(version):
                raise ValueError(f"{self.name} v{version} is not declared")
            c = Codec(
                self.request if is_request else self.response, version, self.flexible(version)
            )
            self._codecs[(is_request, version)] = c
        return c

    def request_codec(self, version: int) -> Codec:
        return self._codec(True, version)

    def response_codec(self, version: int) -> Codec:
        return self._codec(False, version)


def _api(key: ApiKey, versions: str, flex: int | None, req: Any, resp: Any) -> ApiSpec:
    lo, hi = (int(v) for v in versions.split("-")) if "-" in versions else (int(versions),) * 2
    return ApiSpec(key, lo, hi, flex, req, resp)


K = ApiKey
# The client APIs' ranges match one consistent set of Apache Kafka releases
# (3.8/3.9-era maxima with the 4.0 minima of KIP-896).
# Fetch goes to v17 because a Kafka 3.9 follower sends exactly that version.
# The inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
# ControlledShutdown, AlterPartition, AllocateProducerIds) have the full ranges a Kafka 3.9.1
# ZooKeeper-mode broker advertises (tests/cluster/test_inter_broker_wire.py).
IB = inter_broker
APIS: tuple[ApiSpec, ...] = (
    _api(K.PRODUCE, "0-11", 9, core.ProduceRequest, core.ProduceResponse),
    _api(K.FETCH, "4-17", 12, core.FetchRequest, core.FetchResponse),
    _api(K.LIST_OFFSETS, "1-8", 6, core.ListOffsetsRequest, core.ListOffsetsResponse),
    _api(K.METADATA, "0-12", 9, core.MetadataRequest, core.MetadataResponse),
    _api(K.LEADER_AND_ISR, "0-7", 4, IB.LeaderAndIsrRequest, IB.LeaderAndIsrResponse),
    _api(K.STOP_REPLICA, "0-4", 2, IB.StopReplicaRequest, IB.StopReplicaResponse),
    _api(K.UPDATE_METADATA, "0-8", 6, IB.UpdateMetadataRequest, IB.UpdateMetadataResponse),
    _api(
        K.CONTROLLED_SHUTDOWN,
        "0-3",
        3,
        IB.ControlledShutdownRequest,
        IB.ControlledShutdownResponse,
    ),
    _api(K.OFFSET_COMMIT, "2-9", 8, group.OffsetCommitRequest, group.OffsetCommitResponse),
    _api(K.OFFSET_FETCH, "1-9", 6, group.OffsetFetchRequest, group.OffsetFetchResponse),
    _api(K.FIND_COORDINATOR, "0-4", 3, group.FindCoordinatorRequest, group.FindCoordinatorResponse),
    _api(K.JOIN_GROUP, "0-9", 6, group.JoinGroupRequest, group.JoinGroupResponse),
    _api(K.HEARTBEAT, "0-4", 4, group.HeartbeatRequest, group.HeartbeatResponse),
    _api(K.LEAVE_GROUP, "0-5", 4, group.LeaveGroupRequest, group.LeaveGroupResponse),
    _api(K.SYNC_GROUP, "0-5", 4, group.SyncGroupRequest, group.SyncGroupResponse),
    _api(K.DESCRIBE_GROUPS, "0-6", 5, group.DescribeGroupsRequest, group.DescribeGroupsResponse),
    _api(K.LIST_GROUPS, "0-5", 3, group.ListGroupsRequest, group.ListGroupsResponse),
    _api(K.SASL_HANDSHAKE, "0-1", None, sasl.SaslHandshakeRequest, sasl.SaslHandshakeResponse),
    _api(K.API_VERSIONS, "0-4", 3, core.ApiVersionsRequest, core.ApiVersionsResponse),
    _api(K.CREATE_TOPICS, "2-7", 5, admin.CreateTopicsRequest, admin.CreateTopicsResponse),
    _api(K.DELETE_TOPICS, "1-6", 4, admin.DeleteTopicsRequest, admin.DeleteTopicsResponse),
    _api(K.DELETE_RECORDS, "0-2", 2, admin.DeleteRecordsRequest, admin.DeleteRecordsResponse),
    _api(K.INIT_PRODUCER_ID, "0-5", 2, core.InitProducerIdRequest, core.InitProducerIdResponse),
    _api(
        K.OFFSET_FOR_LEADER_EPOCH,
        "2-4",
        4,
        core.OffsetForLeaderEpochRequest,
        core.OffsetForLeaderEpochResponse,
    ),
    _api(
        K.ADD_PARTITIONS_TO_TXN,
        "0-5",
        3,
        txn.AddPartitionsToTxnRequest,
        txn.AddPartitionsToTxnResponse,
    ),
    _api(K.ADD_OFFSETS_TO_TXN, "0-4", 3, txn.AddOffsetsToTxnRequest, txn.AddOffsetsToTxnResponse),
    _api(K.END_TXN, "0-4", 3, txn.EndTxnRequest, txn.EndTxnResponse),
    _api(K.WRITE_TXN_MARKERS, "1", 1, IB.WriteTxnMarkersRequest, IB.WriteTxnMarkersResponse),
    _api(
        K.TXN_OFFSET_COMMIT,
        "0-4",
        3,
        group.TxnOffsetCommitRequest,
        group.TxnOffsetCommitResponse,
    ),
    _api(K.DESCRIBE_ACLS, "1-3", 2, acls.DescribeAclsRequest, acls.DescribeAclsResponse),
    _api(K.CREATE_ACLS, "1-3", 2, acls.CreateAclsRequest, acls.CreateAclsResponse),
    _api(K.DELETE_ACLS, "1-3", 2, acls.DeleteAclsRequest, acls.DeleteAclsResponse),
    _api(K.DESCRIBE_CONFIGS, "1-4", 4, admin.DescribeConfigsRequest, admin.DescribeConfigsResponse),
    _api(K.ALTER_CONFIGS, "0-2", 2, admin.AlterConfigsRequest, admin.AlterConfigsResponse),
    _api(
        K.ALTER_REPLICA_LOG_DIRS,
        "1-2",
        2,
        admin.AlterReplicaLogDirsRequest,
        admin.AlterReplicaLogDirsResponse,
    ),
    _api(
        K.DESCRIBE_LOG_DIRS, "1-4", 2, admin.DescribeLogDirsRequest, admin.DescribeLogDirsResponse
    ),
    _api(
        K.SASL_AUTHENTICATE, "0-2", 2, sasl.SaslAuthenticateRequest, sasl.SaslAuthenticateResponse
    ),
    _api(
        K.CREATE_PARTITIONS, "0-3", 2, admin.CreatePartitionsRequest, admin.CreatePartitionsResponse
    ),
    _api(
        K.CREATE_DELEGATION_TOKEN,
        "1-3",
        2,
        tokens.CreateDelegationTokenRequest,
        tokens.CreateDelegationTokenResponse,
    ),
    _api(
        K.RENEW_DELEGATION_TOKEN,
        "1-2",
        2,
        tokens.RenewDelegationTokenRequest,
        tokens.RenewDelegationTokenResponse,
    ),
    _api(
        K.EXPIRE_DELEGATION_TOKEN,
        "1-2",
        2,
        tokens.ExpireDelegationTokenRequest,
        tokens.ExpireDelegationTokenResponse,
    ),
    _api(
        K.DESCRIBE_DELEGATION_TOKEN,
        "1-3",
        2,
        tokens.DescribeDelegationTokenRequest,
        tokens.DescribeDelegationTokenResponse,
    ),
    _api(K.DELETE_GROUPS, "0-2", 2, group.DeleteGroupsRequest, group.DeleteGroupsResponse),
    _api(K.ELECT_LEADERS, "0-2", 2, admin.ElectLeadersRequest, admin.ElectLeadersResponse),
    _api(
        K.INCREMENTAL_ALTER_CONFIGS,
        "0-1",
        1,
        admin.IncrementalAlterConfigsRequest,
        admin.IncrementalAlterConfigsResponse,
    ),
    _api(
        K.ALTER_PARTITION_REASSIGNMENTS,
        "0",
        0,
        admin.AlterPartitionReassignmentsRequest,
        admin.AlterPartitionReassignmentsResponse,
    ),
    _api(
        K.LIST_PARTITION_REASSIGNMENTS,
        "0",
        0,
        admin.ListPartitionReassignmentsRequest,
        admin.ListPartitionReassignmentsResponse,
    ),
    _api(K.OFFSET_DELETE, "0", None, group.OffsetDeleteRequest, group.OffsetDeleteResponse),
    _api(
        K.DESCRIBE_CLIENT_QUOTAS,
        "0-1",
        1,
        quotas.DescribeClientQuotasRequest,
        quotas.DescribeClientQuotasResponse,
    ),
    _api(
        K.ALTER_CLIENT_QUOTAS,
        "0-1",
        1,
        quotas.AlterClientQuotasRequest,
        quotas.AlterClientQuotasResponse,
    ),
    _api(
        K.DESCRIBE_USER_SCRAM_CREDENTIALS,
        "0",
        0,
        quotas.DescribeUserScramCredentialsRequest,
        quotas.DescribeUserScramCredentialsResponse,
    ),
    _api(
        K.ALTER_USER_SCRAM_CREDENTIALS,
        "0",
        0,
        quotas.AlterUserScramCredentialsRequest,
        quotas.AlterUserScramCredentialsResponse,
    ),
    _api(K.ALTER_PARTITION, "0-3", 0, IB.AlterPartitionRequest, IB.AlterPartitionResponse),
    _api(K.UPDATE_FEATURES, "0-1", 0, admin.UpdateFeaturesRequest, admin.UpdateFeaturesResponse),
    _api(K.DESCRIBE_CLUSTER, "0-1", 0, admin.DescribeClusterRequest, admin.DescribeClusterResponse),
    _api(
        K.DESCRIBE_PRODUCERS,
        "0",
        0,
        admin.DescribeProducersRequest,
        admin.DescribeProducersResponse,
    ),
    _api(
        K.DESCRIBE_TRANSACTIONS,
        "0",
        0,
        txn.DescribeTransactionsRequest,
        txn.DescribeTransactionsResponse,
    ),
    _api(K.LIST_TRANSACTIONS, "0-1", 0, txn.ListTransactionsRequest, txn.ListTransactionsResponse),
    _api(
        K.ALLOCATE_PRODUCER_IDS,
        "0",
        0,
        IB.AllocateProducerIdsRequest,
        IB.AllocateProducerIdsResponse,
    ),
    _api(
        K.CONSUMER_GROUP_HEARTBEAT,
        "0-1",
        0,
        group.ConsumerGroupHeartbeatRequest,
        group.ConsumerGroupHeartbeatResponse,
    ),
    _api(
        K.CONSUMER_GROUP_DESCRIBE,
        "0-1",
        0,
        group.ConsumerGroupDescribeRequest,
        group.ConsumerGroupDescribeResponse,
    ),
    # Kafka 4.1's kafka-configs asks it before describing a group's configs. Version 0 is
    # ListClientMetricsResources, which a Kafka 3.9 ZooKeeper-mode broker does not have.
    _api(
        K.LIST_CONFIG_RESOURCES,
        "1",
        0,
        admin.ListConfigResourcesRequest,
        admin.ListConfigResourcesResponse,
    ),
)

APIS_BY_KEY: dict[int, ApiSpec] = {spec.key: spec for spec in APIS}


def api(key: int) -> ApiSpec:
    """The spec for an api key (KeyError if not declared)."""
    return APIS_BY_KEY[key]


def advertised_versions(handled_keys: Iterable[int]) -> list[tuple[int, int, int]]:
    """(api_key, min, max) for every declared API the broker handles, by key.

    APIs that are declared but have no handler (declared only so that error
    replies can be encoded) are simply left out of `handled_keys`.
    """
    handled = set(handled_keys)
    return [
        (int(s.key), s.min_version, s.max_version)
        for s in sorted(APIS, key=lambda s: s.key)
        if s.key in handled
    ]


def api_versions_response(
    handled_keys: Iterable[int], error_code: int = 0, throttle_time_ms: int = 0
) -> Any:
    """The ApiVersions response body advertising APIS ∩ handled_keys."""
    resp = core.ApiVersionsResponse
    return resp(
        error_code=error_code,
        api_keys=[resp.ApiVersion(k, lo, hi) for k, lo, hi in advertised_versions(handled_keys)],
        throttle_time_ms=throttle_time_ms,
    )
