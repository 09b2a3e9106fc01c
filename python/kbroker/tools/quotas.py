"""``kbroker quota set|describe|delete``: client quotas, through AlterClientQuotas and
DescribeClientQuotas (so the same commands work against Apache Kafka).

An entity is a user, a client id, or a user's client id, each a name or the
default (Kafka's ``--entity-default``); keys are Kafka's
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kbroker.tools.client import ClientError
from kbroker.tools.cluster import Cluster, broker_error

USER, CLIENT_ID = "user", "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


@dataclass(frozen=True)
class Part:
    """One part of an entity: a name, or (``name`` None) the default."""

    kind: str
    name: str | None

    @property
    def label(self) -> str:
        what = "user" if self.kind == USER else "client id"
        return f"the default {what}" if self.name is None else f"{what} {self.name!r}"


def entity_of(
    user: str | None, user_default: bool, client_id: str | None, client_default: bool
) -> list[Part]:
    """The entity the options name; ValueError when they name none or contradict."""
    if user is not None and user_default:
        raise ValueError("give --user or --user-default, not both")
    if client_id is not None and client_default:
        raise ValueError("give --client-id or --client-default, not both")
    parts = []
    if user is not None or user_default:
        parts.append(Part(USER, user))
    if client_id is not None or client_default:
        parts.append(Part(CLIENT_ID, client_id))
    if not parts:
        raise ValueError("name a user (--user, --user-default), a client id, or both")
    return parts


def label(parts: Sequence[Part]) -> str:
    return " with ".join(p.label for p in parts)


def alter(
    cluster: Cluster,
    parts: Sequence[Part],
    set_values: Mapping[str, float] | None = None,
    remove: Sequence[str] = (),
    validate_only: bool = False,
) -> None:
    R = AlterClientQuotasRequest
    ops = [
        R.EntryData.OpData(key=k, value=float(v), remove=False)
        for k, v in (set_values or {}).items()
    ]
    ops += [R.EntryData.OpData(key=k, value=0.0, remove=True) for k in remove]
    req = R(
        entries=[
            R.EntryData(
                entity=[
                    R.EntryData.EntityData(entity_type=p.kind, entity_name=p.name) for p in parts
                ],
                ops=ops,
            )
        ],
        validate_only=validate_only,
    )
    client = cluster.bootstrap
    resp = client.request(
        ApiKey.ALTER_CLIENT_QUOTAS, client.version(ApiKey.ALTER_CLIENT_QUOTAS), req
    )
    for entry in resp.entries:
        if entry.error_code != ErrorCode.NONE:
            raise ClientError(broker_error(label(parts), entry.error_code, entry.error_message))


def describe(
    cluster: Cluster, parts: Sequence[Part] = (), strict: bool = False
) -> list[dict[str, Any]]:
    """The quotas of the entities matching ``parts`` (each an exact name or the default;
    none: every entity), one row each: ``{"user", "client_id", "quotas"}``, where a part
    absent from the entity is missing and the default is None."""
    R = DescribeClientQuotasRequest
    components = [
        R.Component(
            entity_type=p.kind,
            match_type=MATCH_DEFAULT if p.name is None else MATCH_EXACT,
            match=p.name,
        )
        for p in parts
    ]
    client = cluster.bootstrap
    resp = client.request(
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        client.version(ApiKey.DESCRIBE_CLIENT_QUOTAS),
        R(components=components, strict=strict),
    )
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(broker_error("describing quotas", resp.error_code, resp.error_message))
    rows = []
    for entry in resp.entries or []:
        row: dict[str, Any] = {}
        for e in entry.entity:
            key = (
                "user"
                if e.entity_type == USER
                else "client_id"
                if e.entity_type == CLIENT_ID
                else e.entity_type
            )
            row[key] = e.entity_name
        row["quotas"] = {v.key: _number(v.value) for v in sorted(entry.values, key=lambda v: v.key)}
        rows.append(row)
    rows.sort(key=lambda r: (str(r.get("user", "")), str(r.get("client_id", ""))))
    return rows


def _number(value: float) -> float | int:
    return int(value) if value.is_integer() else value
