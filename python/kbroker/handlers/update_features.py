"""UpdateFeatures (57): kbroker has no versioned features (KIP-584; ApiVersions lists none,
as a Kafka 3.9 broker in ZooKeeper mode does), so the controller refuses every update, one
result per feature (in the order asked; Kafka's follow its hash map), in the words Kafka's
controller uses for each case; other brokers of a
cluster answer NOT_CONTROLLER. With an authorizer it needs Alter on the cluster
(CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def handle_update_features(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    def answer(code: ErrorCode, message: str | None, results: list[Any]) -> Any:
        return UpdateFeaturesResponse(
            throttle_time_ms=0, error_code=code, error_message=message, results=results
        )

    if not authorize_cluster(broker, ctx, Op.ALTER):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, [])
    if broker.cluster is not None and broker.cluster.controller is None:
        return answer(ErrorCode.NOT_CONTROLLER, None, [])
    version = ctx.api_version
    results = [
        Result(
            feature=u.feature,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=refusal(u, version),
        )
        for u in request.feature_updates
    ]
    return answer(ErrorCode.NONE, None, results)


HANDLERS = {ApiKey.UPDATE_FEATURES: handle_update_features}
