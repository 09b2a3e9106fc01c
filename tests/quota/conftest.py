"""One kbroker node and one Apache Kafka 3.9.1 broker shared by the tests of this folder
that run against both systems (the ``bootstrap`` fixture, parametrized by system)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.quota.systems import SYSTEMS, kafka_node, kbroker_node
from tests.zookeeper import ZooKeeperServer


@pytest.fixture(scope="package", params=SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
        with kafka_node(zookeeper, root) as b:
            yield b
    else:
        with kbroker_node(root) as b:
            yield b
