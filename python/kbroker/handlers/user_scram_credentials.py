"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

A user's SCRAM credentials are kept in the user's configs under the
mechanism's name, in Kafka's text form (salt, stored key, server key,
iterations; see kbroker.security.scram), where a Kafka 3.9 broker reads
them too. An upsertion carries a salt and a salted password computed by
the client; the broker keeps only the keys derived from them, and neither
the salted password nor anything derived from it is logged or answered.

Validation and error codes are Kafka 3.9's (ZooKeeper mode): an empty user
name, an unknown mechanism (UNSUPPORTED_SASL_MECHANISM) or iterations
outside [4096, 16384] (UNACCEPTABLE_CREDENTIAL) fail every alteration of
that user; a user altered twice for one mechanism fails with
DUPLICATE_RESOURCE; deleting a credential the user does not have fails
with RESOURCE_NOT_FOUND. kbroker also refuses (UNACCEPTABLE_CREDENTIAL) an
empty salt and a salted password that is not one hash long: no client
derives such a thing from a password, and an empty key would let anyone
in. Describing all users lists those with a credential; describing named
ones answers RESOURCE_NOT_FOUND for those without.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kbroker.cluster.errors import ClusterError
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.quotas import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)
from kbroker.quota.entity import QuotaEntity, sanitize
from kbroker.security.scram import MECHANISM_CODES, MECHANISMS, ScramCredential

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

MAX_ITERATIONS = 16384
_EMPTY_USER = "Username must not be empty"
_CODE_OF = {m.name: code for code, m in MECHANISM_CODES.items()}


def _user(name: str) -> QuotaEntity:
    return QuotaEntity(sanitize(name), None)


def credential_infos(configs: dict[str, str]) -> list[tuple[int, int]]:
    """(mechanism code, iterations) of each credential in a user's configs; ValueError when
    one is not Kafka's credential text."""
    out = []
    for name in MECHANISMS:
        text = configs.get(name)
        if text is not None:
            out.append((_CODE_OF[name], ScramCredential.from_kafka(text).iterations))
    return out


# -- describe ------------------------------------------------------------------------------


async def handle_describe_user_scram_credentials(
    broker: Broker, ctx: RequestContext, request: Any
) -> Any:
    R = DescribeUserScramCredentialsResponse
    store = broker.entity_configs

    def result(user: str, configs: dict[str, str]) -> Any:
        try:
            infos = credential_infos(configs)
        except ValueError as exc:
            log.warning("the SCRAM credentials of user %r cannot be read: %s", user, exc)
            return R.Result(
                user=user,
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message="Error processing describe user SCRAM credential configs request",
            )
        return R.Result(
            user=user,
            error_code=ErrorCode.NONE,
            credential_infos=[R.Result.CredentialInfo(mechanism=m, iterations=i) for m, i in infos],
        )

    try:
        if not request.users:
            everyone = await store.fetch_all()
            results = [
                result(name, configs)
                for name, configs in sorted(
                    (e.plain_user or "", c)
                    for e, c in everyone.items()
                    if e.client_id is None and e.plain_user is not None
                )
                if any(m in configs for m in MECHANISMS)
            ]
            return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)
        names = [u.name for u in request.users]
        by_user: dict[str, Any] = {}
        for name in dict.fromkeys(names):
            if name == "":
                by_user[name] = R.Result(
                    user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, error_message=_EMPTY_USER
                )
            elif names.count(name) > 1:
                by_user[name] = R.Result(
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice "
                    f"in a single request: {name}",
                )
            else:
                configs = await store.fetch(_user(name))
                if any(m in configs for m in MECHANISMS):
                    by_user[name] = result(name, configs)
                else:
                    by_user[name] = R.Result(
                        user=name,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message="Attempt to describe a user credential that does not "
                        f"exist: {name}",
                    )
        return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results=list(by_user.values()))
    except (OSError, ClusterError) as exc:
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            error_message=f"Error processing describe user SCRAM credential configs request: {exc}",
            results=[],
        )


# -- alter ---------------------------------------------------------------------------------


def _upsertion_problem(u: Any) -> tuple[int, str] | None:
    """Why an upsertion is refused before anything is read (Kafka's checks, then kbroker's)."""
    if u.name == "":
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, _EMPTY_USER
    mechanism = MECHANISM_CODES.get(u.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if u.iterations < mechanism.min_iterations:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not u.salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must not be empty"
    if len(u.salted_password) != mechanism.digest_size:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"The salted password must be {mechanism.digest_size} bytes for {mechanism.name}",
        )
    return None


def _deletion_problem(d: Any) -> tuple[int, str] | None:
    if d.name == "":
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, _EMPTY_USER
    if d.mechanism not in MECHANISM_CODES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


class _CredentialEdit:
    """One user's deletions and upsertions, applied to the user's configs; `missing` is set
    (and nothing changed) when a credential to delete is not there."""

    def __init__(self, deletions: list[str], upsertions: list[Any]) -> None:
        self.deletions = deletions
        self.upsertions = upsertions
        self.missing = False

    def __call__(self, configs: dict[str, str]) -> dict[str, str] | None:
        if any(name not in configs for name in self.deletions):
            self.missing = True
            return None
        for name in self.deletions:
            del configs[name]
        for u in self.upsertions:
            mechanism = MECHANISM_CODES[u.mechanism]
            credential = ScramCredential.from_salted_password(
                mechanism, bytes(u.salted_password), bytes(u.salt), u.iterations
            )
            configs[mechanism.name] = credential.to_kafka()
        return configs


async def handle_alter_user_scram_credentials(
    broker: Broker, ctx: RequestContext, request: Any
) -> Any:
    R = AlterUserScramCredentialsResponse
    results: list[Any] = []

    def fail(user: str, code: int, message: str) -> None:
        results.append(R.Result(user=user, error_code=code, error_message=message))

    # Users with an invalid alteration: every alteration of theirs fails (one result each).
    refused: dict[str, tuple[int, str]] = {}
    for d in request.deletions:
        problem = _deletion_problem(d)
        if problem is not None:
            refused[d.name] = problem
    for u in request.upsertions:
        problem = _upsertion_problem(u)
        if problem is not None:
            refused[u.name] = problem
    for user, (code, message) in refused.items():
        fail(user, code, message)
    pairs = [(d.name, d.mechanism) for d in request.deletions if d.name not in refused] + [
        (u.name, u.mechanism) for u in request.upsertions if u.name not in refused
    ]
    twice = {user for user, mech in pairs if pairs.count((user, mech)) > 1}
    for user in dict.fromkeys(u for u, _ in pairs if u in twice):
        fail(
            user,
            ErrorCode.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        )
    users = list(dict.fromkeys(u for u, _ in pairs if u not in twice))
    for user in users:
        edit = _CredentialEdit(
            [MECHANISM_CODES[d.mechanism].name for d in request.deletions if d.name == user],
            [u for u in request.upsertions if u.name == user],
        )
        try:
            await broker.entity_configs.update(_user(user), edit)
        except OSError as exc:
            fail(user, ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record the credentials: {exc}")
            continue
        except ClusterError as exc:
            fail(user, ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot record the credentials: {exc}")
            continue
        if edit.missing:
            fail(
                user,
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
            continue
        log.info(
            "SCRAM credentials of user %r: %s",
            user,
            ", ".join(
                [f"deleted {name}" for name in edit.deletions]
                + [
                    f"set {MECHANISM_CODES[u.mechanism].name} ({u.iterations} iterations)"
                    for u in edit.upsertions
                ]
            ),
        )
        results.append(R.Result(user=user, error_code=ErrorCode.NONE, error_message=None))
    return R(throttle_time_ms=0, results=results)


HANDLERS = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
