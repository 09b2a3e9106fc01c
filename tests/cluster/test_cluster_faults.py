"""Three brokers through ZooKeeper's faults and a paused controller.

Each scenario runs against Apache Kafka 3.9.1 in ZooKeeper mode first (the
reference: it proves the test) and then against three ``kbroker serve
--zookeeper`` processes:

- ZooKeeper (a server of the test's own) down for 10 s: clients keep
  producing (acks=1 and acks=all) and fetching through every leader; once it
  is back on the same port and data, every broker is registered again (its
  session resumed, or a new one), a controller exists and topics can be
  created, with no broker restarted;
- a three-server ZooKeeper ensemble loses its leader (kill -9): the cluster
  keeps serving, creates topics, and sees a killed broker's partitions go
  offline;
- the controller is paused (SIGSTOP) past its session: another broker takes
  over, and after SIGCONT the old one writes nothing to ZooKeeper (its epoch
  is over) and comes back as an ordinary broker, leading its partitions again.

Then, kbroker only: a broker id held by a live broker and a data directory of
another cluster are refused at start, with one line and no traceback.

The times each recovery took are printed (``-s`` shows them). Select with
``-m kafka`` (the reference needs Kafka's jars: bench/kafka/fetch.sh).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition
from kazoo.client import KazooClient

from tests.cluster.nodes import SESSION_TIMEOUT_MS, SYSTEMS, Cluster, cluster
from tests.cluster.test_cluster_mode import create_topic, elected_leaders, partition_leaders
from tests.helpers import KBROKER, consume_all, free_port, produce, send, wait_for
from tests.zookeeper import (
    ZooKeeperServer,
    standalone_zookeeper,
    zookeeper_ensemble,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

SESSION_S = SESSION_TIMEOUT_MS / 1000
ZOOKEEPER_DOWN_S = 10.0


# -- fixtures and helpers -----------------------------------------------------------


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper for this test alone (it is stopped and started again)."""
    server = standalone_zookeeper(tmp_path / "zookeeper")
    try:
        yield server.start()
    finally:
        server.kill()


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[list[ZooKeeperServer]]:
    """Three ZooKeeper quorum peers, serving."""
    servers = zookeeper_ensemble(tmp_path / "ensemble")
    try:
        for s in servers:
            s.launch()
        for s in servers:
            s.wait_serving(60)
        yield servers
    finally:
        for s in servers:
            s.kill()


def session_owners(c: Cluster) -> dict[int, int]:
    """Broker id -> the session owning its registration."""
    zk = c.zk()
    try:
        owners = {}
        for child in zk.get_children("/brokers/ids"):
            stat = zk.exists(f"/brokers/ids/{child}")
            if stat is not None:
                owners[int(child)] = stat.ephemeralOwner
        return owners
    finally:
        zk.stop()
        zk.close()


def create_when_possible(c: Cluster, topic: str, partitions: int, timeout: float) -> None:
    """Creates the topic, retried while the cluster cannot yet (a controller settling)."""

    def created() -> bool:
        try:
            # Short attempts: a client may still wait on a controller that is gone.
            create_topic(c.live_bootstrap(), topic, partitions, timeout=5)
            return True
        except Exception as exc:
            return "already exists" in str(exc)

    wait_for(created, f"topic {topic} to be created", timeout=timeout, interval=0.5)


def reader(c: Cluster, topic: str, partitions: int) -> KafkaConsumer:
    """A consumer of every partition from offset 0 with no group: it fetches from the
    leaders and asks nothing of a coordinator (which may need ZooKeeper to exist)."""
    consumer = KafkaConsumer(
        bootstrap_servers=c.bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=10000,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    return consumer


def read(consumer: KafkaConsumer, seen: set[bytes], want: set[bytes], timeout: float) -> None:
    """Polls until ``seen`` holds every value of ``want`` (or the timeout)."""
    deadline = time.monotonic() + timeout
    while not want <= seen and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            seen.update(r.value for r in records)


def tree(zk: KazooClient, path: str = "/") -> dict[str, tuple[bytes, int, int]]:
    """Every znode under ``path``: path -> (data, mzxid, ephemeral owner)."""
    out: dict[str, tuple[bytes, int, int]] = {}
    try:
        data, stat = zk.get(path)
        children = zk.get_children(path)
    except Exception:  # gone meanwhile
        return out
    out[path] = (data, stat.mzxid, stat.ephemeralOwner)
    for child in children:
        out.update(tree(zk, f"{path.rstrip('/')}/{child}"))
    return out


def quiet_tree(zk: KazooClient, timeout: float = 20) -> dict[str, tuple[bytes, int, int]]:
    """`tree` once it stayed the same for a second."""
    last = tree(zk)
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(1)
        now = tree(zk)
        if now == last:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"ZooKeeper kept changing for {timeout}s")
        last = now


def state_of(zk: KazooClient, topic: str, partition: int) -> dict[str, Any]:
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return dict(json.loads(data))


# -- ZooKeeper down for 10 s -----------------------------------------------------------


@pytest.mark.parametrize("system", SYSTEMS)
def test_zookeeper_down_for_ten_seconds(
    system: str, own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with cluster(system, own_zookeeper.connect, "/faults", tmp_path / "brokers") as c:
        topic = f"zkdown-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, topic, 3)
        leaders = elected_leaders(c.bootstrap, topic, 3)
        assert sorted(leaders.values()) == [1, 2, 3]
        owners = session_owners(c)
        pids = {i: n.proc.pid for i, n in c.nodes.items() if n.proc is not None}
        producers = {
            acks: Producer(
                {
                    "bootstrap.servers": c.bootstrap,
                    "acks": acks,
                    "linger.ms": 5,
                    "message.timeout.ms": 8000,
                }
            )
            for acks in ("1", "all")
        }
        # Both producers know every leader before ZooKeeper goes.
        produced: set[bytes] = set()
        for acks, producer in producers.items():
            batch = [(None, f"before-{acks}-{p}".encode(), None, p) for p in range(3)]
            assert all(err is None for err, _ in send(producer, topic, batch, 15))
            produced |= {v for _, v, _, _ in batch}
        consumer = reader(c, topic, 3)
        seen: set[bytes] = set()
        try:
            read(consumer, seen, produced, 15)
            assert seen == produced

            own_zookeeper.kill()
            down_at = time.monotonic()
            rounds = 0
            while time.monotonic() - down_at < ZOOKEEPER_DOWN_S:
                for acks, producer in producers.items():
                    batch = [
                        (None, f"down-{acks}-{rounds}-{p}".encode(), None, p) for p in range(3)
                    ]
                    reports = send(producer, topic, batch, 10)
                    assert [err for err, _ in reports] == [None] * 3, (acks, reports)
                    produced |= {v for _, v, _, _ in batch}
                read(consumer, seen, produced, 0.5)
                rounds += 1
            read(consumer, seen, produced, 10)
            assert seen == produced, f"fetched {len(seen)} of {len(produced)} with ZooKeeper down"
            assert all(n.alive for n in c.nodes.values())
            outage = time.monotonic() - down_at
        finally:
            consumer.close()
            for producer in producers.values():
                producer.flush(5)

        own_zookeeper.start()
        back_at = time.monotonic()
        zk = c.zk()
        try:

            def registered() -> bool:
                children = sorted(int(i) for i in zk.get_children("/brokers/ids"))
                return children == [1, 2, 3] and c.controller_id() in (1, 2, 3)

            wait_for(registered, "every broker registered and a controller", timeout=30)
            registered_after = time.monotonic() - back_at
        finally:
            zk.stop()
            zk.close()
        resumed = session_owners(c)
        created = f"after-{uuid.uuid4().hex[:6]}"
        create_when_possible(c, created, 3, timeout=45)
        reports = produce(
            c.bootstrap, created, [(None, b"x", None, p) for p in range(3)], acks="all"
        )
        assert all(err is None for err, _ in reports)
        usable_after = time.monotonic() - back_at
        assert {i: n.proc.pid for i, n in c.nodes.items() if n.proc is not None} == pids
        assert all(n.alive for n in c.nodes.values()), c.outputs()
        same = sorted(i for i in owners if resumed.get(i) == owners[i])
        print(
            f"\n[{system}] ZooKeeper down {outage:.1f}s: {rounds} rounds of writes "
            f"(acks=1 and acks=all) and reads went on; back: brokers registered after "
            f"{registered_after:.2f}s (sessions resumed: {same or 'none'}), a new topic "
            f"took writes after {usable_after:.2f}s (session timeout {SESSION_TIMEOUT_MS} ms)"
        )


# -- a ZooKeeper ensemble loses a server ---------------------------------------------------


@pytest.mark.parametrize("system", SYSTEMS)
def test_ensemble_loses_its_leader(
    system: str, ensemble: list[ZooKeeperServer], tmp_path: Path
) -> None:
    connect = ",".join(s.connect for s in ensemble)
    with cluster(system, connect, "/faults", tmp_path / "brokers") as c:
        topic = f"ensemble-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, topic, 6)
        leaders = elected_leaders(c.bootstrap, topic, 6)
        produce(c.bootstrap, topic, [(None, f"a-{p}".encode(), None, p) for p in range(6)])

        zk_leader = next(s for s in ensemble if s.mode() == "leader")
        zk_leader.kill()
        killed_at = time.monotonic()
        wait_for(
            lambda: any(s.mode() == "leader" for s in ensemble if s.alive),
            "a new ZooKeeper leader",
            timeout=30,
            interval=0.05,
        )
        quorum_after = time.monotonic() - killed_at

        reports = produce(
            c.bootstrap, topic, [(None, f"b-{p}".encode(), None, p) for p in range(6)], acks="all"
        )
        assert all(err is None for err, _ in reports)
        got = consume_all(c.bootstrap, topic, 6, expected=12, timeout=30)
        assert sorted(m.value() for m in got) == sorted(
            [f"a-{p}".encode() for p in range(6)] + [f"b-{p}".encode() for p in range(6)]
        )
        created = f"created-{uuid.uuid4().hex[:6]}"
        create_when_possible(c, created, 3, timeout=30)
        created_after = time.monotonic() - killed_at
        reports = produce(c.bootstrap, created, [(None, b"x", None, p) for p in range(3)])
        assert all(err is None for err, _ in reports)

        controller = c.controller_id()
        victim = next(i for i in c.nodes if i != controller)
        lost = sorted(p for p, leader in leaders.items() if leader == victim)
        kept = sorted(p for p, leader in leaders.items() if leader != victim)
        c.nodes[victim].kill()
        broker_killed_at = time.monotonic()
        survivor = next(n.bootstrap for n in c.nodes.values() if n.alive)
        wait_for(
            lambda: all(partition_leaders(survivor, topic).get(p) == -1 for p in lost),
            f"partitions {lost} of killed broker {victim} to go offline",
            timeout=SESSION_S + 15,
        )
        offline_after = time.monotonic() - broker_killed_at
        reports = produce(
            c.live_bootstrap(), topic, [(None, b"c", None, p) for p in kept], acks="all"
        )
        assert all(err is None for err, _ in reports)
        assert sum(s.alive for s in ensemble) == 2
        print(
            f"\n[{system}] ZooKeeper leader killed: new ZooKeeper leader after "
            f"{quorum_after:.2f}s, a topic created {created_after:.2f}s after the kill; "
            f"broker {victim} killed: its partitions offline after {offline_after:.2f}s "
            f"(session timeout {SESSION_TIMEOUT_MS} ms)"
        )


# -- a paused controller ------------------------------------------------------------------------


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    chroot = f"/faults-{uuid.uuid4().hex[:8]}"
    with cluster(request.param, zookeeper.connect, chroot, tmp_path) as c:
        yield c


@dataclass
class Takeover:
    old: int  # the paused controller
    new: int
    old_epoch: int
    new_epoch: int
    paused_at: float  # time.monotonic()
    elected_after: float  # seconds after the pause


@contextmanager
def controller_paused(c: Cluster, zk: KazooClient) -> Iterator[Takeover]:
    """SIGSTOP of the controller until another broker is elected; SIGCONT on exit, no sooner
    than the session timeout and a margin after the pause."""
    old: int = wait_for(c.controller_id, "a controller")
    old_epoch = int(zk.get("/controller_epoch")[0])
    c.nodes[old].pause()
    paused_at = time.monotonic()
    try:
        new = wait_for(
            lambda: (i := c.controller_id()) not in (None, old) and i,
            "another controller",
            timeout=SESSION_S + 20,
        )
        elected_after = time.monotonic() - paused_at
        new_epoch = int(zk.get("/controller_epoch")[0])
        assert new_epoch > old_epoch
        yield Takeover(old, new, old_epoch, new_epoch, paused_at, elected_after)
        time.sleep(max(0.0, SESSION_S + 4 - (time.monotonic() - paused_at)))
    finally:
        c.nodes[old].resume()


def test_paused_controller_is_replaced_and_its_partitions_go_offline(brokers: Cluster) -> None:
    c = brokers
    topic = f"paused-{uuid.uuid4().hex[:6]}"
    create_topic(c.bootstrap, topic, 6)
    leaders = elected_leaders(c.bootstrap, topic, 6)
    zk = c.zk()
    try:
        with controller_paused(c, zk) as t:
            lost = sorted(p for p, leader in leaders.items() if leader == t.old)
            kept = sorted(p for p, leader in leaders.items() if leader != t.old)
            survivor = c.nodes[t.new].bootstrap

            def offline() -> bool:
                # As clients see it, and as ZooKeeper records it (in the new epoch).
                seen = partition_leaders(survivor, topic)
                states = [state_of(zk, topic, p) for p in lost]
                return all(seen.get(p) == -1 for p in lost) and all(
                    s["leader"] == -1 and s["controller_epoch"] == t.new_epoch for s in states
                )

            try:
                wait_for(offline, f"partitions {lost} of paused broker {t.old} offline", 20)
            except AssertionError as exc:
                seen = partition_leaders(survivor, topic)
                states = {p: state_of(zk, topic, p) for p in lost}
                raise AssertionError(
                    f"{exc}: broker {t.new} answers leaders {seen}, ZooKeeper holds {states}"
                ) from None
            offline_after = time.monotonic() - t.paused_at
            reports = produce(
                survivor, topic, [(None, b"during", None, p) for p in kept], acks="all"
            )
            assert all(err is None for err, _ in reports)
    finally:
        zk.stop()
        zk.close()
    print(
        f"\n[{c.system}] controller {t.old} paused: broker {t.new} elected after "
        f"{t.elected_after:.2f}s (epoch {t.old_epoch} -> {t.new_epoch}), partitions {lost} "
        f"offline after {offline_after:.2f}s (session timeout {SESSION_TIMEOUT_MS} ms)"
    )


def test_resumed_controller_writes_nothing_and_rejoins(brokers: Cluster) -> None:
    c = brokers
    topic = f"resumed-{uuid.uuid4().hex[:6]}"
    create_topic(c.bootstrap, topic, 6)
    leaders = elected_leaders(c.bootstrap, topic, 6)
    zk = c.zk()
    try:
        with controller_paused(c, zk) as t:
            lost = sorted(p for p, leader in leaders.items() if leader == t.old)
            wait_for(
                lambda: zk.exists(f"/brokers/ids/{t.old}") is None,
                f"paused broker {t.old} unregistered",
                timeout=SESSION_S + 10,
            )
            before = quiet_tree(zk)
        resumed_at = time.monotonic()
        time.sleep(5)  # the old controller's chance to write what it must not

        wait_for(
            lambda: zk.exists(f"/brokers/ids/{t.old}") is not None,
            f"broker {t.old} registered again",
            timeout=30,
        )
        registered_after = time.monotonic() - resumed_at
        for node in c.nodes.values():
            wait_for(
                lambda node=node: all(
                    partition_leaders(node.bootstrap, topic).get(p) == t.old for p in lost
                ),
                f"broker {node.broker_id} to see partitions {lost} led by broker {t.old} again",
                timeout=30,
            )
        leading_after = time.monotonic() - resumed_at
        after = tree(zk)
    finally:
        zk.stop()
        zk.close()

    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    print(f"\n[{c.system}] znodes changed after SIGCONT: {changed}")
    assert after["/controller_epoch"] == before["/controller_epoch"]
    assert after["/controller"] == before["/controller"]
    for path in changed:
        if path.endswith("/state"):
            state = json.loads(after[path][0])
            assert state["controller_epoch"] == t.new_epoch, (path, state)
        else:
            assert path == f"/brokers/ids/{t.old}", (path, before.get(path), after.get(path))

    reports = produce(
        c.nodes[t.old].bootstrap, topic, [(None, b"back", None, p) for p in lost], acks="all"
    )
    assert all(err is None for err, _ in reports)
    print(
        f"[{c.system}] controller {t.old} resumed after broker {t.new} took over (epoch "
        f"{t.old_epoch} -> {t.new_epoch}): registered again after {registered_after:.2f}s, "
        f"led its partitions again after {leading_after:.2f}s (5 s of that waited on purpose)"
    )


# -- refused at start (kbroker only) ------------------------------------------------------------


def serve_once(data_dir: Path, broker_id: int, zk_connect: str) -> subprocess.CompletedProcess[str]:
    """Runs ``kbroker serve`` in a cluster, expecting it to stop by itself."""
    return subprocess.run(
        [
            *KBROKER,
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--broker-id",
            str(broker_id),
            "--zookeeper",
            zk_connect,
            "--set",
            f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a broker that refused to start, with no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if "ERROR" in line or "error" in line.lower()]
    assert len(errors) == 1, output
    return errors[0]


def test_duplicate_broker_id_and_foreign_data_dir_refused(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    chroot = f"/faults-{uuid.uuid4().hex[:8]}"
    with cluster("kbroker", zookeeper.connect, chroot, tmp_path / "brokers", size=1) as c:
        owner = session_owners(c)[1]

        line = refusal(serve_once(tmp_path / "second", 1, c.zk_connect))
        assert "broker id 1 is already registered" in line, line
        assert session_owners(c) == {1: owner}

        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "meta.properties").write_text(
            "version=0\nbroker.id=2\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n"
        )
        line = refusal(serve_once(foreign, 2, c.zk_connect))
        assert "belongs to cluster AAAAAAAAAAAAAAAAAAAAAA" in line, line
        assert session_owners(c) == {1: owner}
