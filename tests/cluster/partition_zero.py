"""Client and on-disk views of partition 0 of a topic on a test cluster, for scenarios
that drive one partition through kills and restarts (test_kip101, test_unclean_election)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster.nodes import Cluster
from tests.cluster.replica_logs import batches_below, partition_dir, segment_files

T = TypeVar("T")


def segment_file(c: Cluster, broker: int, topic: str) -> Path:
    """The first segment file of ``broker``'s replica."""
    return partition_dir(c.nodes[broker].data_dir, topic, 0) / f"{0:020d}.log"


def batches(c: Cluster, broker: int, topic: str, below: int) -> list[bytes]:
    """The record batches of ``broker``'s replica (every segment file) whose offsets
    are all below ``below``."""
    return _settled(
        lambda: [b.data for b in batches_below(c.nodes[broker].data_dir, topic, 0, below)]
    )


def log_bytes(c: Cluster, broker: int, topic: str) -> int:
    """The size of ``broker``'s replica: its segment files together."""
    folder = partition_dir(c.nodes[broker].data_dir, topic, 0)
    return _settled(lambda: sum(p.stat().st_size for p in segment_files(folder)))


def _settled(look: Callable[[], T]) -> T:
    """``look`` at a replica's files, again if the broker deleted one meanwhile."""
    for _ in range(9):
        try:
            return look()
        except FileNotFoundError:
            time.sleep(0.1)
    return look()


def state(c: Cluster, topic: str) -> tuple[int, list[int]]:
    """(leader, sorted ISR) of partition 0, as a live broker answers Metadata."""
    md = AdminClient({"bootstrap.servers": c.live_bootstrap()}).list_topics(topic, timeout=10)
    p = md.topics[topic].partitions.get(0)
    if p is None:  # the answering broker does not know the new topic yet
        return -1, []
    return p.leader, sorted(p.isrs)


def write(c: Cluster, topic: str, values: list[bytes], acks: str = "all") -> list[int]:
    """Produces ``values`` to partition 0; their offsets (all acknowledged)."""
    producer = Producer({"bootstrap.servers": c.live_bootstrap(), "acks": acks, "linger.ms": 2})
    reports: list[tuple[object, int]] = []
    for v in values:
        producer.produce(
            topic, value=v, partition=0, on_delivery=lambda e, m: reports.append((e, m.offset()))
        )
    assert producer.flush(60) == 0
    assert all(e is None for e, _ in reports), reports
    return [o for _, o in reports]


def read(c: Cluster, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": c.live_bootstrap(),
            "group.id": "partition-zero",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.value()))
        # Nothing more than expected.
        m = consumer.poll(1.0)
        assert m is None or m.error() is not None, (m.offset(), m.value())
    finally:
        consumer.close()
    return out
