"""Declarations of the admin APIs.

CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DescribeCluster, DescribeLogDirs,
ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments,
DescribeProducers, UpdateFeatures, AlterReplicaLogDirs and ListConfigResources.
"""

from __future__ import annotations

from ..schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Array, F, message

INT32_MIN = -(2**31)

# CreateTopics (19) -------------------------------------------------------------

CreateTopicsRequest = message(
    "CreateTopicsRequest",
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F("num_partitions", INT32),
                F("replication_factor", INT16),
                F(
                    "assignments",
                    Array(
                        message(
                            "Assignment",
                            F("partition_index", INT32),
                            F("broker_ids", Array(INT32)),
                        )
                    ),
                ),
                F(
                    "configs",
                    Array(
                        message(
                            "Config",
                            F("name", STRING),
                            F("value", STRING, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOL, "1+"),
)

CreateTopicsResponse = message(
    "CreateTopicsResponse",
    F("throttle_time_ms", INT32, "2+"),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F("topic_id", UUID, "7+"),
                F("error_code", INT16),
                F("error_message", STRING, "1+", nullable="0+", default=None),
                F("topic_config_error_code", INT16, "5+", tag=0),
                F("num_partitions", INT32, "5+", default=-1),
                F("replication_factor", INT16, "5+", default=-1),
                F(
                    "configs",
                    Array(
                        message(
                            "Config",
                            F("name", STRING),
                            F("value", STRING, nullable="0+"),
                            F("read_only", BOOL),
                            F("config_source", INT8, default=-1),
                            F("is_sensitive", BOOL),
                        )
                    ),
                    "5+",
                    nullable="5+",
                ),
            )
        ),
    ),
)

# DeleteTopics (20) ---------------------------------------------------------------

DeleteTopicsRequest = message(
    "DeleteTopicsRequest",
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING, nullable="0+", default=None),
                F("topic_id", UUID),
            )
        ),
        "6+",
    ),
    F("topic_names", Array(STRING), "0-5"),
    F("timeout_ms", INT32),
)

DeleteTopicsResponse = message(
    "DeleteTopicsResponse",
    F("throttle_time_ms", INT32, "1+"),
    F(
        "responses",
        Array(
            message(
                "Result",
                F("name", STRING, nullable="6+"),
                F("topic_id", UUID, "6+"),
                F("error_code", INT16),
                F("error_message", STRING, "5+", nullable="5+", default=None),
            )
        ),
    ),
)

# CreatePartitions (37) ---------------------------------------------------------------

CreatePartitionsRequest = message(
    "CreatePartitionsRequest",
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F("count", INT32),
                F(
                    "assignments",
                    Array(
                        message(
                            "Assignment",
                            F("broker_ids", Array(INT32)),
                        )
                    ),
                    nullable="0+",
                ),
            )
        ),
    ),
    F("timeout_ms", INT32),
    F("validate_only", BOOL),
)

CreatePartitionsResponse = message(
    "CreatePartitionsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        Array(
            message(
                "Result",
                F("name", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            )
        ),
    ),
)

# DeleteRecords (21) ----------------------------------------------------------------

DeleteRecordsRequest = message(
    "DeleteRecordsRequest",
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
                            F("offset", INT64),
                        )
                    ),
                ),
            )
        ),
    ),
    F("timeout_ms", INT32),
)

DeleteRecordsResponse = message(
    "DeleteRecordsResponse",
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
                            F("low_watermark", INT64),
                            F("error_code", INT16),
                        )
                    ),
                ),
            )
        ),
    ),
)

# DescribeConfigs (32) ----------------------------------------------------------------

DescribeConfigsRequest = message(
    "DescribeConfigsRequest",
    F(
        "resources",
        Array(
            message(
                "Resource",
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("configuration_keys", Array(STRING), nullable="0+"),
            )
        ),
    ),
    F("include_synonyms", BOOL, "1+"),
    F("include_documentation", BOOL, "3+"),
)

DescribeConfigsResponse = message(
    "DescribeConfigsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        Array(
            message(
                "Result",
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    Array(
                        message(
                            "Config",
                            F("name", STRING),
                            F("value", STRING, nullable="0+"),
                            F("read_only", BOOL),
                            F("config_source", INT8, "1+", default=-1),
                            F("is_sensitive", BOOL),
                            F(
                                "synonyms",
                                Array(
                                    message(
                                        "Synonym",
                                        F("name", STRING),
                                        F("value", STRING, nullable="0+"),
                                        F("source", INT8),
                                    )
                                ),
                                "1+",
                            ),
                            F("config_type", INT8, "3+"),
                            F("documentation", STRING, "3+", nullable="0+", default=None),
                        )
                    ),
                ),
            )
        ),
    ),
)

# AlterConfigs (33) and IncrementalAlterConfigs (44) -----------------------------------

AlterConfigsRequest = message(
    "AlterConfigsRequest",
    F(
        "resources",
        Array(
            message(
                "Resource",
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    Array(
                        message(
                            "Config",
                            F("name", STRING),
                            F("value", STRING, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
    F("validate_only", BOOL),
)

_AlterConfigsResult = message(
    "Result",
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("resource_type", INT8),
    F("resource_name", STRING),
)

AlterConfigsResponse = message(
    "AlterConfigsResponse",
    F("throttle_time_ms", INT32),
    F("responses", Array(_AlterConfigsResult)),
)

IncrementalAlterConfigsRequest = message(
    "IncrementalAlterConfigsRequest",
    F(
        "resources",
        Array(
            message(
                "Resource",
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    Array(
                        message(
                            "Config",
                            F("name", STRING),
                            F("config_operation", INT8),
                            F("value", STRING, nullable="0+"),
                        )
                    ),
                ),
            )
        ),
    ),
    F("validate_only", BOOL),
)

IncrementalAlterConfigsResponse = message(
    "IncrementalAlterConfigsResponse",
    F("throttle_time_ms", INT32),
    F("responses", Array(_AlterConfigsResult)),
)

# DescribeCluster (60) ------------------------------------------------------------

DescribeClusterRequest = message(
    "DescribeClusterRequest",
    F("include_cluster_authorized_operations", BOOL),
    F("endpoint_type", INT8, "1+", default=1),
)

DescribeClusterResponse = message(
    "DescribeClusterResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("endpoint_type", INT8, "1+", default=1),
    F("cluster_id", STRING),
    F("controller_id", INT32, default=-1),
    F(
        "brokers",
        Array(
            message(
                "Broker",
                F("broker_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="0+", default=None),
            )
        ),
    ),
    F("cluster_authorized_operations", INT32, default=INT32_MIN),
)

# DescribeLogDirs (35) ------------------------------------------------------------

DescribeLogDirsRequest = message(
    "DescribeLogDirsRequest",
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic", STRING),
                F("partitions", Array(INT32)),
            )
        ),
        nullable="0+",
    ),
)

DescribeLogDirsResponse = message(
    "DescribeLogDirsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "3+"),
    F(
        "results",
        Array(
            message(
                "Result",
                F("error_code", INT16),
                F("log_dir", STRING),
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
                                        F("partition_size", INT64),
                                        F("offset_lag", INT64),
                                        F("is_future_key", BOOL),
                                    )
                                ),
                            ),
                        )
                    ),
                ),
                F("total_bytes", INT64, "4+", default=-1),
                F("usable_bytes", INT64, "4+", default=-1),
            )
        ),
    ),
)

# ElectLeaders (43) -----------------------------------------------------------------

ElectLeadersRequest = message(
    "ElectLeadersRequest",
    F("election_type", INT8, "1+"),
    F(
        "topic_partitions",
        Array(
            message(
                "TopicPartitions",
                F("topic", STRING),
                F("partitions", Array(INT32)),
            )
        ),
        nullable="0+",
    ),
    F("timeout_ms", INT32, default=60000),
)

ElectLeadersResponse = message(
    "ElectLeadersResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "1+"),
    F(
        "replica_election_results",
        Array(
            message(
                "Result",
                F("topic", STRING),
                F(
                    "partition_result",
                    Array(
                        message(
                            "PartitionResult",
                            F("partition_id", INT32),
                            F("error_code", INT16),
                            F("error_message", STRING, nullable="0+", default=None),
                        )
                    ),
                ),
            )
        ),
    ),
)

# AlterPartitionReassignments (45) ----------------------------------------------------

AlterPartitionReassignmentsRequest = message(
    "AlterPartitionReassignmentsRequest",
    F("timeout_ms", INT32, default=60000),
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
                            # null cancels the partition's reassignment
                            F("replicas", Array(INT32), nullable="0+", default=None),
                        )
                    ),
                ),
            )
        ),
    ),
)

AlterPartitionReassignmentsResponse = message(
    "AlterPartitionReassignmentsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F(
        "responses",
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
                            F("error_message", STRING, nullable="0+", default=None),
                        )
                    ),
                ),
            )
        ),
    ),
)

# ListPartitionReassignments (46) -----------------------------------------------------

ListPartitionReassignmentsRequest = message(
    "ListPartitionReassignmentsRequest",
    F("timeout_ms", INT32, default=60000),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F("partition_indexes", Array(INT32)),
            )
        ),
        nullable="0+",
        default=None,
    ),
)

ListPartitionReassignmentsResponse = message(
    "ListPartitionReassignmentsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
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
                            F("replicas", Array(INT32)),
                            F("adding_replicas", Array(INT32)),
                            F("removing_replicas", Array(INT32)),
                        )
                    ),
                ),
            )
        ),
    ),
)

# DescribeProducers (61) ------------------------------------------------------------
# The producers a partition's leader knows: what kafka-transactions.sh describe-producers
# and find-hanging read.

DescribeProducersRequest = message(
    "DescribeProducersRequest",
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("name", STRING),
                F("partition_indexes", Array(INT32)),
            )
        ),
    ),
)

DescribeProducersResponse = message(
    "DescribeProducersResponse",
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
                            F("error_message", STRING, nullable="0+", default=None),
                            F(
                                "active_producers",
                                Array(
                                    message(
                                        "Producer",
                                        F("producer_id", INT64),
                                        F("producer_epoch", INT32),
                                        F("last_sequence", INT32, default=-1),
                                        F("last_timestamp", INT64, default=-1),
                                        F("coordinator_epoch", INT32),
                                        F("current_txn_start_offset", INT64, default=-1),
                                    )
                                ),
                            ),
                        )
                    ),
                ),
            )
        ),
    ),
)

# UpdateFeatures (57) ---------------------------------------------------------------
# upgrade_type (v1+): 1 upgrade, 2 safe downgrade, 3 unsafe downgrade; v0 says
# allow_downgrade instead.

UpdateFeaturesRequest = message(
    "UpdateFeaturesRequest",
    F("timeout_ms", INT32, default=60000),
    F(
        "feature_updates",
        Array(
            message(
                "FeatureUpdate",
                F("feature", STRING),
                F("max_version_level", INT16),
                F("allow_downgrade", BOOL, "0"),
                F("upgrade_type", INT8, "1+", default=1),
            )
        ),
    ),
    F("validate_only", BOOL, "1+"),
)

UpdateFeaturesResponse = message(
    "UpdateFeaturesResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F(
        "results",
        Array(
            message(
                "Result",
                F("feature", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            )
        ),
    ),
)

# AlterReplicaLogDirs (34) -----------------------------------------------------------

AlterReplicaLogDirsRequest = message(
    "AlterReplicaLogDirsRequest",
    F(
        "dirs",
        Array(
            message(
                "Dir",
                F("path", STRING),
                F(
                    "topics",
                    Array(message("Topic", F("name", STRING), F("partitions", Array(INT32)))),
                ),
            )
        ),
    ),
)

AlterReplicaLogDirsResponse = message(
    "AlterReplicaLogDirsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        Array(
            message(
                "Result",
                F("topic_name", STRING),
                F(
                    "partitions",
                    Array(
                        message("Partition", F("partition_index", INT32), F("error_code", INT16))
                    ),
                ),
            )
        ),
    ),
)

# ListConfigResources (74; ListClientMetricsResources at version 0) ----------------

ListConfigResourcesRequest = message(
    "ListConfigResourcesRequest",
    # The types to list (none: all). Version 0 (ListClientMetricsResources) had no field.
    F("resource_types", Array(INT8), "1+"),
)

ListConfigResourcesResponse = message(
    "ListConfigResourcesResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F(
        "config_resources",
        Array(
            message(
                "ConfigResource",
                F("resource_name", STRING),
                F("resource_type", INT8, "1+", default=16),
            )
        ),
    ),
)
