"""Shared fixtures: a real broker process (see tests/broker/conftest.py) for every test folder."""

from __future__ import annotations

from tests.broker.conftest import broker, broker_factory

__all__ = ["broker", "broker_factory"]
