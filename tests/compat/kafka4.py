"""A single node of Apache Kafka 4.1.1 (KRaft, the reference for the consumer group protocol
of KIP-848, which ZooKeeper-mode Kafka lacks) or of kbroker, with the same settings."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from bench.systems import kafka_available, kafka_node

from tests.helpers import BrokerProcess

SYSTEMS = [pytest.param("kafka4", marks=pytest.mark.kafka), "kbroker"]


@contextlib.contextmanager
def node(system: str, root: Path, settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """A fresh node of ``system`` ("kafka4" or "kbroker"): its bootstrap address."""
    settings = {"group.initial.rebalance.delay.ms": "0", **(settings or {})}
    if system == "kafka4":
        if not kafka_available():
            pytest.skip("Apache Kafka 4.1.1 jars are not fetched (bench/kafka/fetch.sh)")
        with kafka_node(root, dict(settings), None, log_path=root / "kafka4.log") as kafka:
            yield kafka.bootstrap
        return
    broker = BrokerProcess(root / "data", extra=[f"{k}={v}" for k, v in settings.items()])
    broker.start()
    try:
        yield broker.bootstrap
        assert "Traceback" not in broker.output()
    finally:
        broker.kill()
