"""The delegation token APIs (38-41): answered as Kafka answers them where delegation
tokens are not enabled, since kbroker has none.

Kafka refuses every token request that comes over a channel a token could not be
handed over safely on (PLAINTEXT, or SSL without a client certificate, whose principal
is anonymous) with DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, and, on other channels, with
DELEGATION_TOKEN_AUTH_DISABLED while no ``delegation.token.secret.key`` is set: kbroker
answers the same, so clients and ``kafka-delegation-tokens`` report that tokens are not
available rather than that the broker does not know the API. A refusal carries no token:
timestamps -1, an empty id and HMAC, and (CreateDelegationToken) the owner and requester
the token would have had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import ANONYMOUS, RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.tokens import (
    CreateDelegationTokenResponse,
    DescribeDelegationTokenResponse,
    ExpireDelegationTokenResponse,
    RenewDelegationTokenResponse,
)
from kbroker.security.listeners import SecurityProtocol

if TYPE_CHECKING:
    from kbroker.broker import Broker

NO_TIMESTAMP = -1


def refusal(broker: Broker, ctx: RequestContext) -> ErrorCode:
    """Why a token request over this request's channel is refused."""
    protocol = broker.listeners.get(ctx.listener).protocol
    if protocol == SecurityProtocol.PLAINTEXT or (
        protocol == SecurityProtocol.SSL and ctx.principal == ANONYMOUS
    ):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def handle_create_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    requester = _split(ctx.principal)
    named = ctx.api_version >= 3 and request.owner_principal_name
    owner = (
        (request.owner_principal_type or "", request.owner_principal_name) if named else requester
    )
    return CreateDelegationTokenResponse(
        error_code=refusal(broker, ctx),
        principal_type=owner[0],
        principal_name=owner[1],
        token_requester_principal_type=requester[0],
        token_requester_principal_name=requester[1],
        issue_timestamp_ms=NO_TIMESTAMP,
        expiry_timestamp_ms=NO_TIMESTAMP,
        max_timestamp_ms=NO_TIMESTAMP,
        token_id="",
        hmac=b"",
        throttle_time_ms=0,
    )


def handle_renew_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return RenewDelegationTokenResponse(
        error_code=refusal(broker, ctx), expiry_timestamp_ms=NO_TIMESTAMP, throttle_time_ms=0
    )


def handle_expire_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return ExpireDelegationTokenResponse(
        error_code=refusal(broker, ctx), expiry_timestamp_ms=NO_TIMESTAMP, throttle_time_ms=0
    )


def handle_describe_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return DescribeDelegationTokenResponse(
        error_code=refusal(broker, ctx), tokens=[], throttle_time_ms=0
    )


HANDLERS = {
    ApiKey.CREATE_DELEGATION_TOKEN: handle_create_delegation_token,
    ApiKey.RENEW_DELEGATION_TOKEN: handle_renew_delegation_token,
    ApiKey.EXPIRE_DELEGATION_TOKEN: handle_expire_delegation_token,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: handle_describe_delegation_token,
}
