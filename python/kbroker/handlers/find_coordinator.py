"""FindCoordinator (10): which broker coordinates a group or a transactional id.

v0-3 ask about one key, v4+ about several (``coordinator_keys``). A group is
coordinated by the leader of its partition of ``__consumer_offsets``, a
transactional id (key type 1) by the leader of its partition of
``__transaction_state`` (on a single node, this broker); asking creates the
topic on first use (COORDINATOR_NOT_AVAILABLE until it has leaders). With an
authorizer a group needs Describe on it (GROUP_AUTHORIZATION_FAILED), a
transactional id Describe on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as
in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.coordinator.records import OFFSETS_TOPIC, partition_for
from kbroker.handlers.authorization import GROUP, TRANSACTIONAL_ID, Op, authorize
from kbroker.metadata.cache import BrokerInfo
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import FindCoordinatorResponse
from kbroker.txn.log import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from kbroker.broker import Broker

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

Coordinator = FindCoordinatorResponse.Coordinator


def _partition_leader(broker: Broker, key: str, topic_name: str) -> BrokerInfo | None:
    """The live broker leading ``key``'s partition of ``topic_name`` (an internal topic)."""
    cache = broker.metadata_cache
    topic = cache.topic(topic_name)
    if topic is None or not topic.partitions:
        return None
    state = topic.partitions.get(partition_for(key, len(topic.partitions)))
    return None if state is None or state.leader < 0 else cache.broker(state.leader)


def _transaction_check(broker: Broker, transactional_id: str) -> ErrorCode:
    """NONE when this broker coordinates the id (or is loading it), else why not."""
    coordinator = broker.txn_coordinator
    if not coordinator.ensure_topic():
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return coordinator.coordination_error(transactional_id)


def _find(broker: Broker, ctx: RequestContext, key: str, key_type: int) -> Any:
    """The coordinator of ``key``, as reached through the request's listener."""
    ep = broker.listeners.advertised[ctx.listener]
    code, message = ErrorCode.NONE, None
    if key_type == KEY_TYPE_GROUP and not authorize(broker, ctx, Op.DESCRIBE, GROUP, key):
        code, message = ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    elif key_type == KEY_TYPE_TRANSACTION and not authorize(
        broker, ctx, Op.DESCRIBE, TRANSACTIONAL_ID, key
    ):
        code, message = (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "Transactional Id authorization failed.",
        )
    elif key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        code, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    else:
        if key_type == KEY_TYPE_GROUP:
            check = broker.coordinator.check(key, allow_empty=True)
            topic, what = OFFSETS_TOPIC, "group"
        else:
            check = _transaction_check(broker, key)
            topic, what = TRANSACTION_STATE_TOPIC, "transaction"
        if check == ErrorCode.NOT_COORDINATOR and broker.cluster is not None:
            # Another broker leads the key's partition of the internal topic.
            leader = _partition_leader(broker, key, topic)
            address = None if leader is None else leader.address(ctx.listener)
            if leader is not None and address is not None:
                return Coordinator(
                    key=key,
                    node_id=leader.broker_id,
                    host=address[0],
                    port=address[1],
                    error_code=ErrorCode.NONE,
                    error_message=None,
                )
            check = ErrorCode.COORDINATOR_NOT_AVAILABLE
        # A coordinator still loading the group's partition is the coordinator.
        if check not in (ErrorCode.NONE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            code, message = check, f"the {what} coordinator is not available"
    if code != ErrorCode.NONE:
        return Coordinator(
            key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message
        )
    return Coordinator(
        key=key,
        node_id=broker.broker_id,
        host=ep.host,
        port=ep.port,
        error_code=code,
        error_message=None,
    )


def handle_find_coordinator(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else KEY_TYPE_GROUP
    if version >= 4:
        found = [_find(broker, ctx, key, key_type) for key in request.coordinator_keys]
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=found)
    one = _find(broker, ctx, request.key, key_type)
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=one.error_code,
        error_message=one.error_message,
        node_id=one.node_id,
        host=one.host,
        port=one.port,
    )


HANDLERS = {ApiKey.FIND_COORDINATOR: handle_find_coordinator}
