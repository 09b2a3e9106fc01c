"""Declarations of the ACL APIs: DescribeAcls (29), CreateAcls (30) and DeleteAcls (31).

Resource types, pattern types, operations and permission types travel as their
int8 codes (`kbroker.security.acl` names them). The fields are declared as Kafka
declares them from v0 (the pattern type fields arrive in v1; v2 is the first
flexible version; v3 adds the User resource type, no field); the API table serves
v1-3, Kafka 4's range.
"""

from __future__ import annotations

from ..schema import INT8, INT16, INT32, STRING, Array, F, message

# Every ACL's pattern type before v1 (and their default): LITERAL.
LITERAL_PATTERN = 3

# DescribeAcls (29) ----------------------------------------------------------------

DescribeAclsRequest = message(
    "DescribeAclsRequest",
    F("resource_type_filter", INT8),
    F("resource_name_filter", STRING, nullable="0+", default=None),
    F("pattern_type_filter", INT8, "1+", default=LITERAL_PATTERN),
    F("principal_filter", STRING, nullable="0+", default=None),
    F("host_filter", STRING, nullable="0+", default=None),
    F("operation", INT8),
    F("permission_type", INT8),
)

DescribeAclsResponse = message(
    "DescribeAclsResponse",
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F(
        "resources",
        Array(
            message(
                "Resource",
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("pattern_type", INT8, "1+", default=LITERAL_PATTERN),
                F(
                    "acls",
                    Array(
                        message(
                            "Acl",
                            F("principal", STRING),
                            F("host", STRING),
                            F("operation", INT8),
                            F("permission_type", INT8),
                        )
                    ),
                ),
            )
        ),
    ),
)

# CreateAcls (30) ------------------------------------------------------------------

CreateAclsRequest = message(
    "CreateAclsRequest",
    F(
        "creations",
        Array(
            message(
                "Creation",
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("resource_pattern_type", INT8, "1+", default=LITERAL_PATTERN),
                F("principal", STRING),
                F("host", STRING),
                F("operation", INT8),
                F("permission_type", INT8),
            )
        ),
    ),
)

CreateAclsResponse = message(
    "CreateAclsResponse",
    F("throttle_time_ms", INT32),
    F(
        "results",
        Array(
            message(
                "Result",
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            )
        ),
    ),
)

# DeleteAcls (31) ------------------------------------------------------------------

DeleteAclsRequest = message(
    "DeleteAclsRequest",
    F(
        "filters",
        Array(
            message(
                "Filter",
                F("resource_type_filter", INT8),
                F("resource_name_filter", STRING, nullable="0+", default=None),
                F("pattern_type_filter", INT8, "1+", default=LITERAL_PATTERN),
                F("principal_filter", STRING, nullable="0+", default=None),
                F("host_filter", STRING, nullable="0+", default=None),
                F("operation", INT8),
                F("permission_type", INT8),
            )
        ),
    ),
)

DeleteAclsResponse = message(
    "DeleteAclsResponse",
    F("throttle_time_ms", INT32),
    F(
        "filter_results",
        Array(
            message(
                "FilterResult",
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F(
                    "matching_acls",
                    Array(
                        message(
                            "MatchingAcl",
                            F("error_code", INT16),
                            F("error_message", STRING, nullable="0+", default=None),
                            F("resource_type", INT8),
                            F("resource_name", STRING),
                            F("pattern_type", INT8, "1+", default=LITERAL_PATTERN),
                            F("principal", STRING),
                            F("host", STRING),
                            F("operation", INT8),
                            F("permission_type", INT8),
                        )
                    ),
                ),
            )
        ),
    ),
)
