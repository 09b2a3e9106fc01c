"""DescribeTransactions (65): the state of transactional ids this broker coordinates.

Each id is answered by `TransactionCoordinator.describe` (NOT_COORDINATOR when
another broker coordinates it, TRANSACTIONAL_ID_NOT_FOUND for an unknown one).
With an authorizer an id needs Describe on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and only the partitions of topics the
caller may describe are listed, as in Kafka.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import TOPIC, TRANSACTIONAL_ID, Op, authorize, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.txn import DescribeTransactionsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

State = DescribeTransactionsResponse.TransactionState
TopicData = State.TopicData


def _describe(broker: Broker, ctx: RequestContext, transactional_id: str) -> Any:
    if not authorize(broker, ctx, Op.DESCRIBE, TRANSACTIONAL_ID, transactional_id):
        return State(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            transactional_id=transactional_id,
            transaction_state="",
            transaction_timeout_ms=0,
            transaction_start_time_ms=0,
            producer_id=0,
            producer_epoch=0,
            topics=[],
        )
    d = broker.txn_coordinator.describe(transactional_id)
    hidden = refused(broker, ctx, Op.DESCRIBE, TOPIC, {tp.topic for tp in d.partitions})
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in d.partitions:
        if tp.topic not in hidden:
            by_topic[tp.topic].append(tp.partition)
    return State(
        error_code=d.error,
        transactional_id=transactional_id,
        transaction_state=d.state,
        transaction_timeout_ms=d.timeout_ms,
        transaction_start_time_ms=d.start_time_ms,
        producer_id=d.producer_id,
        producer_epoch=d.producer_epoch,
        topics=[TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()],
    )


def handle_describe_transactions(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return DescribeTransactionsResponse(
        throttle_time_ms=0,
        transaction_states=[_describe(broker, ctx, t) for t in request.transactional_ids],
    )


HANDLERS = {ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions}
