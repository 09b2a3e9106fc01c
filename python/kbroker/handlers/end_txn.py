"""EndTxn (26): a producer commits or aborts its transaction.

Answered once the transaction's PrepareCommit or PrepareAbort is stored
(`TransactionCoordinator.end_transaction`); its markers and completion
follow in the background. With an authorizer it needs Write on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); PRODUCER_FENCED is
answered INVALID_PRODUCER_EPOCH before v2, as Kafka does.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import TRANSACTIONAL_ID, Op, authorize
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.txn import EndTxnResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


async def handle_end_txn(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize(broker, ctx, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(
            throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
    error = await asyncio.shield(
        broker.txn_coordinator.end_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
    )
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return EndTxnResponse(throttle_time_ms=0, error_code=error)


HANDLERS = {ApiKey.END_TXN: handle_end_txn}
