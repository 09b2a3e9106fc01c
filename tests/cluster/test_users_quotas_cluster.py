"""Users' SCRAM credentials and client quotas in a ZooKeeper cluster: every broker follows
what any one of them was told, in Kafka's znodes, and kbroker and Apache Kafka 3.9.1 read
each other's.

- Two brokers of one system (Kafka's run first proves the test): a credential and a quota
  altered through broker 1 are described by broker 2 and enforced there, and the znodes
  and change notifications are Kafka's (names sanitized).
- A mixed cluster (a Kafka broker with a SCRAM listener and a kbroker): a credential
  written through Kafka is read into kbroker's credential cache by its change watcher and
  verifies the password with kbroker's SCRAM server; a credential written through
  kbroker (its CLI) lets a confluent-kafka SCRAM client in on Kafka's SASL listener
  (and the wrong password not).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism
from confluent_kafka.admin import UserScramCredentialUpsertion as Upsertion

from kbroker.cluster.configs import ConfigChangeWatcher
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import MetadataRequest
from kbroker.protocol.messages.quotas import AlterClientQuotasRequest as ACQ
from kbroker.quota.entity import QuotaEntity
from kbroker.security.credentials import CredentialCache
from kbroker.security.errors import AuthenticationFailed
from kbroker.security.scram import MECHANISMS, ScramClient, ScramCredential, ScramServer
from kbroker.tools.client import BrokerClient
from tests.cluster.conftest import run, until
from tests.cluster.kafka_zk import prepare_kafka_zk_broker
from tests.cluster.nodes import SESSION_TIMEOUT_MS, KafkaNode, KbrokerNode, cluster
from tests.helpers import KBROKER, free_port, knows_controller, produce, wait_for
from tests.quota.systems import kafka_configs
from tests.zookeeper import ZooKeeperServer, zk_session

pytestmark = pytest.mark.timeout(180)


def zk_json(zk_connect: str, path: str) -> object:
    with zk_session(zk_connect) as zk:
        data, _ = zk.get(path)
        return json.loads(data)


def notified(zk_connect: str, entity_path: str) -> bool:
    with zk_session(zk_connect) as zk:
        for name in zk.get_children("/config/changes"):
            data, _ = zk.get(f"/config/changes/{name}")
            if json.loads(data) == {"version": 2, "entity_path": entity_path}:
                return True
        return False


def metadata_throttle_ms(bootstrap: str, client_id: str) -> int:
    with BrokerClient(bootstrap, client_id=client_id) as client:
        version = min(client.version(ApiKey.METADATA), 12)
        for _ in range(50):
            resp = client.request(
                ApiKey.METADATA,
                version,
                MetadataRequest(topics=None, allow_auto_topic_creation=False),
            )
            if resp.throttle_time_ms:
                return int(resp.throttle_time_ms)
    return 0


def set_quota(bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float) -> None:
    req = ACQ(
        entries=[
            ACQ.EntryData(
                entity=[ACQ.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[ACQ.EntryData.OpData(key=key, value=value, remove=False)],
            )
        ],
        validate_only=False,
    )
    with BrokerClient(bootstrap) as client:
        [entry] = client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, req).entries
    assert entry.error_code == ErrorCode.NONE, entry.error_message


@pytest.mark.parametrize("system", [pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def test_every_broker_follows_credentials_and_quotas(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/users-{uuid.uuid4().hex[:8]}"
    with cluster(system, zookeeper.connect, chroot, tmp_path, size=2) as c:
        b1, b2 = c.nodes[1].bootstrap, c.nodes[2].bootstrap
        user, client_id = "alice@example.com", "busy app"
        admin = AdminClient({"bootstrap.servers": b1})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        admin.alter_user_scram_credentials([Upsertion(user, info, b"pw", b"s" * 16)])[user].result(
            30
        )
        set_quota(b1, [("client-id", client_id)], "request_percentage", 0.01)
        # Kafka's znodes, names sanitized, with their change notifications.
        stored = zk_json(c.zk_connect, "/config/users/alice%40example.com")
        assert isinstance(stored, dict) and stored["version"] == 1
        credential = ScramCredential.from_kafka(stored["config"]["SCRAM-SHA-256"])
        assert credential.iterations == 4096 and credential.salt == b"s" * 16
        assert zk_json(c.zk_connect, "/config/clients/busy%20app") == {
            "version": 1,
            "config": {"request_percentage": "0.01"},
        }
        assert notified(c.zk_connect, "users/alice%40example.com")
        assert notified(c.zk_connect, "clients/busy%20app")
        # Broker 2 describes the credential and enforces the quota.
        admin2 = AdminClient({"bootstrap.servers": b2})
        description = admin2.describe_user_scram_credentials([user])[user].result(30)
        assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_256, 4096)
        ]
        wait_for(
            lambda: metadata_throttle_ms(b2, client_id) > 0, "broker 2 to throttle", timeout=20
        )

        # Replication is never throttled: with a consumer quota of 100 bytes/s on every
        # client id, followers still keep up, and acks=all writes of 1 MB complete at once.
        set_quota(b1, [("client-id", None)], "consumer_byte_rate", 100.0)
        topic = f"replicated-{uuid.uuid4().hex[:6]}"
        new = NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})
        admin.create_topics([new], operation_timeout=30)[topic].result(60)
        time.sleep(1.5)  # the quota reaches every broker
        started = time.monotonic()
        reports = produce(
            b1, topic, [(None, bytes(5000)) for _ in range(200)], acks="all", flush_timeout=60
        )
        assert all(err is None for err, _ in reports), {str(err) for err, _ in reports}
        assert time.monotonic() - started < 20


# -- a mixed cluster ---------------------------------------------------------------------------


def scram_verifies(credential: ScramCredential, mechanism: str, password: str) -> bool:
    """Whether kbroker's SCRAM server takes `password` against `credential`."""
    mech = MECHANISMS[mechanism]
    server = ScramServer(mech, lambda user: credential)
    client = ScramClient(mech, "someone", password)
    try:
        server_first = server.evaluate(client.first())
        server_final = server.evaluate(client.final(server_first))
        client.verify(server_final)
    except AuthenticationFailed:
        return False
    return server.complete


@pytest.mark.kafka
def test_kafka_and_kbroker_read_each_others_credentials(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/mixed-users-{uuid.uuid4().hex[:8]}"
    connect = zookeeper.connect + chroot
    plain, sasl = free_port(), free_port()
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    broker = prepare_kafka_zk_broker(
        zookeeper.connect,
        chroot,
        tmp_path / "k1",
        1,
        {
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
        },
    )
    broker.port = plain
    kafka = KafkaNode(broker)
    kbroker = KbrokerNode(
        2,
        connect,
        tmp_path / "b2",
        [
            f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
            "offsets.topic.replication.factor=1",
        ],
    )
    try:
        kafka.launch()
        kafka.wait_started()
        kbroker.launch()
        kbroker.wait_started()
        wait_for(lambda: knows_controller(kbroker.bootstrap), "kbroker to know the controller")

        # Kafka writes; kbroker's change watcher reads it into a credential cache.
        async def kafka_writes() -> ScramCredential | None:
            cache = CredentialCache()

            def on_entity(entity: QuotaEntity, configs: dict[str, str]) -> None:
                if entity.client_id is None and entity.plain_user is not None:
                    cache.update_user(entity.plain_user, configs)

            async with ZkClient(ZkSettings.parse(connect, session_timeout_ms=4000)) as zk:
                watcher = ConfigChangeWatcher(
                    zk, lambda *_: None, lambda *_: None, on_quota_entity=on_entity
                )
                await watcher.start()
                try:
                    await asyncio.to_thread(
                        kafka_configs,
                        kafka.bootstrap,
                        "--alter",
                        "--add-config",
                        "SCRAM-SHA-512=[iterations=5000,password=from-kafka]",
                        "--entity-type",
                        "users",
                        "--entity-name",
                        "kuser",
                    )
                    await until(lambda: cache.get("SCRAM-SHA-512", "kuser"), "the credential", 30)
                finally:
                    await watcher.stop()
            return cache.get("SCRAM-SHA-512", "kuser")

        credential = run(kafka_writes())
        assert credential is not None and credential.iterations == 5000
        stored = zk_json(connect, "/config/users/kuser")
        assert isinstance(stored, dict)
        assert credential == ScramCredential.from_kafka(stored["config"]["SCRAM-SHA-512"])
        assert scram_verifies(credential, "SCRAM-SHA-512", "from-kafka")
        assert not scram_verifies(credential, "SCRAM-SHA-512", "wrong")
        # The kbroker broker describes it.
        admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
        description = admin.describe_user_scram_credentials(["kuser"])["kuser"].result(30)
        assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_512, 5000)
        ]

        # kbroker writes (its CLI, the password on standard input); Kafka authenticates.
        subprocess.run(
            [
                *KBROKER,
                "user",
                "create",
                "kbuser",
                "--mechanism",
                "SCRAM-SHA-256",
                "--password-file",
                "-",
                "-b",
                kbroker.bootstrap,
            ],
            input="from-kbroker\n",
            text=True,
            check=True,
            capture_output=True,
            timeout=60,
        )

        def sasl_conf(password: str) -> dict[str, object]:
            return {
                "bootstrap.servers": f"127.0.0.1:{sasl}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "kbuser",
                "sasl.password": password,
            }

        def lets_in(password: str) -> bool:
            try:
                AdminClient(sasl_conf(password)).list_topics(timeout=5)
            except KafkaException:
                return False
            return True

        # Kafka reads the new credential on its change notification: a moment later.
        wait_for(lambda: lets_in("from-kbroker"), "Kafka to let kbuser in", timeout=30)
        assert not lets_in("wrong")
        # (No records through Kafka's SASL listener: a topic led by the kbroker, which has
        # no such listener, would have no leader there.)
        assert "Traceback" not in kbroker.output()
    finally:
        kafka.kill()
        kbroker.kill()
