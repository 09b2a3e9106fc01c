"""Finalized features (KIP-584) across a cluster: group.version through Kafka's own tool
(kafka-features, Kafka 4.1.1's FeatureCommand) on three nodes, Apache Kafka 4.1.1 in KRaft mode
first (Kafka 3.9.1 in ZooKeeper mode supports no feature), then three ``kbroker serve
--zookeeper``: every node follows a downgrade and an upgrade asked through any node, the
consumer group protocol is refused on every node at level 0 and served at level 1, and the
levels outlive the kill -9 of the controller.

And the rule that keeps a cluster whole, Kafka 3.9.1 first: a broker does not start while
/feature finalizes a level it cannot serve.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import ApiVersionsRequest
from kbroker.protocol.messages.group import ConsumerGroupDescribeRequest
from kbroker.tools.client import BrokerClient
from tests.broker.test_features import consumer_outcome, features_tool
from tests.cluster.kafka_kraft import kraft_cluster
from tests.cluster.kafka_zk import prepare_kafka_zk_broker
from tests.cluster.nodes import cluster
from tests.helpers import KBROKER, free_port, wait_for
from tests.zookeeper import zk_session

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@dataclass
class Nodes:
    system: str
    by_id: dict[int, Any]
    # kbroker only: a client on the cluster's chroot.
    zk: KazooClient | None = None

    def live(self) -> list[str]:
        return [n.bootstrap for n in self.by_id.values() if n.alive]


@pytest.fixture(params=["kafka4", "kbroker"])
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Nodes]:
    if request.param == "kafka4":
        with kraft_cluster(tmp_path) as kraft:
            yield Nodes("kafka4", dict(kraft.nodes))
        return
    zookeeper = request.getfixturevalue("zookeeper")
    chroot = f"/features-{uuid.uuid4().hex[:8]}"
    with cluster("kbroker", zookeeper.connect, chroot, tmp_path) as kbroker:
        zk = kbroker.zk()
        try:
            yield Nodes("kbroker", dict(kbroker.nodes), zk)
        finally:
            zk.stop()
            zk.close()


def levels_everywhere(nodes: Nodes, level: int) -> dict[str, int]:
    """Waits until every live node finalizes group.version at ``level``: bootstrap -> the
    finalized epoch each one advertises."""
    epochs: dict[str, int] = {}

    def follow() -> bool:
        for bootstrap in nodes.live():
            finalized, apis, epoch = api_versions_with_epoch(bootstrap)
            # Advertised at either level: at 0 they are refused, as Kafka 4.1.1 does.
            assert apis == {68, 69}
            if finalized.get("group.version", 0) != level:
                return False
            epochs[bootstrap] = epoch
        return True

    wait_for(follow, f"every node at group.version {level}", timeout=20)
    return epochs


def api_versions_with_epoch(bootstrap: str) -> tuple[dict[str, int], set[int], int]:
    """ApiVersions v4: finalized levels, which of APIs 68/69 are advertised, and the epoch."""
    with BrokerClient(bootstrap) as client:
        r = client.request(
            ApiKey.API_VERSIONS,
            4,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    apis = {k.api_key for k in r.api_keys if k.api_key in (68, 69)}
    return finalized, apis, r.finalized_features_epoch


def describe_error(bootstrap: str, group: str) -> int:
    with BrokerClient(bootstrap) as client:
        r = client.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
        )
    (described,) = r.groups
    return int(described.error_code)


def tool(bootstrap: str, *args: str) -> str:
    out = features_tool(bootstrap, *args)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    return out.stdout.strip()


def test_group_version_across_the_cluster(nodes: Nodes) -> None:
    first = levels_everywhere(nodes, 1)
    if nodes.system == "kbroker":
        # One epoch everywhere: the /feature znode's version, as Kafka 3.x's brokers report it.
        assert set(first.values()) == {0}
        assert nodes.zk is not None
        data, _stat = nodes.zk.get("/feature")
        assert json.loads(data) == {
            "features": {"group.version": {"max_version_level": 1}},
            "version": 2,
            "status": 1,
        }
        for broker_id in nodes.by_id:
            registration = json.loads(nodes.zk.get(f"/brokers/ids/{broker_id}")[0])
            assert registration["features"] == {
                "group.version": {"min_version": 0, "max_version": 1}
            }
    bootstraps = nodes.live()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ",".join(bootstraps)})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=30)

    # Asked through the last node (on kbroker, not always the controller: the tool then goes
    # to the one Metadata names).
    assert tool(bootstraps[-1], "downgrade", "--feature", "group.version=0") == (
        "group.version was downgraded to 0."
    )
    levels_everywhere(nodes, 0)
    for bootstrap in bootstraps:
        assert describe_error(bootstrap, "g") == ErrorCode.UNSUPPORTED_VERSION
    assert consumer_outcome(",".join(bootstraps), topic) in ("_FATAL", "UNSUPPORTED_VERSION")

    assert tool(bootstraps[0], "upgrade", "--feature", "group.version=1") == (
        "group.version was upgraded to 1."
    )
    after = levels_everywhere(nodes, 1)
    if nodes.system == "kbroker":
        assert set(after.values()) == {2}  # two writes since the znode was made
    # Served again: by the group's coordinator (the others send the client there).
    answers = [describe_error(bootstrap, "g") for bootstrap in bootstraps]
    assert set(answers) <= {ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.NOT_COORDINATOR}, answers
    assert ErrorCode.GROUP_ID_NOT_FOUND in answers
    assert consumer_outcome(",".join(bootstraps), topic) == "assigned"

    # The controller (kbroker: /controller; KRaft: any one of the three voters) dies: the
    # level stays, and the cluster still takes updates.
    victim = 1
    if nodes.zk is not None:
        victim = json.loads(nodes.zk.get("/controller")[0])["brokerid"]
    nodes.by_id[victim].kill()
    levels_everywhere(nodes, 1)
    survivors = ",".join(nodes.live())
    deadline = time.monotonic() + 60
    while True:
        out = features_tool(survivors, "downgrade", "--feature", "group.version=0", "--dry-run")
        if out.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)  # until a new controller is elected and known
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert out.stdout.strip() == "group.version can be downgraded to 0."
    levels_everywhere(nodes, 1)
    if nodes.zk is not None:
        # A level written behind the controller's back that no broker can serve: each one
        # says so and keeps what it had (Kafka's brokers would exit).
        nodes.zk.set("/feature", TOO_HIGH)
        for node in nodes.by_id.values():
            if node.alive:
                wait_for(
                    lambda node=node: "group.version at level 7" in node.output(),
                    f"broker {node.broker_id} to refuse /feature",
                )
        levels_everywhere(nodes, 1)


def finalize(zk_connect: str, chroot: str, data: bytes) -> None:
    with zk_session(zk_connect + chroot) as zk:
        zk.create("/feature", data)


# group.version at a level no broker here supports.
TOO_HIGH = b'{"features":{"group.version":{"max_version_level":7}},"version":2,"status":1}'


@pytest.mark.parametrize("system", ["kafka", "kbroker"])
def test_a_broker_that_cannot_serve_the_finalized_levels_does_not_start(
    system: str, zookeeper: Any, tmp_path: Path
) -> None:
    chroot = f"/unservable-{uuid.uuid4().hex[:8]}"
    if system == "kafka":
        kafka = prepare_kafka_zk_broker(zookeeper.connect, chroot, tmp_path / "kafka")
        # (prepare wrote Kafka 3.9.1's own /feature; make it finalize something.)
        with zk_session(zookeeper.connect + chroot) as zk:
            zk.set("/feature", TOO_HIGH)
        kafka.launch()
        try:
            assert kafka.proc is not None
            code = kafka.proc.wait(timeout=90)
        finally:
            kafka.kill()
        assert code != 0
        assert "feature compatibility checks failed" in kafka.output(200)
        return
    finalize(zookeeper.connect, chroot, TOO_HIGH)
    data = tmp_path / "data"
    data.mkdir()
    done = subprocess.run(
        [
            *KBROKER,
            "serve",
            "--data-dir",
            str(data),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--broker-id",
            "1",
            "--zookeeper",
            f"{zookeeper.connect}{chroot}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "group.version at level 7 (this broker supports 0-1)" in done.stderr
