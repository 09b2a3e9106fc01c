"""SaslHandshake (17): kbroker has no SASL listener yet, so no mechanism is enabled.

Answered as Kafka answers a mechanism that is not enabled: UNSUPPORTED_SASL_MECHANISM
with the enabled mechanisms, here none, so a client configured for SASL fails at once
with a clear error instead of a closed connection. (Apache Kafka's PLAINTEXT listener
answers ILLEGAL_SASL_STATE; librdkafka reports this one as "Unsupported SASL mechanism:
broker's supported mechanisms: ", which says what is wrong.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.sasl import SaslHandshakeResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_sasl_handshake(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[])


HANDLERS = {ApiKey.SASL_HANDSHAKE: handle_sasl_handshake}
