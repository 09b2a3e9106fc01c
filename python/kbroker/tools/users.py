"""``kbroker user create|list|delete``: SCRAM users, through AlterUserScramCredentials and
DescribeUserScramCredentials (so the same commands work against Apache Kafka).

As Kafka's tools do, the password never leaves this process: a random salt
is drawn here and the salted password (PBKDF2 with the mechanism's hash) is
computed here; the broker derives and keeps only the stored and server keys.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.quotas import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)
from kbroker.security.scram import MECHANISM_CODES, MECHANISMS
from kbroker.tools.client import ClientError
from kbroker.tools.cluster import Cluster, broker_error, controller

DEFAULT_MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32
_CODE_OF = {m.name: code for code, m in MECHANISM_CODES.items()}


def _mechanism_code(name: str) -> int:
    code = _CODE_OF.get(name.upper())
    if code is None:
        raise ClientError(f"unknown mechanism {name!r} (one of {', '.join(MECHANISMS)})")
    return code


def _alter(cluster: Cluster, request: Any) -> None:
    # A ZooKeeper-mode Kafka changes credentials on its controller only (NOT_CONTROLLER).
    client = controller(cluster)
    version = client.version(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    resp = client.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version, request)
    errors = [
        broker_error(f"user {r.user!r}", r.error_code, r.error_message)
        for r in resp.results
        if r.error_code != ErrorCode.NONE
    ]
    if errors:
        raise ClientError("; ".join(errors))


def create(
    cluster: Cluster,
    user: str,
    password: str,
    mechanism: str = DEFAULT_MECHANISM,
    iterations: int = DEFAULT_ITERATIONS,
) -> None:
    """Creates (or replaces) the user's credential for one mechanism."""
    code = _mechanism_code(mechanism)
    if not password:
        raise ClientError("the password must not be empty")
    salt = secrets.token_bytes(SALT_BYTES)
    salted = MECHANISM_CODES[code].salted_password(password.encode("utf-8"), salt, iterations)
    R = AlterUserScramCredentialsRequest
    _alter(
        cluster,
        R(
            deletions=[],
            upsertions=[
                R.Upsertion(
                    name=user,
                    mechanism=code,
                    iterations=iterations,
                    salt=salt,
                    salted_password=salted,
                )
            ],
        ),
    )


def describe(cluster: Cluster, users: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each credential of the users (all users with one when none are named): one row each,
    ``{"user", "mechanism", "iterations"}``."""
    client = cluster.bootstrap
    version = client.version(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
    R = DescribeUserScramCredentialsRequest
    req = R(users=[R.UserName(name=u) for u in users] or None)
    resp = client.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version, req)
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(broker_error("describing users", resp.error_code, resp.error_message))
    rows: list[dict[str, Any]] = []
    errors = []
    for r in resp.results:
        if r.error_code != ErrorCode.NONE:
            errors.append(broker_error(f"user {r.user!r}", r.error_code, r.error_message))
            continue
        for info in r.credential_infos:
            mechanism = MECHANISM_CODES.get(info.mechanism)
            rows.append(
                {
                    "user": r.user,
                    "mechanism": mechanism.name if mechanism else str(info.mechanism),
                    "iterations": info.iterations,
                }
            )
    if errors:
        raise ClientError("; ".join(errors))
    return rows


def delete(cluster: Cluster, user: str, mechanisms: Sequence[str] = ()) -> list[str]:
    """Deletes the user's credentials for `mechanisms` (all it has when none are named);
    returns the mechanisms deleted."""
    names = [m.upper() for m in mechanisms] or [r["mechanism"] for r in describe(cluster, [user])]
    R = AlterUserScramCredentialsRequest
    _alter(
        cluster,
        R(
            deletions=[R.Deletion(name=user, mechanism=_mechanism_code(m)) for m in names],
            upsertions=[],
        ),
    )
    return names
