"""Groups that change protocol while they have members, on Apache Kafka 4.1.1 (KRaft) and
kbroker, both with their default ``group.consumer.migration.policy`` (bidirectional).

The rolling upgrade of an application from the classic protocol to the consumer group
protocol (KIP-848), and back: librdkafka consumers of each protocol share one group. A
consumer-protocol member joining a classic group turns it into a consumer group whose
classic members keep consuming; a classic member can join a consumer group; when the last
consumer-protocol member leaves, the group is classic again and its members take over
every partition. Both eager (range) and cooperative (cooperative-sticky) classic members.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.systems import KAFKA4_SYSTEMS, single_node

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4


@pytest.fixture(scope="module", params=KAFKA4_SYSTEMS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp(request.param)
    settings = {"group.initial.rebalance.delay.ms": "0"}
    with single_node(request.param, None, root, settings) as bootstrap:
        yield bootstrap


def _topic(bootstrap: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def _owned(c: Consumer) -> list[int]:
    return sorted(tp.partition for tp in c.assignment())


def _until(
    consumers: list[Consumer], done: Callable[[], bool], what: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: {[_owned(c) for c in consumers]}"
        for c in consumers:
            c.poll(0.1)


def _group_type(bootstrap: str, group: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(30)
    return str(described.type.name)


def _consumers(bootstrap: str, topic: str, strategy: str) -> tuple[str, Consumer, Consumer]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    base = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    classic = Consumer(
        {
            **base,
            "group.protocol": "classic",
            "session.timeout.ms": 10000,
            "partition.assignment.strategy": strategy,
        }
    )
    modern = Consumer({**base, "group.protocol": "consumer"})
    return group, classic, modern


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_classic_group_is_upgraded_and_downgraded_with_its_members(
    node: str, strategy: str
) -> None:
    topic = _topic(node)
    group, classic, modern = _consumers(node, topic, strategy)
    try:
        classic.subscribe([topic])
        _until([classic], lambda: len(_owned(classic)) == PARTITIONS, "classic alone")
        assert _group_type(node, group) == "CLASSIC"
        modern.subscribe([topic])
        _until(
            [classic, modern],
            lambda: len(_owned(classic)) == 2 and len(_owned(modern)) == 2,
            "sharing after the upgrade",
        )
        assert set(_owned(classic)).isdisjoint(_owned(modern))
        assert _group_type(node, group) == "CONSUMER"
        modern.close()
        _until([classic], lambda: len(_owned(classic)) == PARTITIONS, "classic after the downgrade")
        assert _group_type(node, group) == "CLASSIC"
    finally:
        classic.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_classic_member_joins_a_consumer_group(node: str, strategy: str) -> None:
    topic = _topic(node)
    group, classic, modern = _consumers(node, topic, strategy)
    try:
        modern.subscribe([topic])
        _until([modern], lambda: len(_owned(modern)) == PARTITIONS, "consumer-protocol alone")
        classic.subscribe([topic])
        _until(
            [classic, modern],
            lambda: len(_owned(classic)) == 2 and len(_owned(modern)) == 2,
            "sharing in the consumer group",
        )
        assert set(_owned(classic)).isdisjoint(_owned(modern))
        assert _group_type(node, group) == "CONSUMER"
        classic.close()
        _until([modern], lambda: len(_owned(modern)) == PARTITIONS, "after the classic one left")
        assert _group_type(node, group) == "CONSUMER"
    finally:
        modern.close()
