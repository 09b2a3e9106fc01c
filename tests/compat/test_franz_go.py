"""franz-go (Go) members of a KIP-848 consumer group, against Apache Kafka 4.1.1 (KRaft, the
reference) and a kbroker single node.

franz-go v1.22 speaks the consumer group protocol (ConsumerGroupHeartbeat v1) when told
``kgo.ServerSideBalancer()`` and its first balancer is the sticky one (server assignor
"uniform") or the range one ("range"); otherwise, or when the broker answers
UNSUPPORTED_VERSION, it runs the classic protocol. tests/go/consumer848 is one such member:
two of them share a topic, each reads what it was assigned, commits and leaves, and the
admin client's ConsumerGroupDescribe shows a consumer-protocol group (a classic fallback
would show a classic one).
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from bench.java import parse_output
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.compat.systems import KAFKA4_SYSTEMS, single_node
from tests.go import build_go
from tests.helpers import create_topic, produce, topic_name, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

PARTITIONS = 4
PER_PARTITION = 10
# A 1 s heartbeat interval (Kafka's default is 5 s): a reassignment reaches the members at
# their next heartbeat.
NODE_SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def consumer848() -> Path:
    return build_go("consumer848")


@pytest.fixture(scope="module", params=KAFKA4_SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"franz-go-{request.param}")
    with single_node(request.param, None, root, NODE_SETTINGS) as address:
        yield address


class GoMember:
    """One running consumer848: the lines it has printed so far, read as they come."""

    def __init__(self, binary: Path, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [
                str(binary),
                "-brokers",
                bootstrap,
                "-group",
                group,
                "-topic",
                topic,
                "-client-id",
                name,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.log: list[str] = []
        self.lock = threading.Lock()
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.log), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream: IO[str], into: list[str]) -> None:
        for line in stream:
            with self.lock:
                into.append(line.rstrip("\n"))

    def printed(self, name: str) -> list[str]:
        with self.lock:
            return [line.split("=", 1)[1] for line in self.lines if line.startswith(name + "=")]

    def assignment(self) -> list[int]:
        changes = self.printed("assigned")
        return [int(p) for p in changes[-1].split(",") if p] if changes else []

    def records(self) -> set[tuple[int, int]]:
        return {(int(p), int(o)) for p, o in (r.split(":") for r in self.printed("record"))}

    def report(self) -> str:
        with self.lock:
            return (
                f"{self.name} stdout:\n"
                + "\n".join(self.lines)
                + (f"\n{self.name} franz-go log (end):\n" + "\n".join(self.log[-40:]))
            )

    def commit_answered(self) -> bool:
        return bool(self.printed("committed") or self.printed("error"))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stop(self) -> dict[str, str]:
        """Asks it to leave and exit: its final ``name=value`` lines."""
        assert self.proc.stdin is not None
        self.send("stop")
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        for reader in self.readers:
            reader.join(timeout=5)
        assert code == 0, self.report()
        with self.lock:
            return parse_output("\n".join(self.lines))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def describe(bootstrap: str, group: str) -> tuple[str, str, list[tuple[str, list[int]]]]:
    """(type, assignor, [(client id, partitions)]) as librdkafka's admin client describes
    ``group`` (ConsumerGroupDescribe for a consumer-protocol group)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    d = admin.describe_consumer_groups([group])[group].result(timeout=15)
    members = sorted(
        (m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
        for m in d.members
    )
    return d.type.name, d.partition_assignor, members


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    listed = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}


def test_two_franz_go_members_share_a_topic(consumer848: Path, bootstrap: str) -> None:
    topic, group = topic_name("franz"), f"g-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, PARTITIONS)
    members = [
        GoMember(consumer848, bootstrap, group, topic, name) for name in ("franz-a", "franz-b")
    ]
    try:

        def split() -> bool:
            held = [m.assignment() for m in members]
            return all(held) and sorted(p for h in held for p in h) == list(range(PARTITIONS))

        try:
            wait_for(split, "the two members to split the partitions", timeout=30)
        except AssertionError:
            raise AssertionError("\n".join(m.report() for m in members)) from None

        # What the broker says of the group: a consumer-protocol group (franz-go did not
        # fall back to the classic protocol), the assignor it asked for, both members with
        # the partitions each was told of.
        expected = ("CONSUMER", "uniform", sorted((m.name, m.assignment()) for m in members))
        seen: list[object] = []

        def described() -> bool:
            seen.append(describe(bootstrap, group))
            return seen[-1] == expected

        try:
            wait_for(described, f"the group described as {expected}", timeout=15)
        except AssertionError:
            raise AssertionError(f"described as {seen[-1]}, not {expected}") from None

        produce(
            bootstrap,
            topic,
            [(f"k{i}", f"v{i}", None, i % PARTITIONS) for i in range(PARTITIONS * PER_PARTITION)],
        )
        every = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
        try:
            wait_for(
                lambda: set().union(*(m.records() for m in members)) >= every,
                "every record read",
                timeout=30,
            )
        except AssertionError:
            raise AssertionError("\n".join(m.report() for m in members)) from None
        for m in members:
            # Each read only partitions it was assigned (and no assignment moved meanwhile).
            assert {p for p, _ in m.records()} <= set(m.assignment()), m.report()

        # Both commit while both are members (a commit after the other left could meet a
        # member epoch the leave bumped: STALE_MEMBER_EPOCH, which franz-go does not retry).
        for m in members:
            m.send("commit")
        for m in members:
            wait_for(m.commit_answered, f"{m.name}'s commit")
            assert m.printed("committed") == ["1"], m.report()
        assert committed(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        finals = [m.stop() for m in members]
    finally:
        for m in members:
            m.kill()
    for m, final in zip(members, finals, strict=True):
        assert final["errors"] == "0", m.report()
        assert int(final["consumed"]) == len(m.records()) > 0
        assert final["partitions"] != ""
