"""``kbroker acl create|list|delete``: kafka-acls.sh's job, over CreateAcls, DescribeAcls and
DeleteAcls, as plain data.

`Resources` gathers kafka-acls.sh's resource options (--topic, --group,
--cluster, --transactional-id, ... with --resource-pattern-type); `grants`
turns principals, hosts and operations into one ACL each (as kafka-acls.sh:
every principal from every host for every operation on every resource,
hosts "*" unless given); `create`, `describe` and `delete` send them and
return rows of Kafka's names (what ``--json`` prints). A broker's refusal of
the whole request (SECURITY_DISABLED without an authorizer,
CLUSTER_AUTHORIZATION_FAILED) is a `ClientError`; a refusal of one ACL is
reported in its row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.acls import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from kbroker.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    principal_parts,
)
from kbroker.tools.client import ClientError
from kbroker.tools.cluster import Cluster, broker_error

# kafka-acls.sh's --resource-pattern-type values.
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def operation(text: str) -> AclOperation:
    """An operation by kafka-acls.sh's name (Read, IdempotentWrite, ..., any case)."""
    op = AclOperation.parse(text)
    if op is None or op in (AclOperation.UNKNOWN, AclOperation.ANY):
        names = ", ".join(o.kafka_name for o in AclOperation if int(o) > 1)
        raise ValueError(f"{text!r} is not an operation ({names})")
    return op


def principal(text: str) -> str:
    if principal_parts(text) is None:
        raise ValueError(f"{text!r} is not a principal of the form Type:name (User:alice)")
    return text


@dataclass(frozen=True)
class Resources:
    """The resources kafka-acls.sh's options name, each of one pattern type."""

    patterns: tuple[ResourcePattern, ...]

    @classmethod
    def of(
        cls,
        topics: Iterable[str] = (),
        groups: Iterable[str] = (),
        transactional_ids: Iterable[str] = (),
        cluster: bool = False,
        pattern_type: str = "literal",
    ) -> Resources:
        kind = PatternType.parse(pattern_type)
        if kind is None or pattern_type.lower() not in PATTERN_TYPES:
            raise ValueError(f"--resource-pattern-type {pattern_type!r}: one of literal, prefixed")
        patterns = [ResourcePattern(ResourceType.TOPIC, t, kind) for t in topics]
        patterns += [ResourcePattern(ResourceType.GROUP, g, kind) for g in groups]
        patterns += [
            ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, kind) for t in transactional_ids
        ]
        if cluster:
            patterns.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, kind))
        return cls(tuple(patterns))


def grants(
    resources: Resources,
    operations: Sequence[AclOperation],
    allow_principals: Sequence[str] = (),
    deny_principals: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    deny_hosts: Sequence[str] = (),
) -> list[AclBinding]:
    """One ACL per resource, principal, host and operation. ValueError when nothing would
    be granted, or an operation does not apply to a resource's type (as kafka-acls.sh)."""
    if not resources.patterns:
        raise ValueError("name a resource: --topic, --group, --cluster or --transactional-id")
    if not allow_principals and not deny_principals:
        raise ValueError("name a principal: --allow-principal or --deny-principal")
    if resources.patterns[0].pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("ACLs are created with --resource-pattern-type literal or prefixed")
    ops = list(dict.fromkeys(operations)) or [AclOperation.ALL]
    for pattern in resources.patterns:
        supported = SUPPORTED_OPERATIONS[pattern.resource_type] | {AclOperation.ALL}
        wrong = [o.kafka_name for o in ops if o not in supported]
        if wrong:
            raise ValueError(
                f"{pattern.resource_type.kafka_name} resources support only "
                f"{', '.join(sorted(o.kafka_name for o in supported))}, not {', '.join(wrong)}"
            )
    out = []
    for permission, principals, hosts in (
        (PermissionType.ALLOW, allow_principals, allow_hosts),
        (PermissionType.DENY, deny_principals, deny_hosts),
    ):
        for pattern in resources.patterns:
            for who in dict.fromkeys(principals):
                for host in dict.fromkeys(hosts or [WILDCARD_HOST]):
                    for op in ops:
                        out.append(
                            AclBinding(pattern, AccessControlEntry(who, host, op, permission))
                        )
    return out


def binding_row(binding: AclBinding, error: str | None = None) -> dict[str, Any]:
    """One ACL as ``--json`` shows it, in Kafka's names."""
    p, e = binding.pattern, binding.entry
    row: dict[str, Any] = {
        "resource_type": p.resource_type.kafka_name,
        "name": p.name,
        "pattern_type": p.pattern_type.name,
        "principal": e.principal,
        "host": e.host,
        "operation": e.operation.kafka_name,
        "permission": e.permission.kafka_name,
    }
    if error is not None:
        row["error"] = error
    return row


def create(cluster: Cluster, bindings: Sequence[AclBinding]) -> list[dict[str, Any]]:
    """Creates the ACLs; a row each, with "error" where one was refused."""
    client = cluster.bootstrap
    C = CreateAclsRequest.Creation
    req = CreateAclsRequest(
        creations=[
            C(
                resource_type=b.pattern.resource_type,
                resource_name=b.pattern.name,
                resource_pattern_type=b.pattern.pattern_type,
                principal=b.entry.principal,
                host=b.entry.host,
                operation=b.entry.operation,
                permission_type=b.entry.permission,
            )
            for b in bindings
        ]
    )
    resp = client.request(ApiKey.CREATE_ACLS, client.version(ApiKey.CREATE_ACLS), req)
    if len(resp.results) != len(bindings):
        raise ClientError(
            f"{client.address} answered {len(resp.results)} results, not {len(bindings)}"
        )
    codes = {r.error_code for r in resp.results}
    whole = _whole_request_refusal(codes)
    if whole is not None:
        raise ClientError(broker_error("creating ACLs", whole, resp.results[0].error_message))
    return [
        binding_row(
            b,
            None
            if r.error_code == ErrorCode.NONE
            else broker_error("ACL refused", r.error_code, r.error_message),
        )
        for b, r in zip(bindings, resp.results, strict=True)
    ]


def _whole_request_refusal(codes: set[int]) -> int | None:
    for code in (ErrorCode.SECURITY_DISABLED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
        if code in codes:
            return int(code)
    return None


def _filter_fields(
    resource: ResourcePattern | None, principal_filter: str | None
) -> dict[str, Any]:
    if resource is None:
        rtype, name, ptype = ResourceType.ANY, None, PatternType.ANY
    else:
        rtype, name, ptype = resource.resource_type, resource.name, resource.pattern_type
    return {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": ptype,
        "principal_filter": principal_filter,
        "host_filter": None,
        "operation": AclOperation.ANY,
        "permission_type": PermissionType.ANY,
    }


def _described(resp: Any) -> list[AclBinding]:
    out = []
    for r in resp.resources:
        pattern = ResourcePattern(
            ResourceType.of(r.resource_type), r.resource_name, PatternType.of(r.pattern_type)
        )
        for a in r.acls:
            out.append(
                AclBinding(
                    pattern,
                    AccessControlEntry(
                        a.principal,
                        a.host,
                        AclOperation.of(a.operation),
                        PermissionType.of(a.permission_type),
                    ),
                )
            )
    return out


def describe(
    cluster: Cluster, resources: Resources | None = None, principals: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The ACLs on ``resources`` (None: every ACL), only those of ``principals`` if given."""
    client = cluster.bootstrap
    version = client.version(ApiKey.DESCRIBE_ACLS)
    found: dict[AclBinding, None] = {}
    targets: list[ResourcePattern | None] = list(resources.patterns) if resources else [None]
    for target in targets:
        who_filters: list[str | None] = list(principals) or [None]
        for who in who_filters:
            resp = client.request(
                ApiKey.DESCRIBE_ACLS, version, DescribeAclsRequest(**_filter_fields(target, who))
            )
            if resp.error_code != ErrorCode.NONE:
                raise ClientError(broker_error("listing ACLs", resp.error_code, resp.error_message))
            found.update(dict.fromkeys(_described(resp)))
    return [binding_row(b) for b in sorted(found)]


def delete(
    cluster: Cluster,
    resources: Resources | None,
    operations: Sequence[AclOperation] = (),
    allow_principals: Sequence[str] = (),
    deny_principals: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    deny_hosts: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Deletes the ACLs on ``resources`` (None: every ACL) of the given principals, hosts
    and operations (none given: all of them); a row per ACL deleted."""
    filters = []
    targets: list[ResourcePattern | None] = list(resources.patterns) if resources else [None]
    for target in targets:
        base = _filter_fields(target, None)
        if not allow_principals and not deny_principals:
            filters.append(DeleteAclsRequest.Filter(**base))
            continue
        for permission, principals, hosts in (
            (PermissionType.ALLOW, allow_principals, allow_hosts),
            (PermissionType.DENY, deny_principals, deny_hosts),
        ):
            for who in dict.fromkeys(principals):
                host_filters: list[str | None] = list(dict.fromkeys(hosts)) or [None]
                for host in host_filters:
                    for op in dict.fromkeys(operations or [AclOperation.ANY]):
                        filters.append(
                            DeleteAclsRequest.Filter(
                                **base
                                | {
                                    "principal_filter": who,
                                    "host_filter": host,
                                    "operation": op,
                                    "permission_type": permission,
                                }
                            )
                        )
    client = cluster.bootstrap
    resp = client.request(
        ApiKey.DELETE_ACLS, client.version(ApiKey.DELETE_ACLS), DeleteAclsRequest(filters=filters)
    )
    rows = []
    errors = []
    for result in resp.filter_results:
        if result.error_code != ErrorCode.NONE:
            errors.append(result)
            continue
        for m in result.matching_acls:
            binding = AclBinding(
                ResourcePattern(
                    ResourceType.of(m.resource_type),
                    m.resource_name,
                    PatternType.of(m.pattern_type),
                ),
                AccessControlEntry(
                    m.principal,
                    m.host,
                    AclOperation.of(m.operation),
                    PermissionType.of(m.permission_type),
                ),
            )
            failed = None
            if m.error_code != ErrorCode.NONE:
                failed = broker_error("not deleted", m.error_code, m.error_message)
            rows.append(binding_row(binding, failed))
    if errors:
        first = errors[0]
        raise ClientError(
            broker_error("deleting ACLs", first.error_code, first.error_message)
            + (f" (and {len(errors) - 1} more filters)" if len(errors) > 1 else "")
        )
    return rows
