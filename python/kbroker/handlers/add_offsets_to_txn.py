"""AddOffsetsToTxn (25): a consumer group's offsets join a producer's transaction.

The group's partition of ``__consumer_offsets`` is added to the transaction
(`TransactionCoordinator.add_partitions`), so that its markers reach the
offsets the producer then commits there (TxnOffsetCommit). With an
authorizer it needs Write on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and Read on the group
(GROUP_AUTHORIZATION_FAILED), as in Kafka; PRODUCER_FENCED is answered
INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.config import as_int
from kbroker.coordinator.records import OFFSETS_TOPIC, partition_for
from kbroker.handlers.authorization import GROUP, TRANSACTIONAL_ID, Op, authorize
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.txn import AddOffsetsToTxnResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def offsets_partition(broker: Broker, group_id: str) -> TopicPartition:
    """The group's partition of ``__consumer_offsets`` (by the configured count while the
    topic does not exist yet, as Kafka)."""
    count = broker.coordinator.cache.partition_count()
    if count is None:
        count = as_int(broker.config["offsets.topic.num.partitions"])
    return TopicPartition(OFFSETS_TOPIC, partition_for(group_id, count))


def _response(code: ErrorCode) -> Any:
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


async def handle_add_offsets_to_txn(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    txn = request.transactional_id
    if not authorize(broker, ctx, Op.WRITE, TRANSACTIONAL_ID, txn):
        return _response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return _response(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = await asyncio.shield(
        broker.txn_coordinator.add_partitions(
            txn,
            request.producer_id,
            request.producer_epoch,
            [offsets_partition(broker, request.group_id)],
        )
    )
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return _response(error)


HANDLERS = {ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn}
