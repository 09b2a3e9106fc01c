"""Metadata (3) and DescribeCluster (60): brokers, topics, partitions, leaders.

Metadata may create topics it is asked about when both the request and
``auto.create.topics.enable`` allow it.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from kbroker.coordinator.records import OFFSETS_TOPIC
from kbroker.errors import TopicError
from kbroker.metadata_types import TopicMetadata
from kbroker.network.request import RequestContext
from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DescribeClusterResponse
from kbroker.protocol.messages.core import MetadataResponse
from kbroker.topics import INTERNAL_TOPICS

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


def _error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID = ZERO_UUID) -> Any:
    return Topic(error_code=code, name=name, topic_id=topic_id, is_internal=False, partitions=[])


def handle_metadata(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    known = broker.metadata_cache.topics()
    topics: list[Any] = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        topics = [_topic_entry(t) for _, t in sorted(known.items())]
    else:
        auto_create = request.allow_auto_topic_creation and broker.config.get_bool(
            "auto.create.topics.enable"
        )
        for wanted in requested:
            name = wanted.name
            if name is None:
                found = broker.metadata_cache.topic_by_id(wanted.topic_id)
                topics.append(
                    _topic_entry(found)
                    if found
                    else _error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id)
                )
                continue
            topic = known.get(name)
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
    cache = broker.metadata_cache
    return MetadataResponse(
        throttle_time_ms=0,
        # Each broker as reached through the listener this request came by.
        brokers=[
            MetadataResponse.Broker(node_id=b.broker_id, host=host, port=port, rack=b.rack)
            for b, host, port in cache.alive_on(ctx.listener)
        ],
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=topics,
    )


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
        endpoint_type=1,
        cluster_id=broker.metadata_cache.cluster_id,
        controller_id=cache.controller_id,
        brokers=[
            DescribeClusterResponse.Broker(broker_id=b.broker_id, host=host, port=port, rack=b.rack)
            for b, host, port in cache.alive_on(ctx.listener)
        ],
    )


HANDLERS = {ApiKey.METADATA: handle_metadata, ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster}
