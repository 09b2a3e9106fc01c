"""One kbroker node and one Apache Kafka node for the whole session, and `run` to use the
CLI against either: the same test proves a command on any Kafka-compatible cluster."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.systems import kafka_available, kafka_node
from click.testing import CliRunner, Result

from kbroker.cli import main
from tests.helpers import BrokerProcess

SYSTEMS = ["kbroker", "kafka"]


@dataclass
class Cluster:
    system: str
    bootstrap: str

    def run(self, *args: str, ok: bool = True) -> Result:
        """``kbroker ARGS --bootstrap-server B`` in process (a real broker on the other side);
        a traceback is never acceptable, and with ``ok`` the exit code must be 0."""
        bootstrap = [] if "-b" in args else ["-b", self.bootstrap]
        result = CliRunner().invoke(main, [*args, *bootstrap, "--timeout", "20"])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        if ok:
            assert result.exit_code == 0, result.output
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def new_topic(self, *args: str) -> str:
        """Creates a topic with a fresh name, and waits until every partition has a leader
        (Kafka's metadata follows its controller a moment later)."""
        name = f"t-{uuid.uuid4().hex[:8]}"
        self.run("topic", "create", name, *args)
        deadline = time.monotonic() + 20
        while True:
            result = self.run("topic", "describe", name, "--json", ok=False)
            if result.exit_code == 0:
                parts = json.loads(result.stdout)["topics"][0]["partitions"]
                if parts and all(p["leader"] is not None for p in parts):
                    return name
            assert time.monotonic() < deadline, f"{name} has no leaders: {result.output}"
            time.sleep(0.2)


@pytest.fixture(scope="session")
def kbroker_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    node = BrokerProcess(tmp_path_factory.mktemp("kbroker") / "data")
    node.start("group.initial.rebalance.delay.ms=0")  # as the Kafka node
    try:
        yield Cluster("kbroker", node.bootstrap)
    finally:
        node.kill()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not kafka_available():
        pytest.skip("Apache Kafka's jars are not fetched (bench/kafka/fetch.sh) or no java")
    root: Path = tmp_path_factory.mktemp("kafka")
    with kafka_node(root, {"num.partitions": "1"}, None, root / "kafka.log") as node:
        yield Cluster("kafka", node.bootstrap)


@pytest.fixture(params=SYSTEMS)
def cluster(request: pytest.FixtureRequest) -> Cluster:
    """The test runs against kbroker and against Apache Kafka."""
    return request.getfixturevalue(f"{request.param}_cluster")  # type: ignore[no-any-return]
