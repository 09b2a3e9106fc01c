"""UpdateFeatures (57): ``group.version`` (kbroker.metadata.features) finalized within its supported
levels 0-1: an upgrade, or a SAFE or UNSAFE downgrade (to 0 switches the consumer group protocol
off); validate_only checks without writing. A single node writes its /feature entry with the
epoch one higher; in a cluster the controller writes the /feature znode, once every live broker
supports the level, and answers when this broker follows the new epoch. A level out of range or
a downgrade asked as an upgrade is refused in Kafka 4.1's words, and the whole request fails when
one update does (a top-level error and no results), as Kafka 4.1.1's controller answers. A
request naming only features kbroker does not have gets each refused in the words Kafka's
controller uses for each case. Brokers other than the controller answer NOT_CONTROLLER. With an
authorizer it needs Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.metadata.features import SUPPORTED, FeatureUpdate, UpdateRefused, plan_update, refusal
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.messages.admin import UpdateFeaturesResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Result = UpdateFeaturesResponse.Result


def _answer(code: ErrorCode, message: str | None, results: list[Any]) -> Any:
    return UpdateFeaturesResponse(
        throttle_time_ms=0, error_code=code, error_message=message, results=results
    )


async def handle_update_features(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(broker, ctx, Op.ALTER):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, [])
    controller = None if broker.cluster is None else broker.cluster.controller
    if broker.cluster is not None and controller is None:
        return _answer(ErrorCode.NOT_CONTROLLER, None, [])
    updates = [FeatureUpdate.from_request(u, ctx.api_version) for u in request.feature_updates]
    if not any(u.feature in SUPPORTED for u in updates):
        results = [
            Result(u.feature, error_code=ErrorCode.INVALID_REQUEST, error_message=refusal(u))
            for u in updates
        ]
        return _answer(ErrorCode.NONE, None, results)
    validate_only = bool(request.validate_only)
    if controller is not None:
        try:
            epoch = await controller.update_features(updates, validate_only)
        except KafkaError as exc:
            return _answer(exc.code, exc.message, [])
        # Answered once this broker follows what was written (the znode's watch), as Kafka's
        # controller waits for its own cache.
        if not await broker.features.reach(epoch, max(request.timeout_ms, 0) / 1000):
            return _answer(
                ErrorCode.FEATURE_UPDATE_FAILED,
                f"/feature was written (epoch {epoch}) but this broker had not read it within "
                f"{request.timeout_ms} ms",
                [],
            )
    else:
        store = broker.feature_store
        if store is None:
            return _answer(ErrorCode.FEATURE_UPDATE_FAILED, "no feature store", [])
        try:
            levels = plan_update(updates, broker.features.levels, broker.broker_id)
        except UpdateRefused as exc:
            return _answer(ErrorCode.INVALID_UPDATE_VERSION, str(exc), [])
        if not validate_only:
            store.write(levels)
            await broker.metadata.durable()  # answered once /feature is on disk
    results = [
        Result(feature=u.feature, error_code=ErrorCode.NONE, error_message=None) for u in updates
    ]
    return _answer(ErrorCode.NONE, None, results)


HANDLERS = {ApiKey.UPDATE_FEATURES: handle_update_features}
