"""Three brokers secured end to end: SASL_SSL between brokers and for clients, no PLAINTEXT.

Each broker has two listeners, CLIENT and INTERNAL, both SASL_SSL
(tests/security/sasl_ssl.py): brokers reach each other through INTERNAL with
PLAIN and their own user name and password (replica fetchers, the controller's
requests, AlterPartition, controlled shutdown), clients come through CLIENT.
The scenario is test_replication.py's, on such a cluster: topics of three
replicas and min.insync.replicas 2, an idempotent acks=all producer and a
consumer group over SASL_SSL, while the leader of partition 0 and then the
controller are killed (kill -9); nothing acknowledged is lost, nothing is
duplicated, the replicas are identical. It runs against Apache Kafka 3.9.1 in
ZooKeeper mode first, with the same settings (proving the test), then against
kbroker. ``KBROKER_SECURE_BOUNCES=n`` kills each n times (CI: once).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cluster.nodes import SYSTEMS, Cluster
from tests.cluster.test_replication import bounces_lose_and_duplicate_nothing, replicated_cluster
from tests.security.sasl_ssl import (
    BROKER_PASSWORD,
    CLIENT_PASSWORD,
    KEY_PASSWORD,
    SaslSslCluster,
)
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka]

BOUNCES = int(os.environ.get("KBROKER_SECURE_BOUNCES", "1"))


@pytest.fixture(params=SYSTEMS)
def system(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> SaslSslCluster:
    return SaslSslCluster.make(tmp_path_factory.mktemp("sasl-ssl-ca"))


def registered_protocols(c: Cluster) -> dict[int, set[str]]:
    """Broker id -> the security protocols of the endpoints it registered in ZooKeeper."""
    zk = c.zk()
    try:
        out = {}
        for broker in zk.get_children("/brokers/ids"):
            data, _ = zk.get(f"/brokers/ids/{broker}")
            registration = json.loads(data)
            protocols = registration["listener_security_protocol_map"]
            out[int(broker)] = {protocols[e.split("://")[0]] for e in registration["endpoints"]}
        return out
    finally:
        zk.stop()
        zk.close()


@pytest.mark.timeout(240 + 120 * BOUNCES)
def test_sasl_ssl_cluster_loses_and_duplicates_nothing_through_kills(
    system: str, secured: SaslSslCluster, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with replicated_cluster(system, zookeeper, tmp_path, secured.listeners()) as c:
        assert registered_protocols(c) == {i: {"SASL_SSL"} for i in (1, 2, 3)}
        bounces_lose_and_duplicate_nothing(c, (True,) * BOUNCES, (True,) * BOUNCES)
        if system == "kbroker":
            # kbroker's own logs: no secret in them, nothing failed unexpectedly.
            for node in c.nodes.values():
                output = node.output()
                for secret in (BROKER_PASSWORD, CLIENT_PASSWORD, KEY_PASSWORD):
                    assert secret not in output
                assert "Traceback" not in output, node.tail()
