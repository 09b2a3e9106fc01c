"""ApiVersions (18): the APIs this broker handles, from the handler registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, api_versions_response

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_api_versions(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(broker.handled_api_keys)


HANDLERS = {ApiKey.API_VERSIONS: handle_api_versions}
