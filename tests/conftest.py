"""Shared fixtures for every test folder: a real broker process (tests/broker/conftest.py)
and a real ZooKeeper (tests/zookeeper.py); what tests share that is not a fixture is in
tests/helpers.py."""

from __future__ import annotations

from tests.broker.conftest import broker, broker_factory
from tests.zookeeper import zookeeper

__all__ = ["broker", "broker_factory", "zookeeper"]
