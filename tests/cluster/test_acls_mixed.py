"""A kbroker and an Apache Kafka 3.9.1 broker in one ZooKeeper cluster, both with the ACL
authorizer: each enforces the ACLs the other wrote.

Broker 1 is kbroker, broker 2 Kafka, on one chroot (``allow.everyone.if.no.acl.found``, so
that the brokers' own requests, on resources without ACLs, pass). Topic A lives on Kafka
only, topic B on kbroker only, so each is served by one kind of broker:

- ACLs created through kbroker (Describe allowed, Read denied on A) make Kafka refuse a
  consumer of A, and deleting them through Kafka lets it read again;
- ACLs created through Kafka (Describe allowed, Write denied on B's prefix) make kbroker
  refuse a producer to B, and deleting them through kbroker lets it write again;
- each broker's DescribeAcls lists what the other created.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
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
from tests.cluster.nodes import SESSION_TIMEOUT_MS, KafkaNode, KbrokerNode
from tests.helpers import knows_controller, produce, read_error, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
}
ANONYMOUS = "User:ANONYMOUS"


def acl(
    name: str, op: AclOperation, permission: AclPermissionType, pattern: ResourcePatternType
) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, ANONYMOUS, "*", op, permission)


def every_acl_of(name: str) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def write_error(bootstrap: str, topic: str) -> int | None:
    report = produce(bootstrap, topic, [(None, b"x")], **{"message.timeout.ms": 5000})[0]
    return None if report[0] is None else int(report[0].code())


def test_each_kind_enforces_the_acls_the_other_wrote(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/acls-mixed-{uuid.uuid4().hex[:8]}"
    kbroker = KbrokerNode(
        1, zookeeper.connect + chroot, tmp_path / "b1", [f"{k}={v}" for k, v in SETTINGS.items()]
    )
    kafka = KafkaNode(
        prepare_kafka_zk_broker(zookeeper.connect, chroot, tmp_path / "k2", 2, SETTINGS)
    )
    try:
        kbroker.launch()
        kbroker.wait_started()
        kafka.launch()
        kafka.wait_started()
        for node in (kbroker, kafka):
            wait_for(lambda n=node: knows_controller(n.bootstrap), "a controller", timeout=30)
        through_kbroker = AdminClient({"bootstrap.servers": kbroker.bootstrap})
        through_kafka = AdminClient({"bootstrap.servers": kafka.bootstrap})
        on_kafka, on_kbroker = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
        prefix = on_kbroker[:5]
        for name, replicas in ((on_kafka, [2]), (on_kbroker, [1])):
            new = NewTopic(name, num_partitions=1, replica_assignment=[replicas])
            through_kbroker.create_topics([new], operation_timeout=30)[name].result(60)
        for name in (on_kafka, on_kbroker):
            wait_for(
                lambda n=name: write_error(kafka.bootstrap, n) is None, f"{name} to take writes"
            )

        # kbroker writes, Kafka enforces.
        for future in through_kbroker.create_acls(
            [
                acl(
                    on_kafka,
                    AclOperation.DESCRIBE,
                    AclPermissionType.ALLOW,
                    ResourcePatternType.LITERAL,
                ),
                acl(
                    on_kafka, AclOperation.READ, AclPermissionType.DENY, ResourcePatternType.LITERAL
                ),
            ]
        ).values():
            future.result(15)
        wait_for(
            lambda: read_error(kafka.bootstrap, on_kafka) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
            "Kafka to refuse reads kbroker's ACLs deny",
        )

        # Kafka writes, kbroker enforces (a PREFIXED pattern: the extended store).
        for future in through_kafka.create_acls(
            [
                acl(
                    prefix,
                    AclOperation.DESCRIBE,
                    AclPermissionType.ALLOW,
                    ResourcePatternType.PREFIXED,
                ),
                acl(
                    prefix, AclOperation.WRITE, AclPermissionType.DENY, ResourcePatternType.PREFIXED
                ),
            ]
        ).values():
            future.result(15)
        wait_for(
            lambda: (
                write_error(kbroker.bootstrap, on_kbroker) == KafkaError.TOPIC_AUTHORIZATION_FAILED
            ),
            "kbroker to refuse writes Kafka's ACLs deny",
        )

        # Each lists what the other created.
        everything = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        for client in (through_kbroker, through_kafka):
            wait_for(
                lambda c=client: len(c.describe_acls(everything).result(15)) == 4,
                "both brokers to list all four ACLs",
            )

        # And each takes back what the other created.
        (deleted,) = through_kafka.delete_acls([every_acl_of(on_kafka)]).values()
        assert len(deleted.result(15)) == 2
        wait_for(lambda: read_error(kafka.bootstrap, on_kafka) is None, "reads again")
        (deleted,) = through_kbroker.delete_acls([every_acl_of(prefix)]).values()
        assert len(deleted.result(15)) == 2
        wait_for(lambda: write_error(kbroker.bootstrap, on_kbroker) is None, "writes again")
        wait_for(
            lambda: through_kafka.describe_acls(everything).result(15) == [],
            "Kafka to see the deletion kbroker made",
        )
        assert "Traceback" not in kbroker.output()
    finally:
        kbroker.kill()
        kafka.kill()
