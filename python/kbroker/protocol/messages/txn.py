"""Declarations of the transaction coordinator's APIs.

AddPartitionsToTxn (v0-3 from producers, v4+ the batched form brokers send,
with VerifyOnly, for KIP-890's verification), AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions.
"""

from __future__ import annotations

from ..schema import BOOL, INT16, INT32, INT64, STRING, Array, F, message

# AddPartitionsToTxn (24) ------------------------------------------------------------

AddPartitionsToTxnTopic = message(
    "AddPartitionsToTxnTopic",
    F("name", STRING),
    F("partitions", Array(INT32)),
)

AddPartitionsToTxnRequest = message(
    "AddPartitionsToTxnRequest",
    F(
        "transactions",
        Array(
            message(
                "Transaction",
                F("transactional_id", STRING),
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("verify_only", BOOL),
                F("topics", Array(AddPartitionsToTxnTopic)),
            )
        ),
        "4+",
    ),
    F("v3_and_below_transactional_id", STRING, "0-3"),
    F("v3_and_below_producer_id", INT64, "0-3"),
    F("v3_and_below_producer_epoch", INT16, "0-3"),
    F("v3_and_below_topics", Array(AddPartitionsToTxnTopic), "0-3"),
)

AddPartitionsToTxnTopicResult = message(
    "AddPartitionsToTxnTopicResult",
    F("name", STRING),
    F(
        "results_by_partition",
        Array(
            message(
                "PartitionResult",
                F("partition_index", INT32),
                F("partition_error_code", INT16),
            )
        ),
    ),
)

AddPartitionsToTxnResponse = message(
    "AddPartitionsToTxnResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "4+"),
    F(
        "results_by_transaction",
        Array(
            message(
                "Result",
                F("transactional_id", STRING),
                F("topic_results", Array(AddPartitionsToTxnTopicResult)),
            )
        ),
        "4+",
    ),
    F("results_by_topic_v3_and_below", Array(AddPartitionsToTxnTopicResult), "0-3"),
)

# AddOffsetsToTxn (25) ----------------------------------------------------------------

AddOffsetsToTxnRequest = message(
    "AddOffsetsToTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
)

AddOffsetsToTxnResponse = message(
    "AddOffsetsToTxnResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
)

# EndTxn (26) ---------------------------------------------------------------------------

EndTxnRequest = message(
    "EndTxnRequest",
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOL),
)

EndTxnResponse = message(
    "EndTxnResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
)

# DescribeTransactions (65) ----------------------------------------------------------------

DescribeTransactionsRequest = message(
    "DescribeTransactionsRequest",
    F("transactional_ids", Array(STRING)),
)

DescribeTransactionsResponse = message(
    "DescribeTransactionsResponse",
    F("throttle_time_ms", INT32),
    F(
        "transaction_states",
        Array(
            message(
                "TransactionState",
                F("error_code", INT16),
                F("transactional_id", STRING),
                F("transaction_state", STRING),
                F("transaction_timeout_ms", INT32),
                F("transaction_start_time_ms", INT64),
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F(
                    "topics",
                    Array(
                        message(
                            "TopicData",
                            F("topic", STRING),
                            F("partitions", Array(INT32)),
                        )
                    ),
                ),
            )
        ),
    ),
)

# ListTransactions (66) ----------------------------------------------------------------------

ListTransactionsRequest = message(
    "ListTransactionsRequest",
    F("state_filters", Array(STRING)),
    F("producer_id_filters", Array(INT64)),
    F("duration_filter", INT64, "1+", default=-1),
)

ListTransactionsResponse = message(
    "ListTransactionsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("unknown_state_filters", Array(STRING)),
    F(
        "transaction_states",
        Array(
            message(
                "TransactionState",
                F("transactional_id", STRING),
                F("producer_id", INT64),
                F("transaction_state", STRING),
            )
        ),
    ),
)
