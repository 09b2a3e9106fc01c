"""A real kbroker process, started through the CLI, for tests that use real clients."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[callable]:  # type: ignore[valid-type]
    started: list[BrokerProcess] = []

    def make(*settings: str, data_dir: Path | None = None) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}")
        b.start(*settings)
        started.append(b)
        return b

    yield make
    for b in started:
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:  # type: ignore[no-untyped-def]
    return broker_factory()  # type: ignore[no-any-return]


os.environ.setdefault("PYTHONUNBUFFERED", "1")
