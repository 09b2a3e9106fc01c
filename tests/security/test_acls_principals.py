"""ACLs on authenticated principals, on a single kbroker node and on Kafka 3.9.1 (ZooKeeper
mode, AclAuthorizer) with the same assertions: SASL PLAIN users alice and bob on a
SASL_PLAINTEXT listener, the operator (super user) on PLAINTEXT, nobody else allowed
anything (allow.everyone.if.no.acl.found=false, Kafka's default).

Alice may write a topic but not read it; a User:* ALLOW with a DENY for bob lets alice read
and not bob; a consumer group needs Read on the group; only the operator manages ACLs.
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
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.cluster.kafka_zk import prepare_kafka_zk_broker
from tests.helpers import (
    KBROKER,
    BrokerProcess,
    free_port,
    knows_controller,
    produce,
    read_error,
    single_error_line,
    wait_for,
)
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    + ";"
)
SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    # The operator's user, and the brokers' own PLAINTEXT connections.
    "super.users": "User:admin;User:ANONYMOUS",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class Target:
    system: str
    plaintext: int
    sasl: int

    def conf(self, user: str | None = None, **extra: Any) -> dict[str, Any]:
        """librdkafka settings: as ``user`` over SASL PLAIN, or the operator over PLAINTEXT."""
        if user is None:
            return {"bootstrap.servers": f"127.0.0.1:{self.plaintext}", **extra}
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": PASSWORDS[user],
            **extra,
        }


@pytest.fixture(scope="module", params=["kafka", "kbroker"])
def target(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Target]:
    root = tmp_path_factory.mktemp(f"principals-{request.param}")
    plaintext, sasl = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    if request.param == "kafka":
        kafka = prepare_kafka_zk_broker(
            zookeeper.connect,
            f"/principals-{uuid.uuid4().hex[:8]}",
            root,
            settings={**SETTINGS, "listeners": listeners},
        )
        kafka.port = plaintext
        kafka.launch()
        try:
            kafka.wait_started()
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield Target("kafka", plaintext, sasl)
        finally:
            kafka.kill()
        return
    broker = BrokerProcess(root / "data", port=plaintext, listeners=listeners)
    broker.start(*(f"{k}={v}" for k, v in SETTINGS.items()))
    try:
        yield Target("kbroker", plaintext, sasl)
        assert "Traceback" not in broker.output()
        assert "alice-secret" not in broker.output()
    finally:
        broker.kill()


def operator(target: Target) -> AdminClient:
    return AdminClient(target.conf())


def grant(target: Target, *bindings: AclBinding) -> None:
    admin = operator(target)
    for future in admin.create_acls(list(bindings)).values():
        future.result(15)


def acl(
    name: str,
    principal: str,
    op: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    restype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, permission)


def new_topic(target: Target, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = operator(target)
    admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=15)[name].result(30)
    return name


def write_error(target: Target, user: str, topic: str) -> int | None:
    conf = target.conf(user, **{"message.timeout.ms": 5000, "linger.ms": 5})
    bootstrap = conf.pop("bootstrap.servers")
    report = produce(bootstrap, topic, [(None, b"v")], **conf)[0]
    return None if report[0] is None else int(report[0].code())


def reader_error(target: Target, user: str, topic: str) -> int | None:
    """What ``user`` gets reading ``topic`` (read_error's consumer: in group "unused",
    which the tests let everyone use, so that only the topic's ACLs decide)."""
    grant(target, acl("unused", "User:*", AclOperation.READ, restype=ResourceType.GROUP))
    conf = target.conf(user)
    bootstrap = conf.pop("bootstrap.servers")
    return read_error(bootstrap, topic, extra=conf)


def test_alice_may_write_a_topic_but_not_read_it(target: Target) -> None:
    topic = new_topic(target, "write-only")
    grant(target, acl(topic, "User:alice", AclOperation.WRITE))
    assert write_error(target, "alice", topic) is None
    # Write implies Describe, so alice finds the topic, and is refused its records.
    assert reader_error(target, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Bob has no ACL: he is not even told the topic exists.
    md = AdminClient(target.conf("bob")).list_topics(topic, timeout=15).topics[topic]
    assert md.error is not None and md.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert write_error(target, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_wildcard_allow_and_a_deny_for_bob(target: Target) -> None:
    prefix = f"shared-{uuid.uuid4().hex[:6]}"
    topic = new_topic(target, prefix)
    produce(f"127.0.0.1:{target.plaintext}", topic, [(None, b"for everyone but bob")])
    grant(
        target,
        acl(prefix, "User:*", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        acl(topic, "User:bob", AclOperation.READ, AclPermissionType.DENY),
    )
    assert reader_error(target, "alice", topic) is None
    assert reader_error(target, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def group_error(target: Target, user: str, topic: str, group: str) -> int | None:
    """What a consumer in ``group`` gets first: None for a record, else the error code."""
    c = Consumer(target.conf(user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                return None if msg.error() is None else int(msg.error().code())
        raise AssertionError(f"{user} got neither a record nor an error")
    finally:
        c.close()


def test_a_consumer_group_needs_read_on_the_group(target: Target) -> None:
    topic = new_topic(target, "grouped")
    produce(f"127.0.0.1:{target.plaintext}", topic, [(None, b"r")])
    group = f"g-{topic}"
    grant(
        target,
        acl(topic, "User:*", AclOperation.READ),
        acl(group, "User:alice", AclOperation.READ, restype=ResourceType.GROUP),
    )
    assert group_error(target, "alice", topic, group) is None
    assert group_error(target, "bob", topic, group) == KafkaError.GROUP_AUTHORIZATION_FAILED


def kbroker_acl_as(
    target: Target, user: str, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`kbroker acl ...` as ``user`` through the SASL listener (--command-config)."""
    config = tmp_path / f"{user}.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{PASSWORDS[user]}";\n'
    )
    return subprocess.run(
        [*KBROKER, "acl", *args, "-b", f"127.0.0.1:{target.sasl}", "--command-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_only_the_operator_manages_acls(target: Target, tmp_path: Path) -> None:
    topic = f"managed-{uuid.uuid4().hex[:8]}"
    alice = AdminClient(target.conf("alice"))
    (future,) = alice.create_acls([acl(topic, "User:alice", AclOperation.ALL)]).values()
    with pytest.raises(Exception) as refused:
        future.result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    # librdkafka shows a refused DescribeAcls as no ACL at all (with Kafka as with kbroker).
    grant(target, acl(topic, "User:bob", AclOperation.READ))
    assert alice.describe_acls(everything).result(15) == []
    assert acl(topic, "User:bob", AclOperation.READ) in operator(target).describe_acls(
        everything
    ).result(15)
    # kbroker's own tool over SASL: refused for alice in one line, allowed for admin.
    refused_cli = kbroker_acl_as(target, "alice", tmp_path, "list")
    assert refused_cli.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in single_error_line(refused_cli.stderr)
    listed = kbroker_acl_as(target, "admin", tmp_path, "list", "--topic", topic, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["principal"], r["operation"]) for r in json.loads(listed.stdout)] == [
        ("User:bob", "Read")
    ]
