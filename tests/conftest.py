"""Shared fixtures for every test folder: a real broker process (tests/broker/conftest.py)
and a real ZooKeeper (tests/zookeeper.py); what tests share that is not a fixture is in
tests/helpers.py.

Reference runs: a test marked ``kafka`` and parametrized by system runs once against
Apache Kafka alone (3.9.1 as "kafka"; 4.1.1 KRaft as "kafka4", the reference for KIP-848
consumer groups), which proves the test itself, and once against kbroker. The
Kafka-alone runs test no kbroker code, so they are left out unless ``--kafka-reference``
is given (``tests/run.sh --kafka-reference``); the kbroker runs, and every test where
kbroker and Kafka run together, always run.
"""

from __future__ import annotations

import pytest

from tests.broker.conftest import broker, broker_factory
from tests.zookeeper import zookeeper

__all__ = ["broker", "broker_factory", "zookeeper"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kafka-reference",
        action="store_true",
        help="also run the kafka-marked tests' runs against Apache Kafka alone (3.9.1, 4.1.1)",
    )


# The system parameters that are Apache Kafka alone.
REFERENCE_SYSTEMS = ("kafka", "kafka4")


def is_kafka_reference_run(item: pytest.Item) -> bool:
    """A kafka-marked test's run with the system parameter "kafka" or "kafka4" (no kbroker
    in it)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or item.get_closest_marker("kafka") is None:
        return False
    return any(system in callspec.params.values() for system in REFERENCE_SYSTEMS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--kafka-reference"):
        return
    reference = [item for item in items if is_kafka_reference_run(item)]
    if reference:
        config.hook.pytest_deselected(items=reference)
        items[:] = [item for item in items if not is_kafka_reference_run(item)]
