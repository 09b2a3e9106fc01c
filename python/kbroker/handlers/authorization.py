"""The checks handlers make before they act: may the request's principal do this?

Each is one call on the broker's `AclAuthorizer` with the request's
principal and client address, or, when no authorizer is configured
(``authorizer.class.name`` empty), an immediate yes, as Kafka's
AuthHelper: a broker without ACLs pays one attribute test per request.

- `authorize`: one operation on one resource (the cluster: `authorize_cluster`).
- `refused`: the names among many a request may not touch (empty: all may).
- `authorize_any`: an operation on some resource of a type (Kafka's
  authorizeByResourceType, e.g. Write on some topic for an idempotent producer).
- `authorized_operations`: Kafka's bit field of what the principal may do to a
  resource (every operation the type supports when nothing is checked).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kbroker.network.request import RequestContext
from kbroker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bitfield,
)

if TYPE_CHECKING:
    from kbroker.broker import Broker

Op = AclOperation
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

_NOTHING: frozenset[str] = frozenset()


def authorize(
    broker: Broker, ctx: RequestContext, op: AclOperation, resource_type: ResourceType, name: str
) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(
        ctx.principal, ctx.client_host, op, resource_type, name
    )


def authorize_cluster(broker: Broker, ctx: RequestContext, op: AclOperation) -> bool:
    return authorize(broker, ctx, op, CLUSTER, CLUSTER_NAME)


def refused(
    broker: Broker,
    ctx: RequestContext,
    op: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> frozenset[str]:
    """The names ``op`` is not allowed on (each asked about once)."""
    authorizer = broker.authorizer
    if authorizer is None:
        return _NOTHING
    principal, host = ctx.principal, ctx.client_host
    return frozenset(
        name
        for name in set(names)
        if not authorizer.authorize(principal, host, op, resource_type, name)
    )


def authorize_any(
    broker: Broker, ctx: RequestContext, op: AclOperation, resource_type: ResourceType
) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize_any(
        ctx.principal, ctx.client_host, op, resource_type
    )


def authorized_operations(
    broker: Broker, ctx: RequestContext, resource_type: ResourceType, name: str
) -> int:
    authorizer = broker.authorizer
    if authorizer is None:
        return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)
