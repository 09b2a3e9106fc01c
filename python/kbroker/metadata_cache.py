"""`MetadataCache`: the cluster as this broker last heard of it, for request handlers to read.

Handlers (Metadata, Fetch by topic id, FindCoordinator, admin requests)
read topics, partition states, brokers and the controller here and never
write. Only the metadata backend writes: today the local store
(`kbroker.metadata.LocalMetadataStore`) as it records each change, in
cluster mode the ZooKeeper backend as it hears of changes. One dict per
fact, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kbroker.metadata_types import PartitionState, TopicMetadata


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker, as clients should reach it."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataCache:
    def __init__(self) -> None:
        self.cluster_id = ""
        self.controller_id = -1
        self._topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._brokers: dict[int, BrokerInfo] = {}

    # -- reads (handlers) ----------------------------------------------------------

    def topics(self) -> Mapping[str, TopicMetadata]:
        return MappingProxyType(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        known = self._topics.get(topic)
        return None if known is None else known.partitions.get(partition)

    def alive_brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.broker_id)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    # -- writes (the metadata backend only) -------------------------------------------

    def put_topic(self, topic: TopicMetadata) -> None:
        old = self._topics.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self._by_id.pop(old.topic_id, None)
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def remove_topic(self, name: str) -> TopicMetadata | None:
        topic = self._topics.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)
        return topic

    def put_broker(self, broker: BrokerInfo) -> None:
        self._brokers[broker.broker_id] = broker

    def remove_broker(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)
