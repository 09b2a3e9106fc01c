"""bench.wire on a three-broker cluster (a real ZooKeeper, real brokers): the generator finds
each partition's leader and writes and reads every partition on connections to that
leader; what it counts is what a real client (confluent-kafka) reads back. Apache Kafka
3.9.1 in ZooKeeper mode first (``--kafka-reference``: it proves the test), then kbroker."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.loadgen import create_topic

from bench import wire
from tests.bench.test_wire import _read_back
from tests.cluster.nodes import SYSTEMS, Cluster, cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture(params=SYSTEMS)
def three(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    chroot = f"/wire-{request.param}-{uuid.uuid4().hex[:8]}"
    with cluster(request.param, zookeeper.connect, chroot, tmp_path) as c:
        yield c


@pytest.mark.parametrize("replicas,acks", [(1, 1), (3, -1)])
def test_every_leader_gets_its_partitions_and_every_acknowledged_record_is_there(
    three: Cluster, replicas: int, acks: int
) -> None:
    topic, partitions = f"spread-rf{replicas}", 6
    config = {"min.insync.replicas": "2"} if replicas == 3 else None
    create_topic(three.bootstrap, topic, partitions, replicas, config, timeout=60)
    info = wire.describe_topic(three.bootstrap, topic)
    assert len(info.by_leader()) == 3, info.leaders  # the leaders are spread over the brokers
    row, result = wire.produce(
        three.bootstrap,
        topic,
        seconds=60,
        max_records=6 * 2 * 100,
        record_bytes=200,
        records_per_batch=100,
        partitions_per_request=2,
        acks=acks,
        connections=1,
        in_flight=2,
    )
    assert row["errors"] == 0 and row["fatal"] is None, json.dumps(row)
    assert row["brokers"] == 3 and row["connections"] == 3
    assert row["records"] == 1200
    assert result.acked_by_partition == dict.fromkeys(range(partitions), 200)

    got = _read_back(three.bootstrap, topic, partitions, row["records"])
    assert Counter(p for p, _ in got) == result.acked_by_partition

    crow, cresult = wire.consume(three.bootstrap, topic, connections=1, timeout=60)
    assert crow["complete"] and crow["errors"] == 0 and crow["brokers"] == 3, crow
    assert crow["records"] == crow["offsets"] == 1200
    assert cresult.records_by_partition == result.acked_by_partition
