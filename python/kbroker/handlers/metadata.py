"""Metadata (3) and DescribeCluster (60): brokers, topics, partitions, leaders.

Metadata may create topics it is asked about when both the request and
``auto.create.topics.enable`` allow it.

With an authorizer, as Kafka: a topic the principal may not Describe is left
out of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when
named (by id: with the id, without the name); creating a missing topic also
needs Create on the cluster or on the topic. The authorized-operations
fields, when asked for, carry what the principal may do (Describe on the
cluster is needed to see the cluster's); otherwise Kafka's INT32_MIN.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from kbroker.coordinator.records import OFFSETS_TOPIC
from kbroker.errors import TopicError
from kbroker.handlers.authorization import (
    CLUSTER,
    TOPIC,
    Op,
    authorize,
    authorize_cluster,
    authorized_operations,
    refused,
)
from kbroker.metadata.cache import BrokerInfo
from kbroker.metadata.model import TopicMetadata
from kbroker.metadata.topics import INTERNAL_TOPICS
from kbroker.network.request import RequestContext
from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode
from kbroker.protocol.messages.admin import INT32_MIN, DescribeClusterResponse
from kbroker.protocol.messages.core import MetadataResponse
from kbroker.security.acl import CLUSTER_NAME

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

Topic = MetadataResponse.Topic
Partition = MetadataResponse.Topic.Partition


def _topic_entry(topic: TopicMetadata) -> Any:
    return Topic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal or topic.name in INTERNAL_TOPICS,
        partitions=[
            Partition(
                # Kafka's answer for a partition whose leader is gone: clients wait and retry.
                error_code=ErrorCode.NONE if s.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p,
                leader_id=s.leader,
                leader_epoch=s.leader_epoch,
                replica_nodes=s.replicas,
                isr_nodes=s.isr,
                offline_replicas=s.offline_replicas,
            )
            for p, s in sorted(topic.partitions.items())
        ],
    )


def _error_entry(
    name: str | None, code: ErrorCode, topic_id: uuid.UUID = ZERO_UUID, internal: bool = False
) -> Any:
    return Topic(error_code=code, name=name, topic_id=topic_id, is_internal=internal, partitions=[])


def _may_create(broker: Broker, ctx: RequestContext, name: str) -> bool:
    return authorize_cluster(broker, ctx, Op.CREATE) or authorize(
        broker, ctx, Op.CREATE, TOPIC, name
    )


def handle_metadata(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    known = broker.metadata_cache.topics()
    topics: list[Any] = []
    # Entries whose authorized operations are filled in when asked for (not the refused).
    described: list[Any] = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        names = sorted(known)
        hidden = refused(broker, ctx, Op.DESCRIBE, TOPIC, names)
        topics = [_topic_entry(known[n]) for n in names if n not in hidden]
        described = topics
    else:
        auto_create = request.allow_auto_topic_creation and broker.config.get_bool(
            "auto.create.topics.enable"
        )
        for wanted in requested:
            name = wanted.name
            # By id when an id is given (the Java client leaves the name "" then, not null),
            # as Kafka decides.
            if name is None or (version >= 10 and wanted.topic_id != ZERO_UUID):
                found = broker.metadata_cache.topic_by_id(wanted.topic_id)
                if found is None:
                    topics.append(_error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id))
                elif not authorize(broker, ctx, Op.DESCRIBE, TOPIC, found.name):
                    # Topic ids are not secret; the name is.
                    topics.append(
                        _error_entry(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, found.topic_id)
                    )
                else:
                    topics.append(_topic_entry(found))
                    described.append(topics[-1])
                continue
            if not authorize(broker, ctx, Op.DESCRIBE, TOPIC, name):
                # Whether it exists is not told.
                topics.append(_error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            topic = known.get(name)
            if topic is None and auto_create and not _may_create(broker, ctx, name):
                topics.append(
                    _error_entry(
                        name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, internal=name in INTERNAL_TOPICS
                    )
                )
                continue
            if topic is None and name == OFFSETS_TOPIC:
                # Internal topics are made by their owner, with their own settings.
                if broker.coordinator.ensure_offsets_topic():
                    topic = broker.metadata_cache.topics().get(name)
            elif topic is None and auto_create and name not in INTERNAL_TOPICS:
                try:
                    topic = broker.create_topic(name)
                except TopicError as exc:
                    if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                        topic = broker.metadata_cache.topics().get(name)
                    else:
                        topics.append(_error_entry(name, exc.code))
                        continue
            if topic is None:
                topics.append(_error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topics.append(_topic_entry(topic))
            described.append(topics[-1])
    cluster_operations = INT32_MIN
    if version >= 8:
        if 8 <= version <= 10 and request.include_cluster_authorized_operations:
            cluster_operations = _cluster_operations(broker, ctx)
        if request.include_topic_authorized_operations:
            for entry in described:
                entry.topic_authorized_operations = authorized_operations(
                    broker, ctx, TOPIC, entry.name
                )
    cache = broker.metadata_cache
    return MetadataResponse(
        throttle_time_ms=0,
        # Each broker as reached through the listener this request came by.
        brokers=[
            MetadataResponse.Broker(node_id=b.broker_id, host=host, port=port, rack=b.rack)
            for b, host, port in _alive_on(broker, ctx.listener)
        ],
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=topics,
        cluster_authorized_operations=cluster_operations,
    )


def _alive_on(broker: Broker, listener: str) -> list[tuple[BrokerInfo, str, int]]:
    """The live brokers a client that came through ``listener`` is told of. Until the
    controller's first UpdateMetadata reaches a broker that has just started in a cluster,
    its cache knows no broker; it then names itself, which is serving, rather than none:
    a client told of no broker waits for one to appear (librdkafka's requests to a broker
    id wait for a change in its brokers' states, which then never comes)."""
    alive = broker.metadata_cache.alive_on(listener)
    if alive:
        return alive
    me = BrokerInfo(
        broker.broker_id,
        broker.advertised_endpoints(),
        broker.config.get_optional_str("broker.rack"),
    )
    address = me.address(listener)
    return [] if address is None else [(me, *address)]


def _cluster_operations(broker: Broker, ctx: RequestContext) -> int:
    """What the principal may do to the cluster; 0 unless it may Describe it, as Kafka."""
    if not authorize_cluster(broker, ctx, Op.DESCRIBE):
        return 0
    return authorized_operations(broker, ctx, CLUSTER, CLUSTER_NAME)


def handle_describe_cluster(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    cache = broker.metadata_cache
    if ctx.api_version >= 1 and request.endpoint_type != 1:
        # Only the brokers' endpoints (type 1) exist; there are no controller listeners.
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints (type 1) are served",
            endpoint_type=request.endpoint_type,
            cluster_id=broker.metadata_cache.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        cluster_authorized_operations=_cluster_operations(broker, ctx)
        if request.include_cluster_authorized_operations
        else INT32_MIN,
        endpoint_type=1,
        cluster_id=broker.metadata_cache.cluster_id,
        controller_id=cache.controller_id,
        brokers=[
            DescribeClusterResponse.Broker(broker_id=b.broker_id, host=host, port=port, rack=b.rack)
            for b, host, port in _alive_on(broker, ctx.listener)
        ],
    )


HANDLERS = {ApiKey.METADATA: handle_metadata, ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster}
