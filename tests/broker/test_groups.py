"""Consumer groups with real clients: rebalances, ownership, commits, restarts.

Group members run in their own processes (tests/broker/group_member.py) so
they can leave cleanly (SIGTERM) or crash (SIGKILL). Assignments are checked
through DescribeGroups each time the group settles: every partition owned by
exactly one member. Delivery is at least once: every produced record must be
consumed by someone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewPartitions

from kbroker.tools.cluster import Cluster
from kbroker.tools.groups import describe_group
from tests.helpers import BrokerProcess, committed, create_topic, produce, topic_name, wait_for

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")
SETTINGS = (
    "group.initial.rebalance.delay.ms=300",
    "group.min.session.timeout.ms=500",
    "offsets.topic.num.partitions=5",
)


class Member:
    """One group member process and what it reported."""

    def __init__(
        self,
        log_dir: Path,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        *args: str,
        client: str = "confluent",
    ) -> None:
        self.name = name
        self.stderr = log_dir / f"member-{name}.log"
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(MEMBER_SCRIPT),
                    "--client",
                    client,
                    "--bootstrap",
                    bootstrap,
                    "--group",
                    group,
                    "--topic",
                    topic,
                    "--name",
                    name,
                    *args,
                ],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def records(self) -> set[tuple[int, int]]:
        return {(p, o) for e in self.snapshot() if e["event"] == "records" for p, o in e["records"]}

    def owned_history(self) -> list[set[int]]:
        """The partitions owned after each assignment event."""
        owned: set[int] = set()
        history = []
        for e in self.snapshot():
            if e["event"] == "assigned":
                owned |= set(e["partitions"])
            elif e["event"] == "revoked":
                owned -= set(e["partitions"])
            else:
                continue
            history.append(set(owned))
        return history

    def count(self, event: str) -> int:
        return sum(1 for e in self.snapshot() if e["event"] == event)

    def terminate(self, timeout: float = 20) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._reader.join(5)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[Callable[..., Member]]:
    started: list[Member] = []

    def start(*args: Any, **kwargs: Any) -> Member:
        m = Member(tmp_path, *args, **kwargs)
        started.append(m)
        return m

    yield start
    for m in started:
        m.close()


def stable_assignment(
    bootstrap: str, group: str, topic: str, partitions: int, n_members: int, timeout: float = 40
) -> dict[str, Any]:
    """Waits until the group is Stable with n members owning every partition exactly once."""

    def check() -> dict[str, Any] | None:
        with Cluster(bootstrap) as cluster:
            d = describe_group(cluster, group)
        if d["state"] != "Stable" or len(d["members"]) != n_members:
            return None
        owned = sorted(p for m in d["members"] for p in m["assignment"].get(topic, []))
        return d if owned == list(range(partitions)) else None

    return wait_for(
        check,
        f"{group} to settle with {n_members} members over {partitions} partitions",
        timeout=timeout,
    )


def produce_spread(
    bootstrap: str, topic: str, partitions: int, count: int, tag: str
) -> set[tuple[int, int]]:
    reports = produce(
        bootstrap,
        topic,
        [(None, f"{tag}-{i}".encode(), None, i % partitions) for i in range(count)],
    )
    assert all(err is None for err, _ in reports)
    return {(msg.partition(), msg.offset()) for _, msg in reports}


def consumed(group: list[Member]) -> set[tuple[int, int]]:
    return set().union(*(m.records() for m in group))


def test_three_members_join_leave_and_crash(
    broker_factory: Any, members: Callable[..., Member]
) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic, group = broker.bootstrap, topic_name("share"), "sharers"
    create_topic(b, topic, partitions=6)
    produced = produce_spread(b, topic, 6, 300, "a")
    crew = [members(b, group, topic, f"m{i}") for i in range(3)]
    before = stable_assignment(b, group, topic, 6, 3)
    assert before["protocol"] == "range"
    wait_for(lambda: consumed(crew) >= produced, "the first records to be consumed", timeout=30)

    # A clean leave: the others take over its partitions at once.
    assert crew[0].terminate() == 0
    assert crew[0].count("closed") == 1
    stable_assignment(b, group, topic, 6, 2)
    produced |= produce_spread(b, topic, 6, 300, "b")
    wait_for(lambda: consumed(crew) >= produced, "records after the leave", timeout=30)

    # A crash: its session (3 s) runs out and the last member owns everything.
    crew[1].kill()
    after = stable_assignment(b, group, topic, 6, 1)
    assert [m["client_id"] for m in after["members"]] == ["m2"]
    produced |= produce_spread(b, topic, 6, 300, "c")
    wait_for(lambda: consumed(crew) >= produced, "records after the crash", timeout=30)
    assert crew[2].owned_history()[-1] == set(range(6))


def test_committed_offsets_survive_restart_and_kill(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic, group = broker.bootstrap, topic_name("resume"), "resumers"
    create_topic(b, topic, partitions=2)
    produce_spread(b, topic, 2, 100, "r")

    def consume(n: int) -> list[tuple[int, int]]:
        c = Consumer(
            {
                "bootstrap.servers": b,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        c.subscribe([topic])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 20
        try:
            while len(got) < n and time.monotonic() < deadline:
                msg = c.poll(0.2)
                if msg is None or msg.error():
                    continue
                got.append((msg.partition(), msg.offset()))
                c.commit(message=msg, asynchronous=False)
        finally:
            c.close()
        return got

    first = consume(30)
    assert len(first) == 30
    expect = {
        p: max(o for q, o in first if q == p) + 1 for p in (0, 1) if any(q == p for q, _ in first)
    }
    broker.stop()
    broker.start()
    assert {p: o for p, o in committed(b, group, topic, (0, 1)).items() if p in expect} == expect
    second = consume(30)
    # Resumed where the commits left off: nothing consumed twice, nothing skipped.
    assert not set(first) & set(second)
    for p in (0, 1):
        offsets = sorted(o for q, o in first + second if q == p)
        assert offsets == list(range(len(offsets)))

    at_kill = committed(b, group, topic, (0, 1))
    broker.kill()
    broker.start()
    assert committed(b, group, topic, (0, 1)) == at_kill
    rest = consume(40)
    assert len(set(first) | set(second) | set(rest)) == 100


def test_static_member_restart_keeps_assignment_without_rebalance(
    broker_factory: Any, members: Callable[..., Member]
) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic, group = broker.bootstrap, topic_name("static"), "statics"
    create_topic(b, topic, partitions=4)
    static = ("--session-ms", "8000")
    first = members(b, group, topic, "s0", "--instance-id", "s0", *static)
    other = members(b, group, topic, "s1", "--instance-id", "s1", *static)
    before = stable_assignment(b, group, topic, 4, 2)
    wait_for(
        lambda: first.owned_history() and other.owned_history(),
        "both members to be assigned",
        timeout=20,
    )
    s0_owned = first.owned_history()[-1]
    assigned_before = other.count("assigned")

    first.kill()  # no LeaveGroup from a crashed (or closed) static member
    back = members(b, group, topic, "s0-again", "--instance-id", "s0", *static)
    wait_for(
        lambda: back.owned_history(),
        "the restarted static member to get its partitions",
        timeout=20,
    )
    assert back.owned_history()[-1] == s0_owned
    after = stable_assignment(b, group, topic, 4, 2)
    instances = {m["group_instance_id"]: m for m in after["members"]}
    assert set(instances) == {"s0", "s1"}
    old_ids = {m["group_instance_id"]: m["member_id"] for m in before["members"]}
    assert instances["s0"]["member_id"] != old_ids["s0"]
    assert instances["s1"]["member_id"] == old_ids["s1"]
    # The other member never saw a rebalance.
    time.sleep(1.0)
    assert other.count("assigned") == assigned_before
    assert other.count("revoked") == 0


def test_cooperative_sticky_rebalances_incrementally(
    broker_factory: Any, members: Callable[..., Member]
) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic, group = broker.bootstrap, topic_name("coop"), "cooperators"
    create_topic(b, topic, partitions=6)
    coop = ("--strategy", "cooperative-sticky")
    crew = [members(b, group, topic, f"c{i}", *coop) for i in range(2)]
    settled = stable_assignment(b, group, topic, 6, 2)
    assert settled["protocol"] == "cooperative-sticky"
    wait_for(
        lambda: all(m.owned_history() and len(m.owned_history()[-1]) == 3 for m in crew),
        "two members with three partitions each",
        timeout=20,
    )
    marks = [len(m.owned_history()) for m in crew]
    crew.append(members(b, group, topic, "c2", *coop))
    stable_assignment(b, group, topic, 6, 3)
    wait_for(
        lambda: all(m.owned_history() and len(m.owned_history()[-1]) == 2 for m in crew),
        "three members with two partitions each",
        timeout=30,
    )
    for m, mark in zip(crew[:2], marks, strict=True):
        later = m.owned_history()[mark - 1 :]
        # Incremental: the old members kept partitions throughout, giving up one each.
        assert all(len(owned) >= 2 for owned in later), later
        assert later[-1] < later[0]
    produced = produce_spread(b, topic, 6, 120, "coop")
    wait_for(
        lambda: consumed(crew) >= produced, "records after the incremental rebalance", timeout=30
    )


def test_kafka_python_and_aiokafka_in_one_group(
    broker_factory: Any, members: Callable[..., Member]
) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic, group = broker.bootstrap, topic_name("mixed"), "mixed"
    create_topic(b, topic, partitions=4)
    produced = produce_spread(b, topic, 4, 200, "x")
    crew = [
        members(b, group, topic, "kp", client="kafka-python"),
        members(b, group, topic, "aio", client="aiokafka"),
    ]
    settled = stable_assignment(b, group, topic, 4, 2)
    # The one assignor both clients support.
    assert settled["protocol"] == "roundrobin"
    assert {m["client_id"] for m in settled["members"]} == {"kp", "aio"}
    # Records written before the second member joined may all go to the first
    # (it can read and commit every partition before the rebalance); records
    # written once the group is settled reach each member through its own partitions.
    produced |= produce_spread(b, topic, 4, 200, "y")
    wait_for(
        lambda: consumed(crew) >= produced, "every record consumed by the mixed group", timeout=30
    )
    assert all(m.records() for m in crew)
    assert crew[0].terminate() == 0
    stable_assignment(b, group, topic, 4, 1)


def test_added_partitions_get_owners(broker_factory: Any, members: Callable[..., Member]) -> None:
    broker: BrokerProcess = broker_factory(*SETTINGS)
    b, topic, group = broker.bootstrap, topic_name("grow"), "growers"
    create_topic(b, topic, partitions=2)
    crew = [members(b, group, topic, f"g{i}") for i in range(2)]
    stable_assignment(b, group, topic, 2, 2)
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
    stable_assignment(b, group, topic, 4, 2)
    produced = produce_spread(b, topic, 4, 40, "grown")
    wait_for(lambda: consumed(crew) >= produced, "records in the new partitions", timeout=30)
