"""InitProducerId (22): producer ids and epochs for idempotent producers.

Ids come from the broker's ProducerIdAllocator. A producer that presents its
current id and epoch (v3+, KIP-360) gets the epoch bumped; transactional ids
are refused until transactions exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.protocol import ApiKey, ErrorCode, RequestHeader
from kbroker.protocol.messages.core import InitProducerIdResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

MAX_EPOCH = 32767


def _response(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=code, producer_id=producer_id, producer_epoch=epoch
    )


def handle_init_producer_id(broker: Broker, header: RequestHeader, request: Any) -> Any:
    if request.transactional_id is not None:
        # No transaction coordinator yet: a clear, non-retriable refusal.
        return _response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    # An idempotent producer recovering from an error (v3+) bumps its epoch.
    if (
        header.api_version >= 3
        and request.producer_id >= 0
        and 0 <= request.producer_epoch < MAX_EPOCH - 1
    ):
        return _response(ErrorCode.NONE, request.producer_id, request.producer_epoch + 1)
    return _response(ErrorCode.NONE, broker.producer_ids.next_id(), 0)


HANDLERS = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
