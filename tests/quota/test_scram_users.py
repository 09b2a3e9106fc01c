"""SCRAM users created through the admin APIs authenticate on a kbroker SASL listener, and
quotas set on a user apply to that user's connections only.

One node with a PLAINTEXT listener (anonymous: where users are administered) and a
SASL_PLAINTEXT listener offering SCRAM-SHA-256 and SCRAM-SHA-512, whose credentials come
from the broker's users (the credential cache follows each change).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests.helpers import KBROKER, BrokerProcess, create_topic, free_port, wait_for

pytestmark = pytest.mark.timeout(120)


@dataclass
class Node:
    broker: BrokerProcess
    plain: int
    sasl: int

    @property
    def admin_bootstrap(self) -> str:
        return f"127.0.0.1:{self.plain}"

    def sasl_conf(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
    ) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("scram")
    plain, sasl = free_port(), free_port()
    broker = BrokerProcess(
        root / "data",
        port=plain,
        listeners=f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
    )
    broker.start(
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        "quota.window.num=3",
        "group.initial.rebalance.delay.ms=0",
    )
    try:
        yield Node(broker, plain, sasl)
    finally:
        broker.kill()
    assert "Traceback" not in broker.output()
    for secret in ("first-secret", "second-secret"):
        assert secret not in broker.output()


def user(node: Node, *args: str, password: str | None = None) -> None:
    proc = subprocess.run(
        [*KBROKER, "user", *args, "-b", node.admin_bootstrap],
        input=None if password is None else password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def lets_in(conf: dict[str, Any]) -> bool:
    try:
        AdminClient(conf).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def test_users_authenticate_once_created_and_not_once_deleted(node: Node) -> None:
    assert not lets_in(node.sasl_conf("alice", "first-secret"))
    user(node, "create", "alice", "--password-file", "-", password="first-secret")
    user(
        node,
        "create",
        "alice",
        "--mechanism",
        "SCRAM-SHA-512",
        "--iterations",
        "4096",
        "--password-file",
        "-",
        password="second-secret",
    )
    assert lets_in(node.sasl_conf("alice", "first-secret"))
    assert lets_in(node.sasl_conf("alice", "second-secret", "SCRAM-SHA-512"))
    assert not lets_in(node.sasl_conf("alice", "second-secret"))
    assert not lets_in(node.sasl_conf("alice", "wrong", "SCRAM-SHA-512"))
    user(node, "delete", "alice", "--mechanism", "SCRAM-SHA-256")
    assert not lets_in(node.sasl_conf("alice", "first-secret"))
    assert lets_in(node.sasl_conf("alice", "second-secret", "SCRAM-SHA-512"))


def produce_mb(conf: dict[str, Any], topic: str) -> tuple[float, int]:
    """Sends 1 MB in 10 KB records; (seconds it took, the largest throttle time seen)."""
    throttles: list[int] = []

    def stats(text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            throttles.append(broker.get("throttle", {}).get("max", 0))

    producer = Producer(
        {
            **conf,
            "client.id": "same-app",
            "linger.ms": 5,
            "statistics.interval.ms": 200,
            "stats_cb": stats,
        }
    )
    started = time.monotonic()
    for _ in range(100):
        while True:
            try:
                producer.produce(topic, bytes(10_000))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    producer.poll(0)
    return elapsed, max(throttles, default=0)


def test_a_users_quota_holds_that_user_only(node: Node, tmp_path: Path) -> None:
    create_topic(node.admin_bootstrap, "user-quota")
    user(node, "create", "bob", "--password-file", "-", password="bob-pw")
    proc = subprocess.run(
        [
            *KBROKER,
            "quota",
            "set",
            "--user",
            "bob",
            "producer_byte_rate=250000",
            "-b",
            node.admin_bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda: lets_in(node.sasl_conf("bob", "bob-pw")), "bob to be let in")
    # bob (User:bob) with client id same-app is held: 1 MB at 250 kB/s after the first 500 kB.
    elapsed, throttle = produce_mb(node.sasl_conf("bob", "bob-pw"), "user-quota")
    assert throttle > 0 and elapsed >= 1.5, (elapsed, throttle)
    # The anonymous user with the same client id is not.
    elapsed, throttle = produce_mb({"bootstrap.servers": node.admin_bootstrap}, "user-quota")
    assert throttle == 0 and elapsed < 1.5, (elapsed, throttle)
