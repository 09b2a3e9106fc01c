"""DescribeLogDirs (35) on a real broker, at every version Kafka 3.x/4.x clients use: the data
directory, each partition's size on disk, and (v4) the file system's total and usable bytes."""

from __future__ import annotations

import os

from confluent_kafka import Producer

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import CreateTopicsRequest, DescribeLogDirsRequest
from kbroker.tools.client import BrokerClient
from tests.helpers import BrokerProcess

T = DescribeLogDirsRequest.Topic


def _sizes(result: object) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.partition_size
        for t in result.topics  # type: ignore[attr-defined]
        for p in t.partitions
    }


def test_describe_log_dirs_every_version(broker: BrokerProcess) -> None:
    with BrokerClient(broker.bootstrap, timeout=20) as client:
        assert client.broker_versions()[ApiKey.DESCRIBE_LOG_DIRS] == (1, 4)
        created = client.request(
            ApiKey.CREATE_TOPICS,
            5,
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.Topic(
                        name=name,
                        num_partitions=2,
                        replication_factor=1,
                        assignments=[],
                        configs=[],
                    )
                    for name in ("a", "b")
                ]
            ),
        )
        assert [t.error_code for t in created.topics] == [0, 0]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for _ in range(10):
            producer.produce("a", value=b"x" * 100, partition=1)
        assert producer.flush(20) == 0
        on_disk = sum(
            f.stat().st_size for f in (broker.data_dir / "a-1").iterdir() if f.suffix == ".log"
        )
        assert on_disk > 1000

        for version in range(1, 5):
            every = client.request(
                ApiKey.DESCRIBE_LOG_DIRS, version, DescribeLogDirsRequest(topics=None)
            )
            if version >= 3:
                assert every.error_code == ErrorCode.NONE
            [result] = every.results
            assert result.error_code == ErrorCode.NONE
            assert result.log_dir == str(broker.data_dir.resolve())
            assert _sizes(result) == {("a", 0): 0, ("a", 1): on_disk, ("b", 0): 0, ("b", 1): 0}
            assert all(
                (p.offset_lag, p.is_future_key) == (0, False)
                for t in result.topics
                for p in t.partitions
            )
            if version >= 4:
                fs = os.statvfs(broker.data_dir)
                assert result.total_bytes == fs.f_blocks * fs.f_frsize
                assert 0 < result.usable_bytes <= result.total_bytes
            else:
                assert (result.total_bytes, result.usable_bytes) == (-1, -1)

            # Only what was asked for; partitions and topics the broker lacks are left out.
            some = client.request(
                ApiKey.DESCRIBE_LOG_DIRS,
                version,
                DescribeLogDirsRequest(
                    topics=[T(topic="a", partitions=[1, 7]), T(topic="nope", partitions=[0])]
                ),
            )
            assert _sizes(some.results[0]) == {("a", 1): on_disk}
