"""InitProducerId (22): producer ids and epochs, for idempotent and transactional producers.

An idempotent producer gets a new id from the broker's ProducerIdAllocator;
one that presents its current id and epoch (v3+, KIP-360) gets the epoch
bumped. A transactional producer's id and epoch are its transaction
coordinator's decision (`TransactionCoordinator.init_producer_id`): the
request must reach the coordinator of its transactional id (NOT_COORDINATOR
otherwise). A producer id without an epoch, or the reverse, is
INVALID_REQUEST; PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH before v4,
as Kafka does for clients that do not know it.

With an authorizer, as Kafka: a transactional id needs Write on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs
IdempotentWrite on the cluster or Write on some topic
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import (
    TOPIC,
    TRANSACTIONAL_ID,
    Op,
    authorize,
    authorize_any,
    authorize_cluster,
)
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import InitProducerIdResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

MAX_EPOCH = 32767


def _response(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=code, producer_id=producer_id, producer_epoch=epoch
    )


def handle_init_producer_id(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    txn = request.transactional_id
    if txn is not None and not authorize(broker, ctx, Op.WRITE, TRANSACTIONAL_ID, txn):
        return _response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if txn is None and not (
        authorize_cluster(broker, ctx, Op.IDEMPOTENT_WRITE)
        or authorize_any(broker, ctx, Op.WRITE, TOPIC)
    ):
        return _response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if txn is not None:
        return _transactional(broker, ctx, request)
    # An idempotent producer recovering from an error (v3+) bumps its epoch.
    if (
        ctx.api_version >= 3
        and request.producer_id >= 0
        and 0 <= request.producer_epoch < MAX_EPOCH - 1
    ):
        return _response(ErrorCode.NONE, request.producer_id, request.producer_epoch + 1)
    return _new_producer(broker)


async def _transactional(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    producer_id, epoch = request.producer_id, request.producer_epoch
    expected = None
    if producer_id != -1 or epoch != -1:
        if producer_id == -1 or epoch == -1:
            return _response(ErrorCode.INVALID_REQUEST)
        expected = (producer_id, epoch)
    result = await broker.txn_coordinator.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, expected
    )
    error = result.error
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return _response(error, result.producer_id, result.producer_epoch)


async def _new_producer(broker: Broker) -> Any:
    try:
        producer_id = await broker.producer_ids.next_id()
    except OSError as exc:
        # The next block of ids could not be recorded: retriable for the client.
        broker.logs.errors.failed("allocating", "producer ids", exc)
        return _response(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    broker.logs.errors.succeeded("allocating", "producer ids")
    return _response(ErrorCode.NONE, producer_id, 0)


HANDLERS = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
