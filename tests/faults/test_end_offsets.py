"""The fault harness's end offsets (bench/faults/workload.py ``end_offsets``) are high
watermarks, also while a transaction is open: a final read to the last stable offset
would stop short of records already acknowledged (one kbroker, a transactional producer
holding a transaction open)."""

from __future__ import annotations

from pathlib import Path

from bench.faults.workload import end_offsets
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers import BrokerProcess, create_topic, topic_name


def test_end_offsets_are_high_watermarks_past_an_open_transaction(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = topic_name("ends")
        create_topic(broker.bootstrap, topic, 1)
        plain = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        plain.produce(topic, b"before", partition=0)
        assert plain.flush(30) == 0
        txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, f"open{i}".encode(), partition=0)
        assert txn.flush(30) == 0
        # What a read_committed client is told: the transaction's first offset.
        committed = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "x",
                "isolation.level": "read_committed",
            }
        )
        try:
            _, stable = committed.get_watermark_offsets(TopicPartition(topic, 0), 10, cached=False)
        finally:
            committed.close()
        assert stable == 1
        assert end_offsets(broker.bootstrap, topic, 1) == {0: 4}
        txn.abort_transaction(30)
    finally:
        broker.kill()
