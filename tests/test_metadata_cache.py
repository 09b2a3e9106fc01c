"""MetadataCache as the controller feeds it (UpdateMetadata): live brokers replaced,
partition states replaced, a topic made again with a new id replaced, a deleted topic's
partitions (leader -2) removed, and the topic with them."""

from __future__ import annotations

import uuid

from kbroker.metadata.cache import (
    LEADER_DURING_DELETE,
    BrokerInfo,
    ControllerPartitionState,
    MetadataCache,
)
from kbroker.metadata.model import PartitionState

A = uuid.UUID(int=1)
B = uuid.UUID(int=2)


def state(leader: int, epoch: int = 0, offline: list[int] | None = None) -> PartitionState:
    return PartitionState([1, 2], leader, epoch, [1, 2], 3, offline_replicas=offline or [])


def test_the_controllers_view_replaces_the_caches() -> None:
    cache = MetadataCache()
    removed = cache.update_from_controller(
        1,
        [BrokerInfo(1, (("PLAINTEXT", "h", 1),)), BrokerInfo(2, (("PLAINTEXT", "h", 2),), "r2")],
        [
            ControllerPartitionState("t", 0, state(1), A),
            ControllerPartitionState("t", 1, state(2), A),
            ControllerPartitionState("__consumer_offsets", 0, state(1), B),
        ],
    )
    assert removed == []
    assert cache.controller_id == 1
    assert [b.broker_id for b in cache.alive_brokers()] == [1, 2]
    topic = cache.topic("t")
    assert topic is not None and topic.topic_id == A and sorted(topic.partitions) == [0, 1]
    assert not topic.internal and cache.topic("__consumer_offsets").internal  # type: ignore[union-attr]
    assert cache.topic_by_id(A) is topic

    # Broker 2 died: it leaves, and its replica is reported offline.
    cache.update_from_controller(
        1,
        [BrokerInfo(1, (("PLAINTEXT", "h", 1),))],
        [ControllerPartitionState("t", 1, state(1, 1, [2]), A)],
    )
    assert [b.broker_id for b in cache.alive_brokers()] == [1]
    assert cache.partition_state("t", 1) == state(1, 1, [2])
    assert cache.partition_state("t", 0) == state(1)  # untouched

    # The topic is deleted partition by partition; it goes with its last one.
    gone = PartitionState([1, 2], LEADER_DURING_DELETE, 2, [1, 2], 3)
    assert cache.update_from_controller(
        1, [BrokerInfo(1, (("PLAINTEXT", "h", 1),))], [ControllerPartitionState("t", 0, gone, A)]
    ) == [("t", 0)]
    assert cache.topic("t") is not None
    assert cache.update_from_controller(
        1, [BrokerInfo(1, (("PLAINTEXT", "h", 1),))], [ControllerPartitionState("t", 1, gone, A)]
    ) == [("t", 1)]
    assert cache.topic("t") is None and cache.topic_by_id(A) is None


def test_a_topic_made_again_under_a_new_id_replaces_the_old_one() -> None:
    cache = MetadataCache()
    cache.update_from_controller(1, [], [ControllerPartitionState("t", 0, state(1), A)])
    cache.update_from_controller(1, [], [ControllerPartitionState("t", 0, state(2), B)])
    topic = cache.topic("t")
    assert topic is not None and topic.topic_id == B and cache.topic_by_id(A) is None
    assert topic.partitions[0].leader == 2
