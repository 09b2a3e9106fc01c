"""Declarations of the data-path and bootstrap APIs.

ApiVersions, Metadata, Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and
InitProducerId. Field names follow the protocol's own field names in
snake_case; nested classes are reachable from their parent
(``FetchResponse.Topic.Partition``).
"""

from __future__ import annotations

from ..schema import BOOL, INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array, F, message

INT32_MIN = -(2**31)

# Shared nested structs ------------------------------------------------------

LeaderIdAndEpoch = message(
    "LeaderIdAndEpoch",
    F("leader_id", INT32, default=-1),
    F("leader_epoch", INT32, default=-1),
)

NodeEndpoint = message(
    "NodeEndpoint",
    F("node_id", INT32),
    F("host", STRING),
    F("port", INT32),
    F("rack", STRING, nullable="0+", default=None),
)

# ApiVersions (18) -------------------------------------------------------------

ApiVersionsRequest = message(
    "ApiVersionsRequest",
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
)

ApiVersionsResponse = message(
    "ApiVersionsResponse",
    F("error_code", INT16),
    F(
        "api_keys",
        Array(
            message(
                "ApiVersion",
                F("api_key", INT16),
                F("min_version", INT16),
                F("max_version", INT16),
            )
        ),
    ),
    F("throttle_time_ms", INT32, "1+"),
    F(
        "supported_features",
        Array(
            message(
                "SupportedFeature",
                F("name", STRING),
                F("min_version", INT16),
                F("max_version", INT16),
            )
        ),
        "3+",
        tag=0,
    ),
    F("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
    F(
        "finalized_features",
        Array(
            message(
                "FinalizedFeature",
                F("name", STRING),
                F("max_version_level", INT16),
                F("min_version_level", INT16),
            )
        ),
        "3+",
        tag=2,
    ),
    F("zk_migration_ready", BOOL, "3+", tag=3),
)

# Metadata (3) -------------------------------------------------------------------

MetadataRequest = message(
    "MetadataRequest",
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic_id", UUID, "10+"),
                F("name", STRING, nullable="10+"),
            )
        ),
        nullable="1+",
    ),
    F("allow_auto_topic_creation", BOOL, "4+", default=True),
    F("include_cluster_authorized_operations", BOOL, "8-10"),
    F("include_topic_authorized_operations", BOOL, "8+"),
)

MetadataResponse = message(
    "MetadataResponse",
    F("throttle_time_ms", INT32, "3+"),
    F(
        "brokers",
        Array(
            message(
                "Broker",
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, "1+", nullable="1+", default=None),
            )
        ),
    ),
    F("cluster_id", STRING, "2+", nullable="2+", default=None),
    F("controller_id", INT32, "1+", default=-1),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("error_code", INT16),
                F("name", STRING, nullable="12+"),
                F("topic_id", UUID, "10+"),
                F("is_internal", BOOL, "1+"),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("error_code", INT16),
                            F("partition_index", INT32),
                            F("leader_id", INT32),
                            F("leader_epoch", INT32, "7+", default=-1),
                            F("replica_nodes", Array(INT32)),
                            F("isr_nodes", Array(INT32)),
                            F("offline_replicas", Array(INT32), "5+"),
                        )
                    ),
                ),
                F("topic_authorized_operations", INT32, "8+", default=INT32_MIN),
            )
        ),
    ),
    F("cluster_authorized_operations", INT32, "8-10", default=INT32_MIN),
)

# Produce (0) ------------------------------------------------------------------

ProduceRequest = message(
    "ProduceRequest",
    F("transactional_id", STRING, "3+", nullable="3+", default=None),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F(
        "topic_data",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partition_data",
                    Array(
                        message(
                            "Partition",
                            F("index", INT32),
                            F("records", RECORDS, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
)

ProduceResponse = message(
    "ProduceResponse",
    F(
        "responses",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F(
                    "partition_responses",
                    Array(
                        message(
                            "Partition",
                            F("index", INT32),
                            F("error_code", INT16),
                            F("base_offset", INT64),
                            F("log_append_time_ms", INT64, "2+", default=-1),
                            F("log_start_offset", INT64, "5+", default=-1),
                            F(
                                "record_errors",
                                Array(
                                    message(
                                        "RecordError",
                                        F("batch_index", INT32),
                                        F(
                                            "batch_index_error_message",
                                            STRING,
                                            nullable="0+",
                                            default=None,
                                        ),
                                    )
                                ),
                                "8+",
                            ),
                            F("error_message", STRING, "8+", nullable="8+", default=None),
                            F("current_leader", LeaderIdAndEpoch, "10+", tag=0, default=None),
                        )
                    ),
                ),
            )
        ),
    ),
    F("throttle_time_ms", INT32, "1+"),
    F("node_endpoints", Array(NodeEndpoint), "10+", tag=0),
)

# Fetch (1) --------------------------------------------------------------------

FetchRequest = message(
    "FetchRequest",
    F("cluster_id", STRING, "12+", nullable="12+", tag=0, default=None),
    F("replica_id", INT32, "0-14", default=-1),
    F(
        "replica_state",
        message(
            "ReplicaState",
            F("replica_id", INT32, default=-1),
            F("replica_epoch", INT64, default=-1),
        ),
        "15+",
        tag=1,
        default=None,
    ),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+"),
    F("session_id", INT32, "7+"),
    F("session_epoch", INT32, "7+", default=-1),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition", INT32),
                            F("current_leader_epoch", INT32, "9+", default=-1),
                            F("fetch_offset", INT64),
                            F("last_fetched_epoch", INT32, "12+", default=-1),
                            F("log_start_offset", INT64, "5+", default=-1),
                            F("partition_max_bytes", INT32),
                            # A follower's log directory (KIP-853); zero when not sent.
                            F("replica_directory_id", UUID, "17+", tag=0),
                        )
                    ),
                ),
            )
        ),
    ),
    F(
        "forgotten_topics_data",
        Array(
            message(
                "ForgottenTopic",
                F("topic", STRING, "7-12"),
                F("topic_id", UUID, "13+"),
                F("partitions", Array(INT32)),
            )
        ),
        "7+",
    ),
    F("rack_id", STRING, "11+"),
)

FetchResponse = message(
    "FetchResponse",
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+"),
    F(
        "responses",
        Array(
            message(
                "Topic",
                F("topic", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("error_code", INT16),
                            F("high_watermark", INT64),
                            F("last_stable_offset", INT64, "4+", default=-1),
                            F("log_start_offset", INT64, "5+", default=-1),
                            F(
                                "diverging_epoch",
                                message(
                                    "EpochEndOffset",
                                    F("epoch", INT32, default=-1),
                                    F("end_offset", INT64, default=-1),
                                ),
                                "12+",
                                tag=0,
                                default=None,
                            ),
                            F("current_leader", LeaderIdAndEpoch, "12+", tag=1, default=None),
                            F(
                                "snapshot_id",
                                message(
                                    "SnapshotId",
                                    F("end_offset", INT64, default=-1),
                                    F("epoch", INT32, default=-1),
                                ),
                                "12+",
                                tag=2,
                                default=None,
                            ),
                            F(
                                "aborted_transactions",
                                Array(
                                    message(
                                        "AbortedTransaction",
                                        F("producer_id", INT64),
                                        F("first_offset", INT64),
                                    )
                                ),
                                "4+",
                                nullable="4+",
                            ),
                            F("preferred_read_replica", INT32, "11+", default=-1),
                            F("records", RECORDS, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
    F("node_endpoints", Array(NodeEndpoint), "16+", tag=0),
)

# ListOffsets (2) ----------------------------------------------------------------

ListOffsetsRequest = message(
    "ListOffsetsRequest",
    F("replica_id", INT32),
    F("isolation_level", INT8, "2+"),
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
                            F("current_leader_epoch", INT32, "4+", default=-1),
                            F("timestamp", INT64),
                        )
                    ),
                ),
            )
        ),
    ),
)

ListOffsetsResponse = message(
    "ListOffsetsResponse",
    F("throttle_time_ms", INT32, "2+"),
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
                            F("timestamp", INT64, default=-1),
                            F("offset", INT64, default=-1),
                            F("leader_epoch", INT32, "4+", default=-1),
                        )
                    ),
                ),
            )
        ),
    ),
)

# OffsetForLeaderEpoch (23) ------------------------------------------------------

OffsetForLeaderEpochRequest = message(
    "OffsetForLeaderEpochRequest",
    F("replica_id", INT32, "3+", default=-2),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition", INT32),
                            F("current_leader_epoch", INT32, default=-1),
                            F("leader_epoch", INT32),
                        )
                    ),
                ),
            )
        ),
    ),
)

OffsetForLeaderEpochResponse = message(
    "OffsetForLeaderEpochResponse",
    F("throttle_time_ms", INT32),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic", STRING),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("error_code", INT16),
                            F("partition", INT32),
                            F("leader_epoch", INT32, default=-1),
                            F("end_offset", INT64, default=-1),
                        )
                    ),
                ),
            )
        ),
    ),
)

# InitProducerId (22) ------------------------------------------------------------

InitProducerIdRequest = message(
    "InitProducerIdRequest",
    F("transactional_id", STRING, nullable="0+"),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),
    F("producer_epoch", INT16, "3+", default=-1),
)

InitProducerIdResponse = message(
    "InitProducerIdResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16),
)
