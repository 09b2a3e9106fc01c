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

from pathlib import Path

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
    parser.addoption(
        "--alone",
        choices=("only", "skip"),
        default=None,
        help="only the tests that need the machine to themselves (tests/bench, tests/faults),"
        " or every test but those (tests/run.sh runs the others two at a time)",
    )


# Tests that must not share the machine with other tests: the benchmarks measure CPU and
# time, and the fault tests take fixed addresses in network namespaces and check that no
# namespace of theirs is left on the machine.
ALONE = ("bench", "faults")


def needs_the_machine_alone(item: pytest.Item) -> bool:
    here = Path(__file__).parent
    if not item.path.is_relative_to(here):
        return False
    parts = item.path.relative_to(here).parts
    return len(parts) > 1 and parts[0] in ALONE


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
    alone = config.getoption("--alone")
    drop_reference = not config.getoption("--kafka-reference")

    def left_out(item: pytest.Item) -> bool:
        if drop_reference and is_kafka_reference_run(item):
            return True
        return alone is not None and needs_the_machine_alone(item) != (alone == "only")

    dropped = [item for item in items if left_out(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not left_out(item)]
