"""Declarations of the consumer-group APIs.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups, DeleteGroups, OffsetCommit, OffsetFetch (incl. the v8+ form with
several groups), OffsetDelete and TxnOffsetCommit (a transactional producer's
offset commit, served by the group coordinator), and the consumer protocol's
(KIP-848) ConsumerGroupHeartbeat and ConsumerGroupDescribe.
"""

from __future__ import annotations

from ..schema import BOOL, BYTES, INT8, INT16, INT32, INT64, STRING, UUID, Array, F, message

INT32_MIN = -(2**31)

# FindCoordinator (10) -------------------------------------------------------

FindCoordinatorRequest = message(
    "FindCoordinatorRequest",
    F("key", STRING, "0-3"),
    F("key_type", INT8, "1+"),
    F("coordinator_keys", Array(STRING), "4+"),
)

FindCoordinatorResponse = message(
    "FindCoordinatorResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "0-3"),
    F("error_message", STRING, "1-3", nullable="1-3", default=None),
    F("node_id", INT32, "0-3"),
    F("host", STRING, "0-3"),
    F("port", INT32, "0-3"),
    F(
        "coordinators",
        Array(
            message(
                "Coordinator",
                F("key", STRING),
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            )
        ),
        "4+",
    ),
)

# JoinGroup (11) -----------------------------------------------------------------

JoinGroupRequest = message(
    "JoinGroupRequest",
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+", default=None),
    F("protocol_type", STRING),
    F(
        "protocols",
        Array(
            message(
                "Protocol",
                F("name", STRING),
                F("metadata", BYTES),
            )
        ),
    ),
    F("reason", STRING, "8+", nullable="8+", default=None),
)

JoinGroupResponse = message(
    "JoinGroupResponse",
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_type", STRING, "7+", nullable="7+", default=None),
    F("protocol_name", STRING, nullable="7+"),
    F("leader", STRING),
    F("skip_assignment", BOOL, "9+"),
    F("member_id", STRING),
    F(
        "members",
        Array(
            message(
                "Member",
                F("member_id", STRING),
                F("group_instance_id", STRING, "5+", nullable="5+", default=None),
                F("metadata", BYTES),
            )
        ),
    ),
)

# SyncGroup (14) -----------------------------------------------------------------

SyncGroupRequest = message(
    "SyncGroupRequest",
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F("protocol_type", STRING, "5+", nullable="5+", default=None),
    F("protocol_name", STRING, "5+", nullable="5+", default=None),
    F(
        "assignments",
        Array(
            message(
                "Assignment",
                F("member_id", STRING),
                F("assignment", BYTES),
            )
        ),
    ),
)

SyncGroupResponse = message(
    "SyncGroupResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("protocol_type", STRING, "5+", nullable="5+", default=None),
    F("protocol_name", STRING, "5+", nullable="5+", default=None),
    F("assignment", BYTES),
)

# Heartbeat (12) -----------------------------------------------------------------

HeartbeatRequest = message(
    "HeartbeatRequest",
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
)

HeartbeatResponse = message(
    "HeartbeatResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
)

# LeaveGroup (13) ----------------------------------------------------------------

LeaveGroupRequest = message(
    "LeaveGroupRequest",
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F(
        "members",
        Array(
            message(
                "Member",
                F("member_id", STRING),
                F("group_instance_id", STRING, nullable="0+", default=None),
                F("reason", STRING, "5+", nullable="5+", default=None),
            )
        ),
        "3+",
    ),
)

LeaveGroupResponse = message(
    "LeaveGroupResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F(
        "members",
        Array(
            message(
                "Member",
                F("member_id", STRING),
                F("group_instance_id", STRING, nullable="0+"),
                F("error_code", INT16),
            )
        ),
        "3+",
    ),
)

# DescribeGroups (15) --------------------------------------------------------------

DescribeGroupsRequest = message(
    "DescribeGroupsRequest",
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOL, "3+"),
)

DescribeGroupsResponse = message(
    "DescribeGroupsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F(
        "groups",
        Array(
            message(
                "Group",
                F("error_code", INT16),
                F("error_message", STRING, "6+", nullable="6+", default=None),
                F("group_id", STRING),
                F("group_state", STRING),
                F("protocol_type", STRING),
                F("protocol_data", STRING),
                F(
                    "members",
                    Array(
                        message(
                            "Member",
                            F("member_id", STRING),
                            F("group_instance_id", STRING, "4+", nullable="4+", default=None),
                            F("client_id", STRING),
                            F("client_host", STRING),
                            F("member_metadata", BYTES),
                            F("member_assignment", BYTES),
                        )
                    ),
                ),
                F("authorized_operations", INT32, "3+", default=INT32_MIN),
            )
        ),
    ),
)

# ListGroups (16) ----------------------------------------------------------------

ListGroupsRequest = message(
    "ListGroupsRequest",
    F("states_filter", Array(STRING), "4+"),
    F("types_filter", Array(STRING), "5+"),
)

ListGroupsResponse = message(
    "ListGroupsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F(
        "groups",
        Array(
            message(
                "Group",
                F("group_id", STRING),
                F("protocol_type", STRING),
                F("group_state", STRING, "4+"),
                F("group_type", STRING, "5+"),
            )
        ),
    ),
)

# DeleteGroups (42) ----------------------------------------------------------------

DeleteGroupsRequest = message(
    "DeleteGroupsRequest",
    F("groups_names", Array(STRING)),
)

DeleteGroupsResponse = message(
    "DeleteGroupsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        Array(
            message(
                "Result",
                F("group_id", STRING),
                F("error_code", INT16),
            )
        ),
    ),
)

# OffsetCommit (8) -----------------------------------------------------------------

OffsetCommitRequest = message(
    "OffsetCommitRequest",
    F("group_id", STRING),
    F("generation_id_or_member_epoch", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", STRING, "7+", nullable="7+", default=None),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("committed_offset", INT64),
                            F("committed_leader_epoch", INT32, "6+", default=-1),
                            F("committed_metadata", STRING, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
)

OffsetCommitResponse = message(
    "OffsetCommitResponse",
    F("throttle_time_ms", INT32, "3+"),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("error_code", INT16),
                        )
                    ),
                ),
            )
        ),
    ),
)

# OffsetFetch (9) ------------------------------------------------------------------
# v0-7 ask for one group (top-level group_id/topics); v8+ for several (groups).

_OffsetFetchTopic = message(
    "Topic",
    F("name", STRING),
    F("partition_indexes", Array(INT32)),
)

OffsetFetchRequest = message(
    "OffsetFetchRequest",
    F("group_id", STRING, "0-7"),
    F("topics", Array(_OffsetFetchTopic), "0-7", nullable="2-7"),
    F(
        "groups",
        Array(
            message(
                "Group",
                F("group_id", STRING),
                F("member_id", STRING, "9+", nullable="9+", default=None),
                F("member_epoch", INT32, "9+", default=-1),
                F("topics", Array(_OffsetFetchTopic), nullable="0+"),
            )
        ),
        "8+",
    ),
    F("require_stable", BOOL, "7+"),
)

_OffsetFetchResponseTopic = message(
    "Topic",
    F("name", STRING),
    F(
        "partitions",
        Array(
            message(
                "Partition",
                F("partition_index", INT32),
                F("committed_offset", INT64),
                F("committed_leader_epoch", INT32, "5+", default=-1),
                F("metadata", STRING, nullable="0+"),
                F("error_code", INT16),
            )
        ),
    ),
)

OffsetFetchResponse = message(
    "OffsetFetchResponse",
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(_OffsetFetchResponseTopic), "0-7"),
    F("error_code", INT16, "2-7"),
    F(
        "groups",
        Array(
            message(
                "Group",
                F("group_id", STRING),
                F("topics", Array(_OffsetFetchResponseTopic)),
                F("error_code", INT16),
            )
        ),
        "8+",
    ),
)

# OffsetDelete (47) ----------------------------------------------------------------

OffsetDeleteRequest = message(
    "OffsetDeleteRequest",
    F("group_id", STRING),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                        )
                    ),
                ),
            )
        ),
    ),
)

OffsetDeleteResponse = message(
    "OffsetDeleteResponse",
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("error_code", INT16),
                        )
                    ),
                ),
            )
        ),
    ),
)

# TxnOffsetCommit (28) -------------------------------------------------------------
# v2 adds the leader epoch, v3 the member, instance and generation (and is flexible),
# v4 only allows the error TRANSACTION_ABORTABLE (KIP-890).

TxnOffsetCommitRequest = message(
    "TxnOffsetCommitRequest",
    F("transactional_id", STRING),
    F("group_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("generation_id", INT32, "3+", default=-1),
    F("member_id", STRING, "3+", default=""),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("committed_offset", INT64),
                            F("committed_leader_epoch", INT32, "2+", default=-1),
                            F("committed_metadata", STRING, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
)

TxnOffsetCommitResponse = message(
    "TxnOffsetCommitResponse",
    F("throttle_time_ms", INT32),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("error_code", INT16),
                        )
                    ),
                ),
            )
        ),
    ),
)

# ConsumerGroupHeartbeat (68): the consumer group protocol of KIP-848 ---------------

_HeartbeatTopicPartitions = message(
    "TopicPartitions",
    F("topic_id", UUID),
    F("partitions", Array(INT32)),
)

ConsumerGroupHeartbeatRequest = message(
    "ConsumerGroupHeartbeatRequest",
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("instance_id", STRING, nullable="0+", default=None),
    F("rack_id", STRING, nullable="0+", default=None),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
    F("subscribed_topic_regex", STRING, "1+", nullable="1+", default=None),
    F("server_assignor", STRING, nullable="0+", default=None),
    F("topic_partitions", Array(_HeartbeatTopicPartitions), nullable="0+", default=None),
)

ConsumerGroupHeartbeatResponse = message(
    "ConsumerGroupHeartbeatResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("member_id", STRING, nullable="0+", default=None),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    F(
        "assignment",
        message("Assignment", F("topic_partitions", Array(_HeartbeatTopicPartitions))),
        nullable="0+",
        default=None,
    ),
)

# ConsumerGroupDescribe (69) ----------------------------------------------------------

_DescribedAssignment = message(
    "Assignment",
    F(
        "topic_partitions",
        Array(
            message(
                "TopicPartitions",
                F("topic_id", UUID),
                F("topic_name", STRING),
                F("partitions", Array(INT32)),
            )
        ),
    ),
)

ConsumerGroupDescribeRequest = message(
    "ConsumerGroupDescribeRequest",
    F("group_ids", Array(STRING)),
    F("include_authorized_operations", BOOL),
)

ConsumerGroupDescribeResponse = message(
    "ConsumerGroupDescribeResponse",
    F("throttle_time_ms", INT32),
    F(
        "groups",
        Array(
            message(
                "DescribedGroup",
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F("group_id", STRING),
                F("group_state", STRING),
                F("group_epoch", INT32),
                F("assignment_epoch", INT32),
                F("assignor_name", STRING),
                F(
                    "members",
                    Array(
                        message(
                            "Member",
                            F("member_id", STRING),
                            F("instance_id", STRING, nullable="0+", default=None),
                            F("rack_id", STRING, nullable="0+", default=None),
                            F("member_epoch", INT32),
                            F("client_id", STRING),
                            F("client_host", STRING),
                            F("subscribed_topic_names", Array(STRING)),
                            F("subscribed_topic_regex", STRING, nullable="0+", default=None),
                            F("assignment", _DescribedAssignment),
                            F("target_assignment", _DescribedAssignment),
                            F("member_type", INT8, "1+", default=-1),
                        )
                    ),
                ),
                F("authorized_operations", INT32, default=INT32_MIN),
            )
        ),
    ),
)
