"""Declarations of the delegation token APIs: CreateDelegationToken (38),
RenewDelegationToken (39), ExpireDelegationToken (40), DescribeDelegationToken (41)."""

from __future__ import annotations

from ..schema import BYTES, INT16, INT32, INT64, STRING, Array, F, message

_Principal = message("Principal", F("principal_type", STRING), F("principal_name", STRING))

# CreateDelegationToken (38) ------------------------------------------------------

CreateDelegationTokenRequest = message(
    "CreateDelegationTokenRequest",
    F("owner_principal_type", STRING, "3+", nullable="3+", default=None),
    F("owner_principal_name", STRING, "3+", nullable="3+", default=None),
    F("renewers", Array(_Principal)),
    F("max_lifetime_ms", INT64, default=-1),
)

CreateDelegationTokenResponse = message(
    "CreateDelegationTokenResponse",
    F("error_code", INT16),
    F("principal_type", STRING),
    F("principal_name", STRING),
    F("token_requester_principal_type", STRING, "3+"),
    F("token_requester_principal_name", STRING, "3+"),
    F("issue_timestamp_ms", INT64),
    F("expiry_timestamp_ms", INT64),
    F("max_timestamp_ms", INT64),
    F("token_id", STRING),
    F("hmac", BYTES),
    F("throttle_time_ms", INT32),
)

# RenewDelegationToken (39) and ExpireDelegationToken (40) ------------------------

RenewDelegationTokenRequest = message(
    "RenewDelegationTokenRequest", F("hmac", BYTES), F("renew_period_ms", INT64)
)

RenewDelegationTokenResponse = message(
    "RenewDelegationTokenResponse",
    F("error_code", INT16),
    F("expiry_timestamp_ms", INT64),
    F("throttle_time_ms", INT32),
)

ExpireDelegationTokenRequest = message(
    "ExpireDelegationTokenRequest", F("hmac", BYTES), F("expiry_time_period_ms", INT64)
)

ExpireDelegationTokenResponse = message(
    "ExpireDelegationTokenResponse",
    F("error_code", INT16),
    F("expiry_timestamp_ms", INT64),
    F("throttle_time_ms", INT32),
)

# DescribeDelegationToken (41) ----------------------------------------------------

DescribeDelegationTokenRequest = message(
    "DescribeDelegationTokenRequest",
    F("owners", Array(_Principal), nullable="0+", default=None),
)

DescribeDelegationTokenResponse = message(
    "DescribeDelegationTokenResponse",
    F("error_code", INT16),
    F(
        "tokens",
        Array(
            message(
                "Token",
                F("principal_type", STRING),
                F("principal_name", STRING),
                F("token_requester_principal_type", STRING, "3+"),
                F("token_requester_principal_name", STRING, "3+"),
                F("issue_timestamp", INT64),
                F("expiry_timestamp", INT64),
                F("max_timestamp", INT64),
                F("token_id", STRING),
                F("hmac", BYTES),
                F("renewers", Array(_Principal)),
            )
        ),
    ),
    F("throttle_time_ms", INT32),
)
