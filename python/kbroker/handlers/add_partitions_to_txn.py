"""AddPartitionsToTxn (24): partitions join a producer's transaction, or (v4+) a broker asks
whether they have.

v0-3 come from producers: one transaction, its partitions added
(`TransactionCoordinator.add_partitions`), every partition answered with the
same error. v4+ come from brokers (KIP-890: a partition leader verifying a
transactional batch): several transactions, each either added or, with
``verify_only``, checked (`TransactionCoordinator.verify_partitions`:
TRANSACTION_ABORTABLE for a partition not in the transaction); they need
ClusterAction on the cluster when an authorizer is on (the whole request is
answered CLUSTER_AUTHORIZATION_FAILED otherwise), as in Kafka.

As Kafka does, a transaction naming a partition that does not exist
(UNKNOWN_TOPIC_OR_PARTITION) or a topic the producer may not write
(TOPIC_AUTHORIZATION_FAILED, v0-3) adds none: those partitions get their
error, the others OPERATION_NOT_ATTEMPTED. PRODUCER_FENCED is answered
INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import (
    TOPIC,
    TRANSACTIONAL_ID,
    Op,
    authorize,
    authorize_cluster,
    refused,
)
from kbroker.log import TopicPartition
from kbroker.metadata.topics import INTERNAL_TOPICS
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.txn import (
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)

if TYPE_CHECKING:
    from kbroker.broker import Broker

PartitionResult = AddPartitionsToTxnTopicResult.PartitionResult
TxnResult = AddPartitionsToTxnResponse.Result

# The first version sent by brokers (batched, with verify_only).
BROKER_VERSION = 4


def topic_results(errors: Mapping[TopicPartition, ErrorCode]) -> list[Any]:
    """Per-partition errors as the response lists them, by topic."""
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for tp, code in errors.items():
        by_topic[tp.topic].append(
            PartitionResult(partition_index=tp.partition, partition_error_code=code)
        )
    return [
        AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts)
        for name, parts in by_topic.items()
    ]


def _partitions(topics: Iterable[Any]) -> list[TopicPartition]:
    return [TopicPartition(t.name, p) for t in topics for p in t.partitions]


def _precheck(
    broker: Broker, ctx: RequestContext, tps: list[TopicPartition], from_client: bool
) -> dict[TopicPartition, ErrorCode] | None:
    """The errors of a transaction none of whose partitions may be added, or None."""
    unauthorized: frozenset[str] = frozenset()
    if from_client:
        writable = {tp.topic for tp in tps if tp.topic not in INTERNAL_TOPICS}
        unauthorized = refused(broker, ctx, Op.WRITE, TOPIC, writable)
    cache = broker.metadata_cache
    errors: dict[TopicPartition, ErrorCode] = {}
    for tp in tps:
        if tp.topic in unauthorized:
            errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif cache.partition_state(tp.topic, tp.partition) is None:
            errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not errors:
        return None
    return {tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in tps}


def _client_error(code: ErrorCode, version: int) -> ErrorCode:
    if code == ErrorCode.PRODUCER_FENCED and version < 2:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


async def _one(
    broker: Broker,
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    verify_only: bool,
    topics: Iterable[Any],
) -> dict[TopicPartition, ErrorCode]:
    tps = _partitions(topics)
    from_client = ctx.api_version < BROKER_VERSION
    if from_client and not authorize(broker, ctx, Op.WRITE, TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    failed = _precheck(broker, ctx, tps, from_client)
    if failed is not None:
        return failed
    coordinator = broker.txn_coordinator
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, tps)
    error = await asyncio.shield(
        coordinator.add_partitions(transactional_id, producer_id, producer_epoch, tps)
    )
    return dict.fromkeys(tps, _client_error(error, ctx.api_version))


async def handle_add_partitions_to_txn(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version < BROKER_VERSION:
        errors = await _one(
            broker,
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            False,
            request.v3_and_below_topics,
        )
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0, results_by_topic_v3_and_below=topic_results(errors)
        )
    if not authorize_cluster(broker, ctx, Op.CLUSTER_ACTION):
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            results_by_transaction=[],
        )
    txns = request.transactions
    answers = await asyncio.gather(
        *(
            _one(
                broker,
                ctx,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.verify_only,
                t.topics,
            )
            for t in txns
        )
    )
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        results_by_transaction=[
            TxnResult(transactional_id=t.transactional_id, topic_results=topic_results(errors))
            for t, errors in zip(txns, answers, strict=True)
        ],
    )


HANDLERS = {ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn}
