"""ListTransactions (66): the transactional ids this broker coordinates.

Filtered by state names, producer ids and (v1) how long the transaction has
been open (`TransactionCoordinator.list_transactions`); state names that name
no state come back in ``unknown_state_filters``. With an authorizer only the
ids the caller may describe are listed, as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import TRANSACTIONAL_ID, Op, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey
from kbroker.protocol.messages.txn import ListTransactionsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

State = ListTransactionsResponse.TransactionState


def handle_list_transactions(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    duration = request.duration_filter if ctx.api_version >= 1 else -1
    error, found, unknown = broker.txn_coordinator.list_transactions(
        set(request.producer_id_filters), set(request.state_filters), duration
    )
    ids = {t.transactional_id for t in found}
    hidden = refused(broker, ctx, Op.DESCRIBE, TRANSACTIONAL_ID, ids)
    return ListTransactionsResponse(
        throttle_time_ms=0,
        error_code=error,
        unknown_state_filters=unknown,
        transaction_states=[
            State(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state.display_name,
            )
            for t in found
            if t.transactional_id not in hidden
        ],
    )


HANDLERS = {ApiKey.LIST_TRANSACTIONS: handle_list_transactions}
