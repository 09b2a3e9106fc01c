"""deploy/server-secure.properties, the sample secured broker: read as it is, and served.

The file is read unchanged (continued JAAS lines and all) and checked as the
broker checks it: listeners, the protocol map, the inter-broker listener and its
credentials, the SASL users. Then `kbroker serve --config` runs a copy of it in
cluster mode, on this test's ZooKeeper, with only what names this machine
appended (loopback ports and host, the test's certificates, the ZooKeeper
address): the broker registers SASL_SSL endpoints only, the administrator the
file names (a super user) produces and reads back over SASL_SSL, a user without
ACLs may not create a topic, and a plaintext client is refused.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from bench.certs import CertAuthority
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kbroker.config import BrokerConfig, load_properties
from kbroker.security.authenticator import jaas_credentials
from kbroker.security.jaas import parse_jaas
from kbroker.security.listeners import ListenerSet, SecurityProtocol
from tests.helpers import BrokerProcess, consume_all, free_port, knows_controller, send, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(120)

SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "server-secure.properties"
KEY_PASSWORD = "test-key-password"


def test_the_sample_reads_as_a_secured_broker() -> None:
    config = BrokerConfig.from_strings(load_properties(SAMPLE).items())
    listeners = ListenerSet.from_config(config)
    assert {lst.name: lst.protocol for lst in listeners.listeners} == {
        "CLIENT": SecurityProtocol.SASL_SSL,
        "INTERNAL": SecurityProtocol.SASL_SSL,
    }
    assert listeners.inter_broker == "INTERNAL"
    assert jaas_credentials(config, "INTERNAL", "PLAIN")[0] == "broker"
    users = parse_jaas("client", str(config.value("listener.name.client.plain.sasl.jaas.config")))
    assert set(users.users) == {"admin", "alice"}
    assert config.get_str("authorizer.class.name") == "kafka.security.authorizer.AclAuthorizer"
    assert set(config.get_str("super.users").split(";")) == {"User:broker", "User:admin"}


def test_kbroker_serves_the_sample(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    ca = CertAuthority.make(tmp_path / "ca")
    identity = ca.issue("broker", "/CN=localhost/O=kbroker", key_password=KEY_PASSWORD)
    client_port, internal_port = free_port(), free_port()
    chroot = f"/secure-sample-{uuid.uuid4().hex[:8]}"
    overrides = {
        "zookeeper.connect": zookeeper.connect + chroot,
        "advertised.listeners": (
            f"CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}"
        ),
        "ssl.keystore.location": str(identity.keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(ca.cert),
        "metrics.listeners": f"127.0.0.1:{free_port()}",
        # One broker here: the sample's three replicas, two in sync, cannot be had.
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
    }
    copy = tmp_path / "server-secure.properties"
    copy.write_text(
        SAMPLE.read_text() + "\n# This machine's:\n"
        + "".join(f"{k}={v}\n" for k, v in overrides.items())
    )  # fmt: skip
    broker = BrokerProcess(
        tmp_path / "data",
        port=client_port,
        listeners=f"CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
        args=["--config", str(copy)],
    )
    broker.start(timeout=60)
    try:
        zk = KazooClient(hosts=zookeeper.connect + chroot, timeout=10)
        zk.start(timeout=10)
        try:
            registration = json.loads(zk.get("/brokers/ids/1")[0])
        finally:
            zk.stop()
            zk.close()
        assert set(registration["listener_security_protocol_map"].values()) == {"SASL_SSL"}

        users = parse_jaas(
            "client", load_properties(SAMPLE)["listener.name.client.plain.sasl.jaas.config"]
        ).users
        admin_password = users["admin"]
        conf = {
            "bootstrap.servers": f"127.0.0.1:{client_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca.cert),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": admin_password,
        }
        bootstrap = conf.pop("bootstrap.servers")
        wait_for(lambda: knows_controller(bootstrap, conf), "the broker to know its controller")
        conf["bootstrap.servers"] = bootstrap
        topic = f"sample-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        reports = send(
            Producer({**conf, "acks": "all"}), topic, [(None, f"v{i}".encode()) for i in range(20)]
        )
        assert all(err is None for err, _ in reports)
        read = consume_all(f"127.0.0.1:{client_port}", topic, 1, 20, conf=conf)
        assert [m.value() for m in read] == [f"v{i}".encode() for i in range(20)]
        # The ACL authorizer is on: alice, with no ACL, may not create a topic.
        alice = {**conf, "sasl.username": "alice", "sasl.password": users["alice"]}
        alice_admin = AdminClient(alice)
        refused = alice_admin.create_topics([NewTopic(f"{topic}-alice", 1, 1)])
        with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
            refused[f"{topic}-alice"].result(30)
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": f"127.0.0.1:{client_port}"}).list_topics(timeout=3)
    finally:
        broker.kill()
    output = broker.output()
    assert "Traceback" not in output
    assert admin_password not in output and KEY_PASSWORD not in output
