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
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonNewTopic

from tests.cluster.nodes import SESSION_TIMEOUT_MS, SYSTEMS, Cluster, KafkaNode, KbrokerNode, Node
from tests.cluster.test_replication import (
    KAFKA_SETTINGS,
    assert_replicas_identical,
    bounces_lose_and_duplicate_nothing,
    partition_states,
    read_all,
    replicated_cluster,
    send_to_partitions,
    wait_whole,
)
from tests.helpers import wait_for
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
        # No secret in any broker's log; nothing failed unexpectedly in kbroker's.
        for node in c.nodes.values():
            output = node.output()
            for secret in (BROKER_PASSWORD, CLIENT_PASSWORD, KEY_PASSWORD):
                assert secret not in output
            if system == "kbroker":
                assert "Traceback" not in output, node.tail()


@pytest.mark.timeout(300)
def test_kafka_and_kbroker_brokers_in_one_sasl_ssl_cluster(
    secured: SaslSslCluster, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """One Kafka 3.9.1 broker (3, the first controller) and two kbroker brokers (1, 2) on
    one chroot, every connection between them SASL_SSL. Partition 0 is led by Kafka and
    partition 1 by a kbroker, each replicated on all three; Kafka is killed (kill -9), so a
    kbroker leads both and becomes the controller, and Kafka, back, follows kbroker leaders
    under a kbroker controller; then kbroker 1 is killed and Kafka leads both, kbroker 1,
    back, following it. acks=all writes go on through each step, and at the end every
    record is read once and the three replicas, of both kinds, hold the same batches."""
    chroot = f"/mixed-sasl-{uuid.uuid4().hex[:8]}"
    connect = zookeeper.connect + chroot
    listeners = secured.listeners()
    kafka = KafkaNode.prepare(
        zookeeper.connect,
        chroot,
        tmp_path / "k3",
        3,
        {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), **KAFKA_SETTINGS},
        listeners,
    )
    kbroker_settings = [
        f"{k}={v}"
        for k, v in {
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "group.initial.rebalance.delay.ms": "0",
            **KAFKA_SETTINGS,
        }.items()
    ]
    nodes: dict[int, Node] = {
        3: kafka,
        **{
            i: KbrokerNode(i, connect, tmp_path / f"b{i}", kbroker_settings, listeners)
            for i in (1, 2)
        },
    }
    try:
        kafka.launch()
        kafka.wait_started()
        wait_for(lambda: _controller(connect) == 3, "Kafka to be the controller")
        for i in (1, 2):
            nodes[i].launch()
        for i in (1, 2):
            nodes[i].wait_started()
        for node in nodes.values():
            node.wait_knows_controller()
        c = Cluster("mixed", connect, nodes, listeners.client)
        assert registered_protocols(c) == {i: {"SASL_SSL"} for i in (1, 2, 3)}

        topic = f"mixed-{uuid.uuid4().hex[:6]}"
        # (confluent-kafka refuses a replica assignment: kafka-python sends it.)
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, **secured.kafka_python_conf())
        try:
            admin.create_topics(
                [
                    KafkaPythonNewTopic(
                        topic,
                        -1,
                        -1,
                        replica_assignments={0: [3, 1, 2], 1: [1, 3, 2]},
                        topic_configs={"min.insync.replicas": "2"},
                    )
                ],
                timeout_ms=30000,
            )
        finally:
            admin.close()
        wait_whole(c, topic)
        leaders = [_leaders(c, topic)]
        controllers = [c.controller_id()]
        assert leaders[0] == {0: 3, 1: 1}
        values: list[bytes] = []

        def write(step: str) -> None:
            batch = [f"{step}-{i}".encode() for i in range(200)]
            reports = send_to_partitions(
                Producer(c.client(**{"acks": "all", "linger.ms": 5})), topic, batch, 2
            )
            assert all(err is None for err, _ in reports), {str(err) for err, _ in reports}
            values.extend(batch)

        write("whole")
        for victim, step in ((3, "kafka-down"), (1, "kbroker-down")):
            nodes[victim].kill()
            moved = wait_for(
                lambda v=victim: (
                    (found := _leaders(c, topic)) and v not in found.values() and found
                ),
                f"leaders other than broker {victim}",
                timeout=SESSION_TIMEOUT_MS / 1000 + 20,
            )
            leaders.append(moved)
            controllers.append(wait_for(c.controller_id, "a controller"))
            write(step)
            nodes[victim].launch()
            nodes[victim].wait_started()
            wait_whole(c, topic)
            write(f"{step}-back")
        print(f"\n[mixed] leaders, step by step: {leaders}; controllers {controllers}")
        # Kafka's partition passed to a kbroker and back; the kbroker's partition to Kafka.
        assert [step[0] for step in leaders] == [3, 1, 3]
        assert [step[1] for step in leaders] == [1, 1, 3]
        # Kafka controlled first; with it down a kbroker did (and Kafka, back, obeyed it).
        assert controllers[:2] == [3, controllers[1]] and controllers[1] in (1, 2)

        msgs = read_all(c.bootstrap, topic, len(values), conf=c.client_conf)
        assert sorted(m.value() for m in msgs) == sorted(values)
        assert_replicas_identical(c, topic, 2)
        for i, node in nodes.items():
            output = node.output()
            for secret in (BROKER_PASSWORD, CLIENT_PASSWORD, KEY_PASSWORD):
                assert secret not in output
            if i != 3:
                assert "Traceback" not in output, node.tail()
    finally:
        for node in nodes.values():
            node.kill()


def _controller(connect: str) -> int | None:
    return Cluster("", connect, {}).controller_id()


def _leaders(c: Cluster, topic: str) -> dict[int, int]:
    """Partition -> leader, once every partition has one (empty until then)."""
    states = partition_states(c.live_bootstrap(), topic, c.client_conf)
    if not states or any(s.leader < 0 for s in states.values()):
        return {}
    return {p: s.leader for p, s in states.items()}
