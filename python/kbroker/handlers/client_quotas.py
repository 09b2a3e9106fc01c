"""DescribeClientQuotas (48) and AlterClientQuotas (49): users' and clients' quotas.

Quotas live in the configs of their entity (a user, a client id, a user's
client id, or a default of those; see kbroker.quota.entity), beside a
user's SCRAM credentials, in the broker's `EntityConfigStore` (ZooKeeper in
a cluster: a Kafka 3.9 broker on the same chroot reads and enforces them).

Describe matches entities as Kafka 3.9 (ZooKeeper mode) does: each filter
component names an entity type and matches an exact name, the default, or
any name given (defaults included); a type the filter leaves out matches an
entity without that part, or any when the filter is not strict. Only the
quota keys are described. IP (connection rate) quotas are not kept by
kbroker: an ``ip`` filter describes none, and altering one is refused.

Alter validates as Kafka does (entity types, empty names, known keys, whole
numbers for byte rates) and stores the values' text as Kafka stores it;
``controller_mutation_rate`` is refused (kbroker has no controller mutation
quotas) except to remove it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kbroker.cluster.errors import ClusterError
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.quotas import (
    AlterClientQuotasResponse,
    DescribeClientQuotasResponse,
)
from kbroker.quota.entity import CLIENT_ID, IP, USER, QuotaEntity
from kbroker.quota.manager import CONTROLLER_MUTATION_RATE, QUOTA_KEYS, parse_quota_value
from kbroker.quota.values import QuotaValueError, stored_quota_text
from kbroker.security.scram import MECHANISMS

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# Any name (the component matches every entity that has this part).
_ANY = object()


class QuotaRequestError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- describe ---------------------------------------------------------------------------


def _filter(components: list[Any]) -> dict[str, object]:
    """Entity type -> the name it must have (None: the default, _ANY: any)."""
    wanted: dict[str, object] = {}
    for c in components:
        kind = c.entity_type
        if kind in wanted:
            what = "client" if kind == CLIENT_ID else kind
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST, f"Duplicate {what} filter component entity type"
            )
        if kind == "":
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type"
            )
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(
                ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{kind}' not supported"
            )
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"an exact {kind} filter needs a name to match"
                )
            wanted[kind] = c.match
        elif c.match_type == MATCH_DEFAULT:
            wanted[kind] = None
        elif c.match_type == MATCH_SPECIFIED:
            wanted[kind] = _ANY
        else:
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST, f"Unexpected match type: {c.match_type}"
            )
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        raise QuotaRequestError(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component.",
        )
    return wanted


def _matches(
    wanted: dict[str, object], kind: str, part: str | None, plain: str | None, strict: bool
) -> bool:
    """Whether an entity's part (`part` None: the entity has none) passes the filter."""
    if kind not in wanted:
        return part is None or not strict
    want = wanted[kind]
    if part is None:
        return False
    if want is _ANY:
        return True
    if want is None:
        return plain is None
    return plain == want


def describe_quotas(
    entities: dict[QuotaEntity, dict[str, str]], wanted: dict[str, object], strict: bool
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The quotas of the entities the filter matches, as Kafka 3.9 (ZooKeeper mode) finds them."""
    if IP in wanted:
        return []
    out = []
    for entity, configs in entities.items():
        values: dict[str, float] = {}
        for key in QUOTA_KEYS:
            text = configs.get(key)
            if text is None:
                continue
            try:
                values[key] = parse_quota_value(key, text)
            except ValueError:
                log.warning("not describing %s=%r of %s: not a number", key, text, entity)
        if not values:
            continue
        if _matches(wanted, USER, entity.user, entity.plain_user, strict) and _matches(
            wanted, CLIENT_ID, entity.client_id, entity.plain_client_id, strict
        ):
            out.append((entity, values))
    out.sort(key=lambda item: (item[0].user or "", item[0].client_id or ""))
    return out


async def handle_describe_client_quotas(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    R = DescribeClientQuotasResponse
    try:
        wanted = _filter(request.components)
        found = describe_quotas(await broker.entity_configs.fetch_all(), wanted, request.strict)
    except QuotaRequestError as exc:
        return R(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), entries=None)
    except (OSError, ClusterError) as exc:
        return R(
            throttle_time_ms=0,
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            error_message=f"cannot read the quotas: {exc}",
            entries=None,
        )
    entries = [
        R.EntryData(
            entity=[
                R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in e.wire_entries()
            ],
            values=[R.EntryData.ValueData(key=k, value=v) for k, v in values.items()],
        )
        for e, values in found
    ]
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


# -- alter --------------------------------------------------------------------------------


def parse_entity(components: list[Any]) -> QuotaEntity:
    """The entity an alteration names; QuotaRequestError with Kafka's error when it is not one."""
    if not components:
        raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {c.entity_type}"
            )
        if c.entity_name is not None and c.entity_name == "":
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST, f"Empty {c.entity_type} not supported"
            )
        names[c.entity_type] = c.entity_name
    if IP in names:
        if len(names) > 1:
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST,
                "Invalid quota entity combination, IP entity should not be used with "
                "user/client ID entity.",
            )
        raise QuotaRequestError(
            ErrorCode.INVALID_REQUEST,
            "IP quotas (connection_creation_rate) are not supported by kbroker",
        )
    return QuotaEntity.of(
        names.get(USER), names.get(CLIENT_ID), named=(USER in names, CLIENT_ID in names)
    )


def apply_quota_ops(entity: QuotaEntity, configs: dict[str, str], ops: list[Any]) -> dict[str, str]:
    """The entity's configs after the ops (validated as Kafka does); QuotaRequestError."""
    out = dict(configs)
    for op in ops:
        if op.remove:
            out.pop(op.key, None)
            continue
        if op.key not in QUOTA_KEYS:
            if op.key in MECHANISMS and entity.client_id is None:
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"{op.key} is a SCRAM credential: set it with AlterUserScramCredentials",
                )
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}"
            )
        if op.key == CONTROLLER_MUTATION_RATE:
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST,
                "controller_mutation_rate is not supported by kbroker (it has no controller "
                "mutation quotas); it can only be removed",
            )
        try:
            out[op.key] = stored_quota_text(op.key, op.value)
        except QuotaValueError as exc:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    return out


async def _alter_one(broker: Broker, entry: Any, validate_only: bool) -> tuple[int, str | None]:
    try:
        entity = parse_entity(entry.entity)
        apply_quota_ops(entity, {}, entry.ops)  # refuse a bad request before reading anything
        if validate_only:
            return ErrorCode.NONE, None
        await broker.entity_configs.update(
            entity, lambda configs: apply_quota_ops(entity, configs, entry.ops)
        )
    except QuotaRequestError as exc:
        return exc.code, str(exc)
    except OSError as exc:
        return ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record the quotas: {exc}"
    except ClusterError as exc:
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot record the quotas: {exc}"
    log.info(
        "quotas of %s altered: %s",
        entity,
        [(o.key, None if o.remove else o.value) for o in entry.ops],
    )
    return ErrorCode.NONE, None


async def handle_alter_client_quotas(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    R = AlterClientQuotasResponse
    entries = []
    for entry in request.entries:
        code, message = await _alter_one(broker, entry, request.validate_only)
        entries.append(
            R.EntryData(
                error_code=code,
                error_message=message,
                entity=[
                    R.EntryData.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ],
            )
        )
    return R(throttle_time_ms=0, entries=entries)


HANDLERS = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
}
