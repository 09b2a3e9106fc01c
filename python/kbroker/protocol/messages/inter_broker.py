"""Declarations of the inter-broker APIs of a ZooKeeper-mode cluster.

The controller's orders to a broker (LeaderAndIsr, StopReplica, UpdateMetadata)
and a broker's requests to the controller (ControlledShutdown, AlterPartition,
AllocateProducerIds), at every version Apache Kafka 3.9 speaks, and a transaction
coordinator's WriteTxnMarkers to the leaders of a transaction's partitions.
Followers' Fetch and OffsetForLeaderEpoch fields live with the client APIs in core.py.
"""

from __future__ import annotations

from ..schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Array, F, message

# LeaderAndIsr (4): flexible from v4 ---------------------------------------------

# One partition's state; v0-1 name the topic in each partition (no topic grouping).
LeaderAndIsrPartitionState = message(
    "LeaderAndIsrPartitionState",
    F("topic_name", STRING, "0-1"),
    F("partition_index", INT32),
    F("controller_epoch", INT32),
    F("leader", INT32),
    F("leader_epoch", INT32),
    F("isr", Array(INT32)),
    F("partition_epoch", INT32),  # the partition znode's version in ZooKeeper mode
    F("replicas", Array(INT32)),
    F("adding_replicas", Array(INT32), "3+"),
    F("removing_replicas", Array(INT32), "3+"),
    F("is_new", BOOL, "1+"),
    F("leader_recovery_state", INT8, "6+"),
)

LeaderAndIsrRequest = message(
    "LeaderAndIsrRequest",
    F("controller_id", INT32),
    F("is_kraft_controller", BOOL, "7+"),
    F("controller_epoch", INT32),
    F("broker_epoch", INT64, "2+", default=-1),
    F("type", INT8, "5+"),  # 0 unknown, 1 incremental, 2 full (KIP-866 migration)
    F("ungrouped_partition_states", Array(LeaderAndIsrPartitionState), "0-1"),
    F(
        "topic_states",
        Array(
            message(
                "TopicState",
                F("topic_name", STRING),
                F("topic_id", UUID, "5+"),
                F("partition_states", Array(LeaderAndIsrPartitionState)),
            )
        ),
        "2+",
    ),
    F(
        "live_leaders",
        Array(
            message(
                "LiveLeader",
                F("broker_id", INT32),
                F("host_name", STRING),
                F("port", INT32),
            )
        ),
    ),
)

LeaderAndIsrPartitionError = message(
    "LeaderAndIsrPartitionError",
    F("topic_name", STRING, "0-4"),
    F("partition_index", INT32),
    F("error_code", INT16),
)

LeaderAndIsrResponse = message(
    "LeaderAndIsrResponse",
    F("error_code", INT16),
    F("partition_errors", Array(LeaderAndIsrPartitionError), "0-4"),
    F(
        "topics",
        Array(
            message(
                "TopicError",
                F("topic_id", UUID),
                F("partition_errors", Array(LeaderAndIsrPartitionError)),
            )
        ),
        "5+",
    ),
)

# StopReplica (5): flexible from v2 ------------------------------------------------

StopReplicaRequest = message(
    "StopReplicaRequest",
    F("controller_id", INT32),
    F("is_kraft_controller", BOOL, "4+"),
    F("controller_epoch", INT32),
    F("broker_epoch", INT64, "1+", default=-1),
    F("delete_partitions", BOOL, "0-2"),
    F(
        "ungrouped_partitions",
        Array(
            message(
                "PartitionV0",
                F("topic_name", STRING),
                F("partition_index", INT32),
            )
        ),
        "0",
    ),
    F(
        "topics",
        Array(
            message(
                "TopicV1",
                F("name", STRING),
                F("partition_indexes", Array(INT32)),
            )
        ),
        "1-2",
    ),
    F(
        "topic_states",
        Array(
            message(
                "TopicState",
                F("topic_name", STRING),
                F(
                    "partition_states",
                    Array(
                        message(
                            "PartitionState",
                            F("partition_index", INT32),
                            F("leader_epoch", INT32, default=-1),
                            F("delete_partition", BOOL),
                        )
                    ),
                ),
            )
        ),
        "3+",
    ),
)

StopReplicaResponse = message(
    "StopReplicaResponse",
    F("error_code", INT16),
    F(
        "partition_errors",
        Array(
            message(
                "PartitionError",
                F("topic_name", STRING),
                F("partition_index", INT32),
                F("error_code", INT16),
            )
        ),
    ),
)

# UpdateMetadata (6): flexible from v6 ---------------------------------------------

UpdateMetadataPartitionState = message(
    "UpdateMetadataPartitionState",
    F("topic_name", STRING, "0-4"),
    F("partition_index", INT32),
    F("controller_epoch", INT32),
    F("leader", INT32),
    F("leader_epoch", INT32),
    F("isr", Array(INT32)),
    F("zk_version", INT32),
    F("replicas", Array(INT32)),
    F("offline_replicas", Array(INT32), "4+"),
)

UpdateMetadataRequest = message(
    "UpdateMetadataRequest",
    F("controller_id", INT32),
    F("is_kraft_controller", BOOL, "8+"),
    F("type", INT8, "8+", tag=0),  # 0 unknown, 1 incremental, 2 full (KIP-866 migration)
    F("controller_epoch", INT32),
    F("broker_epoch", INT64, "5+", default=-1),
    F("ungrouped_partition_states", Array(UpdateMetadataPartitionState), "0-4"),
    F(
        "topic_states",
        Array(
            message(
                "TopicState",
                F("topic_name", STRING),
                F("topic_id", UUID, "7+"),
                F("partition_states", Array(UpdateMetadataPartitionState)),
            )
        ),
        "5+",
    ),
    F(
        "live_brokers",
        Array(
            message(
                "Broker",
                F("id", INT32),
                F("v0_host", STRING, "0"),  # v0: one plaintext endpoint per broker
                F("v0_port", INT32, "0"),
                F(
                    "endpoints",
                    Array(
                        message(
                            "Endpoint",
                            F("port", INT32),
                            F("host", STRING),
                            F("listener", STRING, "3+"),
                            F("security_protocol", INT16),
                        )
                    ),
                    "1+",
                ),
                F("rack", STRING, "2+", nullable="2+", default=None),
            )
        ),
    ),
)

UpdateMetadataResponse = message(
    "UpdateMetadataResponse",
    F("error_code", INT16),
)

# ControlledShutdown (7): flexible from v3; v0 uses request header v0 ---------------

ControlledShutdownRequest = message(
    "ControlledShutdownRequest",
    F("broker_id", INT32),
    F("broker_epoch", INT64, "2+", default=-1),
)

ControlledShutdownResponse = message(
    "ControlledShutdownResponse",
    F("error_code", INT16),
    F(
        "remaining_partitions",
        Array(
            message(
                "RemainingPartition",
                F("topic_name", STRING),
                F("partition_index", INT32),
            )
        ),
    ),
)

# AlterPartition (56): flexible at every version ------------------------------------

AlterPartitionRequest = message(
    "AlterPartitionRequest",
    F("broker_id", INT32),
    F("broker_epoch", INT64, default=-1),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic_name", STRING, "0-1"),
                F("topic_id", UUID, "2+"),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("leader_epoch", INT32),
                            F("new_isr", Array(INT32), "0-2"),
                            F(
                                "new_isr_with_epochs",
                                Array(
                                    message(
                                        "BrokerState",
                                        F("broker_id", INT32),
                                        F("broker_epoch", INT64, default=-1),
                                    )
                                ),
                                "3+",
                            ),
                            F("leader_recovery_state", INT8, "1+"),
                            F("partition_epoch", INT32),
                        )
                    ),
                ),
            )
        ),
    ),
)

AlterPartitionResponse = message(
    "AlterPartitionResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F(
        "topics",
        Array(
            message(
                "Topic",
                F("topic_name", STRING, "0-1"),
                F("topic_id", UUID, "2+"),
                F(
                    "partitions",
                    Array(
                        message(
                            "Partition",
                            F("partition_index", INT32),
                            F("error_code", INT16),
                            F("leader_id", INT32),
                            F("leader_epoch", INT32),
                            F("isr", Array(INT32)),
                            F("leader_recovery_state", INT8, "1+"),
                            F("partition_epoch", INT32),
                        )
                    ),
                ),
            )
        ),
    ),
)

# WriteTxnMarkers (27) ------------------------------------------------------------
# A transaction coordinator has the leaders of a transaction's partitions write its
# COMMIT (transaction_result true) or ABORT marker. Kafka 4.0's baseline, version 1.

WriteTxnMarkersRequest = message(
    "WriteTxnMarkersRequest",
    F(
        "markers",
        Array(
            message(
                "Marker",
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("transaction_result", BOOL),
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
                F("coordinator_epoch", INT32),
            )
        ),
    ),
)

WriteTxnMarkersResponse = message(
    "WriteTxnMarkersResponse",
    F(
        "markers",
        Array(
            message(
                "Marker",
                F("producer_id", INT64),
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
        ),
    ),
)

# AllocateProducerIds (67) --------------------------------------------------------
# A broker asks the controller for a block of producer ids (Kafka 3.x brokers do, from
# inter.broker.protocol.version 3.0, rather than writing /latest_producer_id_block).

AllocateProducerIdsRequest = message(
    "AllocateProducerIdsRequest",
    F("broker_id", INT32),
    F("broker_epoch", INT64, default=-1),
)

AllocateProducerIdsResponse = message(
    "AllocateProducerIdsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id_start", INT64),
    F("producer_id_len", INT32),
)
