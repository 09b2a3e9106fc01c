"""A broker that has just joined a cluster, before the controller's first UpdateMetadata
reaches it: its Metadata answer names it (it is serving) rather than no broker, so a
client that bootstrapped through it can send it requests meant for its broker id.

librdkafka's requests to a broker id (DescribeConfigs of a BROKER resource, say) wait
until that broker appears in metadata, and look again only when a broker's state
changes: told of no broker, such a request waits for the next periodic metadata refresh
(5 minutes). Broker 1, the controller, is paused while broker 2 starts, so broker 2
serves for a while with no UpdateMetadata (until broker 1's session expires and broker 2
takes over as controller). Kafka 3.9.1 answers with no broker in that window, and the
same request waits there too (this test, run against Kafka, fails at that wait).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from kbroker.tools.client import BrokerClient
from tests.cluster.nodes import KbrokerNode, cluster, kbroker_node_settings
from tests.helpers import metadata
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)


def test_a_broker_with_no_metadata_yet_names_itself(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/before-controller-{uuid.uuid4().hex[:8]}"
    with cluster("kbroker", zookeeper.connect, chroot, tmp_path, size=1) as c:
        first = c.nodes[1]
        second = KbrokerNode(
            2, zookeeper.connect + chroot, tmp_path / "b2", kbroker_node_settings([])
        )
        first.pause()
        try:
            second.launch()
            second.wait_started()
            started = time.monotonic()
            with BrokerClient(second.bootstrap, 10) as client:
                answer = metadata(client, [])
            named = sorted(b.node_id for b in answer.brokers)
            # Before UpdateMetadata: itself; after (broker 1 still registered): both.
            assert 2 in named, named
            admin = AdminClient({"bootstrap.servers": second.bootstrap})
            resource = ConfigResource(ResourceType.BROKER, "2")
            described = admin.describe_configs([resource])[resource].result(30)
            assert described["broker.id"].value == "2"
            print(f"described after {time.monotonic() - started:.1f}s; first answer named {named}")
        finally:
            first.resume()
            second.kill()
