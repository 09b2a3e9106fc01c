"""Declarations of the client quota and SCRAM credential APIs: DescribeClientQuotas (48),
AlterClientQuotas (49), DescribeUserScramCredentials (50), AlterUserScramCredentials (51)."""

from __future__ import annotations

from ..schema import BOOL, BYTES, FLOAT64, INT8, INT16, INT32, STRING, Array, F, message

# DescribeClientQuotas (48) -------------------------------------------------------

DescribeClientQuotasRequest = message(
    "DescribeClientQuotasRequest",
    F(
        "components",
        Array(
            message(
                "Component",
                F("entity_type", STRING),
                # 0 exact name, 1 default name, 2 any specified name
                F("match_type", INT8),
                F("match", STRING, nullable="0+", default=None),
            )
        ),
    ),
    F("strict", BOOL),
)

_QuotaEntityData = message(
    "EntityData",
    F("entity_type", STRING),
    F("entity_name", STRING, nullable="0+", default=None),
)

DescribeClientQuotasResponse = message(
    "DescribeClientQuotasResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F(
        "entries",
        Array(
            message(
                "EntryData",
                F("entity", Array(_QuotaEntityData)),
                F(
                    "values",
                    Array(
                        message(
                            "ValueData",
                            F("key", STRING),
                            F("value", FLOAT64),
                        )
                    ),
                ),
            )
        ),
        nullable="0+",
        default=None,
    ),
)

# AlterClientQuotas (49) -----------------------------------------------------------

AlterClientQuotasRequest = message(
    "AlterClientQuotasRequest",
    F(
        "entries",
        Array(
            message(
                "EntryData",
                F("entity", Array(_QuotaEntityData)),
                F(
                    "ops",
                    Array(
                        message(
                            "OpData",
                            F("key", STRING),
                            F("value", FLOAT64),
                            F("remove", BOOL),
                        )
                    ),
                ),
            )
        ),
    ),
    F("validate_only", BOOL),
)

AlterClientQuotasResponse = message(
    "AlterClientQuotasResponse",
    F("throttle_time_ms", INT32),
    F(
        "entries",
        Array(
            message(
                "EntryData",
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F("entity", Array(_QuotaEntityData)),
            )
        ),
    ),
)

# DescribeUserScramCredentials (50) ---------------------------------------------------

DescribeUserScramCredentialsRequest = message(
    "DescribeUserScramCredentialsRequest",
    F("users", Array(message("UserName", F("name", STRING))), nullable="0+", default=None),
)

DescribeUserScramCredentialsResponse = message(
    "DescribeUserScramCredentialsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F(
        "results",
        Array(
            message(
                "Result",
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F(
                    "credential_infos",
                    Array(
                        message(
                            "CredentialInfo",
                            F("mechanism", INT8),
                            F("iterations", INT32),
                        )
                    ),
                ),
            )
        ),
    ),
)

# AlterUserScramCredentials (51) --------------------------------------------------------

AlterUserScramCredentialsRequest = message(
    "AlterUserScramCredentialsRequest",
    F(
        "deletions",
        Array(
            message(
                "Deletion",
                F("name", STRING),
                F("mechanism", INT8),
            )
        ),
    ),
    F(
        "upsertions",
        Array(
            message(
                "Upsertion",
                F("name", STRING),
                F("mechanism", INT8),
                F("iterations", INT32),
                F("salt", BYTES),
                F("salted_password", BYTES),
            )
        ),
    ),
)

AlterUserScramCredentialsResponse = message(
    "AlterUserScramCredentialsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        Array(
            message(
                "Result",
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            )
        ),
    ),
)
