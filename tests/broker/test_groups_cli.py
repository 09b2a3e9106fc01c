"""``kbroker groups list|describe|delete|import-zk`` run as commands against a real broker.

import-zk reads a real ZooKeeper (the session's `zookeeper` fixture) holding
offsets the way pre-Kafka-storage consumers wrote them, under a chroot.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

from confluent_kafka import Consumer

from tests.helpers import KBROKER, BrokerProcess, committed, create_topic, produce, topic_name
from tests.zookeeper import ZooKeeperServer, zk_session

SETTINGS = ("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3")


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*KBROKER, *args], capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr + done.stdout
    return done


def stored(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, partitions without one left out."""
    return {p: o for p, o in committed(bootstrap, group, topic, partitions).items() if o >= 0}


def test_groups_list_describe_delete(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic = broker.bootstrap, topic_name("cli")
    create_topic(b, topic, partitions=2)
    produce(b, topic, [(None, b"x", None, i % 2) for i in range(10)])
    consumer = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": "cli-live",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": "cli-consumer",
        }
    )
    consumer.subscribe([topic])
    try:
        got = 0
        deadline = time.monotonic() + 20
        while got < 6 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
        listed = json.loads(cli("groups", "list", "-b", b, "--json").stdout)
        assert {
            "group": "cli-live",
            "state": "Stable",
            "protocol_type": "consumer",
            "type": "classic",
        } in listed
        assert json.loads(cli("groups", "list", "-b", b, "--state", "Empty", "--json").stdout) == []
        [d] = json.loads(cli("groups", "describe", "-b", b, "cli-live", "--json").stdout)
        assert (d["state"], d["protocol"]) == ("Stable", "range")
        [member] = d["members"]
        assert member["client_id"] == "cli-consumer" and member["host"] == "/127.0.0.1"
        assert member["assignment"] == {topic: [0, 1]}
        rows = {o["partition"]: o for o in d["offsets"]}
        assert sum(o["current_offset"] for o in rows.values()) == got
        assert all(
            o["log_end_offset"] == 5 and o["lag"] == 5 - o["current_offset"] for o in rows.values()
        )
        text = cli("groups", "describe", "-b", b, "cli-live").stdout
        assert "Group cli-live: Stable classic group (consumer/range), 1 members" in text
        refused = cli("groups", "delete", "-b", b, "cli-live", check=False)
        assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stdout
    finally:
        consumer.close()
    assert "cli-live: deleted" in cli("groups", "delete", "-b", b, "cli-live").stdout
    assert stored(b, "cli-live", topic, 2) == {}
    missing = cli("groups", "delete", "-b", b, "cli-live", check=False)
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stdout
    down = cli("groups", "list", "-b", "127.0.0.1:1", check=False)
    assert down.returncode == 1 and "cannot connect" in down.stderr


def test_import_offsets_from_zookeeper(broker_factory: Any, zookeeper: ZooKeeperServer) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic = broker.bootstrap, topic_name("zk")
    create_topic(b, topic, partitions=3)
    produce(b, topic, [(None, b"%d" % i, None, 0) for i in range(60)])
    chroot = f"/kafka-{uuid.uuid4().hex[:8]}"
    with zk_session(zookeeper.connect) as zk:
        base = f"{chroot}/consumers"
        zk.create(f"{base}/legacy/offsets/{topic}/0", b"42", makepath=True)
        zk.create(f"{base}/legacy/offsets/{topic}/1", b"17", makepath=True)
        zk.create(f"{base}/legacy/offsets/gone-topic/0", b"5", makepath=True)
        zk.create(f"{base}/broken/offsets/{topic}/2", b"not-a-number", makepath=True)
        zk.create(f"{base}/tidy/offsets/{topic}/2", b"3", makepath=True)
        zk.create(f"{base}/tidy/ids", b"", makepath=True)  # a group's other znodes are ignored
        connect = zookeeper.connect + chroot

        dry = cli(
            "groups", "import-zk", "-b", b, "--zookeeper", connect, "--group", "tidy", "--dry-run"
        )
        assert "tidy: would import 1" in dry.stdout
        assert stored(b, "tidy", topic, 3) == {}

        run = cli("groups", "import-zk", "-b", b, "--zookeeper", connect, "--json", check=False)
        assert run.returncode == 1  # one unknown topic, one unreadable znode
        reports = {r["group"]: r for r in json.loads(run.stdout)}
        assert set(reports) == {"legacy", "broken", "tidy"}
        legacy = reports["legacy"]
        assert [(x["partition"], x["value"]) for x in legacy["imported"]] == [(0, 42), (1, 17)]
        assert [(x["topic"], x["value"]) for x in legacy["failed"]] == [
            ("gone-topic", "UNKNOWN_TOPIC_OR_PARTITION")
        ]
        assert reports["broken"]["unreadable"] == [f"/consumers/broken/offsets/{topic}/2"]
        assert stored(b, "legacy", topic, 3) == {0: 42, 1: 17}
        assert stored(b, "tidy", topic, 3) == {2: 3}

        # Running again keeps what the broker has, unless told to overwrite.
        zk.set(f"{base}/legacy/offsets/{topic}/0", b"50")
        again = cli(
            "groups",
            "import-zk",
            "-b",
            b,
            "--zookeeper",
            connect,
            "--group",
            "tidy",
            "--group",
            "legacy",
            check=False,
        )
        assert "legacy: imported 0, kept 2 already committed" in again.stdout
        assert stored(b, "legacy", topic, 3) == {0: 42, 1: 17}
        cli(
            "groups",
            "import-zk",
            "-b",
            b,
            "--zookeeper",
            connect,
            "--group",
            "tidy",
            "--group",
            "legacy",
            "--overwrite",
            check=False,
        )
        assert stored(b, "legacy", topic, 3) == {0: 50, 1: 17}

    # A consumer of the migrated group starts where the old consumer stopped.
    c = Consumer({"bootstrap.servers": b, "group.id": "legacy", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        first = None
        while first is None and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None and msg.partition() == 0:
                first = msg.offset()
        assert first == 50
    finally:
        c.close()


def test_import_from_unreachable_zookeeper_fails_cleanly(broker: BrokerProcess) -> None:
    done = cli(
        "groups",
        "import-zk",
        "-b",
        broker.bootstrap,
        "--zookeeper",
        "127.0.0.1:1",
        "--zk-timeout",
        "1",
        check=False,
    )
    assert done.returncode == 1
    assert "cannot connect to ZooKeeper" in done.stderr
