"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), as Kafka's AclApis answers them.

DescribeAcls needs Describe on the cluster, CreateAcls and DeleteAcls Alter
on it (CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer all
three answer SECURITY_DISABLED. Any broker of a cluster takes them: the
authorizer writes through ZooKeeper and every broker follows.

Codes Kafka does not know (a resource type of 0, an operation of 99) make
Kafka close the connection; here they are answered INVALID_REQUEST for
the one creation or filter that carries them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.acls import (
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)
from kbroker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    filter_error,
)

if TYPE_CHECKING:
    from kbroker.broker import Broker

# Kafka's words: DescribeAcls says where, CreateAcls and DeleteAcls do not.
NO_AUTHORIZER = "No Authorizer is configured on the broker"
NO_AUTHORIZER_TO_CHANGE = "No Authorizer is configured."
CLUSTER_DENIED = "Cluster authorization failed."


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(
            ResourceType.of(f.resource_type_filter),
            f.resource_name_filter,
            PatternType.of(f.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            f.principal_filter,
            f.host_filter,
            AclOperation.of(f.operation),
            PermissionType.of(f.permission_type),
        ),
    )


# -- DescribeAcls ---------------------------------------------------------------------


def handle_describe_acls(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    def refusal(code: ErrorCode, message: str) -> Any:
        return DescribeAclsResponse(
            throttle_time_ms=0, error_code=code, error_message=message, resources=[]
        )

    if not authorize_cluster(broker, ctx, Op.DESCRIBE):
        return refusal(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    authorizer = broker.authorizer
    if authorizer is None:
        return refusal(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    wanted = _filter(request)
    problem = filter_error(wanted)
    if problem is not None:
        return refusal(ErrorCode.INVALID_REQUEST, problem)
    Resource = DescribeAclsResponse.Resource
    resources: dict[ResourcePattern, list[Any]] = {}
    for binding in authorizer.acls(wanted):
        e = binding.entry
        resources.setdefault(binding.pattern, []).append(
            Resource.Acl(
                principal=e.principal,
                host=e.host,
                operation=e.operation,
                permission_type=e.permission,
            )
        )
    return DescribeAclsResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message="",
        resources=[
            Resource(
                resource_type=p.resource_type,
                resource_name=p.name,
                pattern_type=p.pattern_type,
                acls=acls,
            )
            for p, acls in resources.items()
        ],
    )


# -- CreateAcls -----------------------------------------------------------------------


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType.of(c.resource_type),
            c.resource_name,
            PatternType.of(c.resource_pattern_type),
        ),
        AccessControlEntry(
            c.principal,
            c.host,
            AclOperation.of(c.operation),
            PermissionType.of(c.permission_type),
        ),
    )


def handle_create_acls(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    Result = CreateAclsResponse.Result

    def refusal(code: ErrorCode, message: str) -> Any:
        results = [Result(error_code=code, error_message=message) for _ in request.creations]
        return CreateAclsResponse(throttle_time_ms=0, results=results)

    if not authorize_cluster(broker, ctx, Op.ALTER):
        return refusal(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    if broker.authorizer is None:
        return refusal(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER_TO_CHANGE)
    return _create(broker, [_binding(c) for c in request.creations])


async def _create(broker: Broker, bindings: list[AclBinding]) -> Any:
    assert broker.authorizer is not None
    errors = await broker.authorizer.create_acls(bindings)
    Result = CreateAclsResponse.Result
    return CreateAclsResponse(
        throttle_time_ms=0,
        results=[
            Result(error_code=ErrorCode.NONE, error_message="")
            if error is None
            else Result(error_code=error.code, error_message=error.message)
            for error in errors
        ],
    )


# -- DeleteAcls -----------------------------------------------------------------------


def handle_delete_acls(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    FilterResult = DeleteAclsResponse.FilterResult

    def refusal(code: ErrorCode, message: str) -> Any:
        return DeleteAclsResponse(
            throttle_time_ms=0,
            filter_results=[
                FilterResult(error_code=code, error_message=message, matching_acls=[])
                for _ in request.filters
            ],
        )

    if not authorize_cluster(broker, ctx, Op.ALTER):
        return refusal(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    if broker.authorizer is None:
        return refusal(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER_TO_CHANGE)
    return _delete(broker, [_filter(f) for f in request.filters])


async def _delete(broker: Broker, filters: list[AclBindingFilter]) -> Any:
    assert broker.authorizer is not None
    FilterResult = DeleteAclsResponse.FilterResult
    Matching = FilterResult.MatchingAcl
    problems = [filter_error(f) for f in filters]
    usable = [f for f, problem in zip(filters, problems, strict=True) if problem is None]
    deleted = iter(await broker.authorizer.delete_acls(usable))
    results = []
    for problem in problems:
        if problem is not None:
            results.append(
                FilterResult(
                    error_code=ErrorCode.INVALID_REQUEST, error_message=problem, matching_acls=[]
                )
            )
            continue
        matching = []
        for binding, error in next(deleted):
            p, e = binding.pattern, binding.entry
            matching.append(
                Matching(
                    error_code=ErrorCode.NONE if error is None else error.code,
                    error_message=None if error is None else error.message,
                    resource_type=p.resource_type,
                    resource_name=p.name,
                    pattern_type=p.pattern_type,
                    principal=e.principal,
                    host=e.host,
                    operation=e.operation,
                    permission_type=e.permission,
                )
            )
        results.append(
            FilterResult(error_code=ErrorCode.NONE, error_message=None, matching_acls=matching)
        )
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


HANDLERS = {
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
