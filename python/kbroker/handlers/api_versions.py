"""ApiVersions (18): the APIs this broker handles, from the handler registry, and (v3+) its
versioned features (kbroker.metadata.features). At group.version 0 the consumer group
protocol's APIs (ConsumerGroupHeartbeat, ConsumerGroupDescribe) stay advertised and are refused with
UNSUPPORTED_VERSION, as Kafka 4.1.1 does (seen in tests/broker/test_features.py): a KIP-848 client
then fails with a clear fatal error instead of waiting for an API that never comes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.metadata.features import SUPPORTED
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, api_versions_response

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_api_versions(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    features = broker.features
    resp = api_versions_response(broker.handled_api_keys)
    resp.supported_features = [
        resp.SupportedFeature(name, lo, hi) for name, (lo, hi) in sorted(SUPPORTED.items())
    ]
    resp.finalized_features_epoch = features.epoch
    resp.finalized_features = [
        resp.FinalizedFeature(name, level, level)
        for name, level in sorted(features.levels.items())
        if level > 0
    ]
    return resp


HANDLERS = {ApiKey.API_VERSIONS: handle_api_versions}
