"""`MetadataCache`: the cluster as this broker last heard of it, for request handlers to read.

Handlers (Metadata, Fetch by topic id, FindCoordinator, admin requests) read
topics, partition states, brokers and the controller here and never write. On a
single node the local store (`kbroker.metadata.store.LocalMetadataStore`) writes
each change as it records it, and the broker puts itself in as the one live
broker and controller; in a cluster the controller's UpdateMetadata requests
write (`update_from_controller`). One dict per fact, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kbroker.metadata.model import PartitionState, TopicMetadata
from kbroker.metadata.topics import INTERNAL_TOPICS

# The leader a controller gives the partitions of a topic being deleted (Kafka's
# LeaderDuringDelete): the partition leaves the cache.
LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker, and where each of its listeners is reached."""

    broker_id: int
    # (listener name, host, port) of each advertised listener.
    endpoints: tuple[tuple[str, str, int], ...]
    rack: str | None = None

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where ``listener`` of this broker is reached, or None when it has no such listener."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


class MetadataCache:
    def __init__(self) -> None:
        self.cluster_id = ""
        self.controller_id = -1
        self._topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        # Grows whenever a topic is added, replaced or removed (not on partition changes):
        # readers cache what they derive from the topic names under it.
        self.topics_version = 0

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

    def alive_on(self, listener: str) -> list[tuple[BrokerInfo, str, int]]:
        """Each live broker that has ``listener``, with that listener's host and port (what
        a client that came through ``listener`` is told, as Kafka tells it)."""
        out = []
        for b in self.alive_brokers():
            address = b.address(listener)
            if address is not None:
                out.append((b, *address))
        return out

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    # -- writes (the metadata backend only) -------------------------------------------

    def put_topic(self, topic: TopicMetadata) -> None:
        old = self._topics.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self._by_id.pop(old.topic_id, None)
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        self.topics_version += 1

    def remove_topic(self, name: str) -> TopicMetadata | None:
        topic = self._topics.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)
            self.topics_version += 1
        return topic

    def put_broker(self, broker: BrokerInfo) -> None:
        self._brokers[broker.broker_id] = broker

    def remove_broker(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)

    # -- the controller's view (cluster mode) ------------------------------------------

    def update_from_controller(
        self,
        controller_id: int,
        brokers: Iterable[BrokerInfo],
        partitions: Iterable[ControllerPartitionState],
    ) -> list[tuple[str, int]]:
        """Applies an UpdateMetadata: the live brokers replace the known ones, each
        partition's state replaces its old one, and partitions led by
        LEADER_DURING_DELETE leave (a topic with none left goes). Returns the
        partitions removed."""
        self.controller_id = controller_id
        self._brokers = {b.broker_id: b for b in brokers}
        removed: list[tuple[str, int]] = []
        for p in partitions:
            topic = self._topics.get(p.topic)
            if p.state.leader == LEADER_DURING_DELETE:
                if topic is not None and topic.partitions.pop(p.partition, None) is not None:
                    removed.append((p.topic, p.partition))
                    if not topic.partitions:
                        self.remove_topic(p.topic)
                continue
            if topic is None or (p.topic_id is not None and topic.topic_id != p.topic_id):
                topic_id = p.topic_id if p.topic_id is not None else uuid.uuid4()
                topic = TopicMetadata(p.topic, topic_id, {}, internal=p.topic in INTERNAL_TOPICS)
                self.put_topic(topic)
            topic.partitions[p.partition] = p.state
        return removed


@dataclass(frozen=True, slots=True)
class ControllerPartitionState:
    """One partition of an UpdateMetadata request."""

    topic: str
    partition: int
    state: PartitionState
    # Absent before UpdateMetadata v7.
    topic_id: uuid.UUID | None = None
