"""UpdateFeatures (57): a single node finalizes ``group.version`` (kbroker.features) within its
supported levels 0-1: an upgrade, or a SAFE or UNSAFE downgrade (to 0 switches the consumer
group protocol off), written to its /feature entry with the epoch one higher; validate_only
checks without writing. A level out of range or a downgrade asked as an upgrade is refused in
Kafka 4.1's words, and the whole request fails when one update does (a top-level error and no
results), as Kafka 4.1.1's controller answers. Features kbroker does not have are refused in the
words Kafka's controller uses for each case. A cluster does not yet write its /feature znode,
so there every update is refused that way too; brokers other than the controller answer
NOT_CONTROLLER. With an authorizer it needs Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED),
as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.features import SUPPORTED
from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import UpdateFeaturesResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Result = UpdateFeaturesResponse.Result

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
NOT_SUPPORTED = (
    "Could not apply finalized feature update because the provided feature is not supported."
)


def _upgrade_type(update: Any, version: int) -> int:
    if version >= 1:
        return int(update.upgrade_type)
    return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE


def refusal(update: Any, version: int) -> str:
    """Why ``update`` cannot be applied (no feature exists to update)."""
    kind = _upgrade_type(update, version)
    if not update.feature:
        return "Feature name can not be empty."
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "Received unknown upgrade type."
    if update.max_version_level < 1:
        if kind == UPGRADE:
            return (
                f"Can not provide versionLevel: {update.max_version_level} less than 1 "
                "without setting the SAFE downgradeType in the request."
            )
        return "Can not delete non-existing finalized feature."
    return NOT_SUPPORTED


async def handle_update_features(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    def answer(code: ErrorCode, message: str | None, results: list[Any]) -> Any:
        return UpdateFeaturesResponse(
            throttle_time_ms=0, error_code=code, error_message=message, results=results
        )

    if not authorize_cluster(broker, ctx, Op.ALTER):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, [])
    if broker.cluster is not None and broker.cluster.controller is None:
        return answer(ErrorCode.NOT_CONTROLLER, None, [])
    version = ctx.api_version
    store = broker.feature_store
    updates = list(request.feature_updates)
    if (
        store is not None
        and broker.cluster is None
        and any(u.feature in SUPPORTED for u in updates)
    ):
        response = _apply(broker, store, updates, version, bool(request.validate_only), answer)
        await broker.metadata.durable()  # answered once /feature is on disk
        return response
    results = [
        Result(
            feature=u.feature,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=refusal(u, version),
        )
        for u in request.feature_updates
    ]
    return answer(ErrorCode.NONE, None, results)


def supported_refusal(broker: Broker, update: Any, version: int) -> str | None:
    """Why an update of a feature kbroker supports cannot be applied, or None."""
    name, level = update.feature, update.max_version_level
    lo, hi = SUPPORTED[name]
    kind = _upgrade_type(update, version)
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "Received unknown upgrade type."
    if not lo <= level <= hi:
        return (
            f"Invalid update version {level} for feature {name}. Local controller "
            f"{broker.broker_id} only supports versions {lo}-{hi}"
        )
    if level < broker.features.level(name) and kind == UPGRADE:
        return (
            f"Invalid update version {level} for feature {name}. Can't downgrade the version "
            "of this feature without setting the upgrade type to either safe or unsafe downgrade."
        )
    return None


def _apply(
    broker: Broker,
    store: Any,
    updates: list[Any],
    version: int,
    validate_only: bool,
    answer: Any,
) -> Any:
    for u in updates:
        problem = (
            supported_refusal(broker, u, version) if u.feature in SUPPORTED else refusal(u, version)
        )
        if problem is not None:
            code = ErrorCode.INVALID_UPDATE_VERSION
            message = (
                "The update failed for all features since the following feature had an "
                f"error: {problem}"
            )
            return answer(code, message, [])
    if not validate_only:
        levels = dict(broker.features.levels)
        for u in updates:
            levels[u.feature] = u.max_version_level
        store.write(levels)
    results = [
        Result(feature=u.feature, error_code=ErrorCode.NONE, error_message=None) for u in updates
    ]
    return answer(ErrorCode.NONE, None, results)


HANDLERS = {ApiKey.UPDATE_FEATURES: handle_update_features}
