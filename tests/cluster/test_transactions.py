"""Transactions on a 3-broker ZooKeeper cluster, Apache Kafka 3.9.1's first (proving the
test), then kbroker's, with the same settings: ``__transaction_state`` and the topics
replicated three times with min.insync.replicas 2, so a transaction's coordinator, its
partitions' leaders and the KIP-890 verification they ask for are on different brokers.

A confluent-kafka transactional producer commits and aborts across partitions led by
every broker (read_committed reads each transaction whole or not at all), and so does
Kafka's Java client, which also runs a consume-transform-produce loop; a second
instance fences the first; a transaction open past its timeout is aborted and its producer
fenced; kill -9 of the leader of one of a transaction's partitions mid-transaction leaves
the new leader knowing the open transaction, which commits whole; and kill -9 of a
transaction's coordinator mid-transaction leaves the producer able to commit through the
new coordinator, which finds the transaction where the old one left it. One cluster of each
system serves the module.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DescribeProducersRequest
from kbroker.protocol.messages.core import MetadataRequest
from kbroker.protocol.messages.group import FindCoordinatorRequest
from kbroker.protocol.messages.txn import DescribeTransactionsRequest
from kbroker.tools.client import BrokerClient, ClientError
from tests.cluster.kafka_zk import require_kafka
from tests.cluster.nodes import SESSION_TIMEOUT_MS, SYSTEMS, Cluster, fresh_cluster
from tests.helpers import wait_for
from tests.java import run_java
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 3
# The same names and values for both systems.
SETTINGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "unclean.leader.election.enable": "false",
}


@pytest.fixture(scope="module", params=SYSTEMS)
def txn_cluster(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp(f"txn-{request.param}")
    with fresh_cluster(request.param, zookeeper.connect, "txn", root, SETTINGS) as c:
        yield c
        if c.system == "kbroker":
            # Whatever happened, nothing crashed a request or a background task.
            for node in c.nodes.values():
                assert "Traceback" not in node.output(), node.tail()


def new_topic(c: Cluster) -> str:
    """A topic of 3 partitions, 3 replicas each, min.insync.replicas 2, every ISR whole."""
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(c.client())
    futures = admin.create_topics(
        [NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[name].result(60)

    def whole(node: Any) -> bool:
        # Asked of each broker: a client may ask any of them next.
        client = BrokerClient(node.bootstrap, 10)
        try:
            request = MetadataRequest(
                topics=[MetadataRequest.Topic(name=name)], allow_auto_topic_creation=False
            )
            (md,) = client.request(ApiKey.METADATA, 9, request).topics
        finally:
            client.close()
        return (
            md.error_code == ErrorCode.NONE
            and len(md.partitions) == PARTITIONS
            and all(p.leader_id > 0 and len(p.isr_nodes) == 3 for p in md.partitions)
        )

    for node in c.nodes.values():
        wait_for(lambda n=node: whole(n), f"every ISR of {name} whole on {node}", timeout=60)
    return name


def transactional(c: Cluster, txn: str, **conf: Any) -> Producer:
    p = Producer({**c.client(), "linger.ms": 5, "transactional.id": txn, **conf})
    p.init_transactions(90)
    return p


def send(p: Producer, topic: str, values: list[str]) -> None:
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0


def read(c: Cluster, topic: str, committed: bool) -> list[str]:
    """Everything a consumer reads of ``topic`` up to each partition's end (the last
    stable offset for read_committed), sorted."""
    consumer = Consumer(
        {
            **c.client(bootstrap=c.live_bootstrap()),
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"did not reach the end of {topic}: {found}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(msg.partition())
                continue
            found.append(msg.value().decode())
    finally:
        consumer.close()
    return sorted(found)


def _ask(c: Cluster, api: int, version: int, body: Any) -> Any:
    """One request to any live broker that answers."""
    for node in c.nodes.values():
        if not node.alive:
            continue
        try:
            client = BrokerClient(node.bootstrap, 10)
        except OSError:
            continue
        try:
            return client.request(api, version, body)
        except (ClientError, OSError):
            continue
        finally:
            client.close()
    raise AssertionError("no broker answered")


def coordinator_of(c: Cluster, txn: str) -> int:
    """The broker coordinating ``txn`` now."""

    def found() -> int | None:
        answer = _ask(c, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=txn, key_type=1))
        return int(answer.node_id) if answer.error_code == ErrorCode.NONE else None

    return wait_for(found, f"the coordinator of {txn}", timeout=60)


def txn_state(c: Cluster, txn: str) -> str:
    node = c.nodes[coordinator_of(c, txn)]
    client = BrokerClient(node.bootstrap, 10)
    try:
        answer = client.request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[txn])
        )
    finally:
        client.close()
    state = answer.transaction_states[0]
    return str(state.transaction_state) if state.error_code == ErrorCode.NONE else ""


def test_commits_and_aborts_across_partitions_led_by_every_broker(txn_cluster: Cluster) -> None:
    c = txn_cluster
    topic = new_topic(c)
    admin = AdminClient(c.client())
    leaders = {
        p.leader for p in admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
    }
    txn = f"cluster-{topic}"
    p = transactional(c, txn)
    # Markers and KIP-890 verifications cross brokers: some leader is not the coordinator.
    assert leaders - {coordinator_of(c, txn)}
    for round_ in range(3):
        p.begin_transaction()
        send(p, topic, [f"c{round_}-{i}" for i in range(6)])
        p.commit_transaction(60)
        p.begin_transaction()
        send(p, topic, [f"a{round_}-{i}" for i in range(6)])
        p.abort_transaction(60)
    committed = sorted(f"c{r}-{i}" for r in range(3) for i in range(6))
    aborted = sorted(f"a{r}-{i}" for r in range(3) for i in range(6))
    assert read(c, topic, committed=True) == committed
    assert read(c, topic, committed=False) == sorted(committed + aborted)
    wait_for(lambda: txn_state(c, txn) == "CompleteAbort", "the last abort to complete")


def test_the_java_client_across_brokers(txn_cluster: Cluster) -> None:
    """Kafka's Java client (tests/java/TxnClient.java) on the cluster: a committed, an
    aborted and an open transaction at each isolation level, and consume-transform-produce
    with sendOffsetsToTransaction (its group's coordinator, its transaction's and the
    partitions' leaders on different brokers)."""
    c = txn_cluster
    _, lib = require_kafka()
    topic = new_topic(c)
    # TxnClient writes to partitions 0 and 1, round-robin.
    seen = run_java("TxnClient", [lib], c.bootstrap, "commit-abort", topic)
    a, b, o = ([f"{i % 2}:{x}{i}" for i in range(4)] for x in "abc")
    in_order = partial(sorted, key=lambda item: int(item.partition(":")[0]))
    assert seen["open.read_committed"] == ",".join(in_order(a))
    assert seen["open.read_uncommitted"] == ",".join(in_order(a + b + o))
    assert seen["after.read_committed"] == ",".join(in_order(a + o))
    source, sink = new_topic(c), new_topic(c)
    seen = run_java(
        "TxnClient",
        [lib],
        c.bootstrap,
        "consume-transform-produce",
        source,
        sink,
        f"g-{uuid.uuid4().hex[:8]}",
        timeout=120,
    )
    assert sorted(seen["output.read_committed"].split(",")) == sorted(
        f"{i % 2}:V{i}" for i in range(20)
    )
    assert seen["committed.offsets"] == "0:10,1:10"
    assert len(seen["output.read_uncommitted"].split(",")) == 20 + int(seen["aborted"])


def test_every_replica_describes_the_producers_of_its_partition(txn_cluster: Cluster) -> None:
    """DescribeProducers is answered by followers too (kafka-transactions' --broker-id, and
    find-hanging for each partition a broker holds): each replica names the producers it
    rebuilt from what it replicated, an open transaction's first offset among them."""
    c = txn_cluster
    topic = new_topic(c)
    done, hanging = transactional(c, f"done-{topic}"), transactional(c, f"open-{topic}")
    done.begin_transaction()
    done.produce(topic, value=b"d0", partition=0)
    done.commit_transaction(60)
    hanging.begin_transaction()
    hanging.produce(topic, value=b"o0", partition=0)
    assert hanging.flush(60) == 0
    md = AdminClient(c.client()).list_topics(topic, timeout=10).topics[topic].partitions[0]
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.Topic(name=topic, partition_indexes=[0, 7])]
    )

    def producers(broker_id: int) -> Any:
        """(the answer for partition 0 as a set of producers, partition 7's error)."""
        with BrokerClient(c.nodes[broker_id].bootstrap, 10) as client:
            answer = client.request(ApiKey.DESCRIBE_PRODUCERS, 0, request)
        ((p0, p7),) = [t.partitions for t in answer.topics]
        assert p0.error_code == ErrorCode.NONE, (broker_id, ErrorCode(p0.error_code))
        rows = {
            (
                p.producer_id,
                p.producer_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.coordinator_epoch,
                p.current_txn_start_offset,
            )
            for p in p0.active_producers
        }
        return rows, ErrorCode(p7.error_code)

    # The followers catch up with the marker and the open batch (the high watermark).
    leader = wait_for(
        lambda: len(rows := producers(md.leader)[0]) == 2 and rows, "the leader's producers"
    )
    assert sorted(r[5] for r in leader) == [-1, 2]  # d0 at 0, its marker at 1, o0 at 2
    for replica in md.replicas:
        assert wait_for(
            lambda r=replica: producers(r)[0] == leader, f"broker {replica}'s producers"
        )
        assert producers(replica)[1] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    hanging.abort_transaction(60)


def test_a_second_instance_fences_the_first(txn_cluster: Cluster) -> None:
    c = txn_cluster
    topic = new_topic(c)
    txn = f"zombie-{topic}"
    zombie = transactional(c, txn)
    zombie.begin_transaction()
    send(zombie, topic, ["z0", "z1", "z2"])
    successor = transactional(c, txn)
    with pytest.raises(KafkaException) as failed:
        zombie.commit_transaction(60)
    assert failed.value.args[0].code() == KafkaError._FENCED
    successor.begin_transaction()
    send(successor, topic, ["s0", "s1", "s2"])
    successor.commit_transaction(60)
    assert read(c, topic, committed=True) == ["s0", "s1", "s2"]
    assert read(c, topic, committed=False) == ["s0", "s1", "s2", "z0", "z1", "z2"]


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(txn_cluster: Cluster) -> None:
    c = txn_cluster
    topic = new_topic(c)
    txn = f"slow-{topic}"
    slow = transactional(c, txn, **{"transaction.timeout.ms": 3000})
    slow.begin_transaction()
    send(slow, topic, ["late0", "late1", "late2"])
    wait_for(lambda: txn_state(c, txn) == "CompleteAbort", "the timeout's abort", timeout=60)
    with pytest.raises(KafkaException) as failed:
        slow.commit_transaction(60)
    assert failed.value.args[0].code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert read(c, topic, committed=True) == []
    assert read(c, topic, committed=False) == ["late0", "late1", "late2"]


def test_a_partition_leader_killed_mid_transaction(txn_cluster: Cluster) -> None:
    """kill -9 of the leader of one of a transaction's partitions (not its coordinator)
    after its values were written: the new leader (a follower that copied them) knows the
    open transaction, takes the commit's marker, and the transaction is read whole; the
    next transaction's abort reaches it too. The victim comes back and catches up."""
    c = txn_cluster
    topic = new_topic(c)
    txn = f"leader-{topic}"
    p = transactional(c, txn)
    coordinator = coordinator_of(c, txn)
    admin = AdminClient(c.client())
    leaders = {
        part.id: part.leader
        for part in admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
    }
    victim_partition, victim = next((q, b) for q, b in sorted(leaders.items()) if b != coordinator)
    p.begin_transaction()
    send(p, topic, ["first0", "first1", "first2"])
    p.commit_transaction(60)
    p.begin_transaction()
    send(p, topic, ["open0", "open1", "open2"])  # acks=all: the followers have them
    c.nodes[victim].kill()
    try:
        # The commit's marker waits for a new leader of the victim's partition.
        p.commit_transaction(SESSION_TIMEOUT_MS / 1000 + 60)
        p.begin_transaction()
        send(p, topic, ["late0", "late1", "late2"])
        p.abort_transaction(60)

        def led_elsewhere() -> bool:
            md = admin.list_topics(topic, timeout=5).topics[topic].partitions[victim_partition]
            return md.leader not in (-1, victim)

        assert led_elsewhere()
        expected = ["first0", "first1", "first2", "open0", "open1", "open2"]
        assert read(c, topic, committed=True) == expected
        assert read(c, topic, committed=False) == sorted([*expected, "late0", "late1", "late2"])
    finally:
        c.nodes[victim].launch()
        c.nodes[victim].wait_started()

    def whole() -> bool:
        md = admin.list_topics(topic, timeout=5).topics[topic]
        return all(len(part.isrs) == 3 for part in md.partitions.values())

    wait_for(whole, "the victim back in every ISR", timeout=90)
    # Its copy agrees: led by it again, the partition reads the same.
    assert read(c, topic, committed=True) == expected


def test_the_coordinator_killed_mid_transaction(txn_cluster: Cluster) -> None:
    """Last in the module: it kills a broker (and starts it again)."""
    c = txn_cluster
    topic = new_topic(c)
    txn = f"failover-{topic}"
    p = transactional(c, txn)
    p.begin_transaction()
    send(p, topic, ["before0", "before1", "before2"])
    p.commit_transaction(60)
    p.begin_transaction()
    send(p, topic, ["during0", "during1", "during2"])
    victim = coordinator_of(c, txn)
    c.nodes[victim].kill()
    try:
        # Another broker takes the transaction over (after the victim's session ends) and
        # the producer commits through it.
        wait_for(
            lambda: coordinator_of(c, txn) != victim,
            "a new coordinator",
            timeout=SESSION_TIMEOUT_MS / 1000 + 60,
        )
        p.commit_transaction(120)
        assert read(c, topic, committed=True) == [
            "before0",
            "before1",
            "before2",
            "during0",
            "during1",
            "during2",
        ]
        wait_for(lambda: txn_state(c, txn) == "CompleteCommit", "the commit to complete")
        # The producer carries on with the new coordinator.
        p.begin_transaction()
        send(p, topic, ["after0"])
        p.abort_transaction(60)
        assert "after0" not in read(c, topic, committed=True)
    finally:
        c.nodes[victim].launch()
        c.nodes[victim].wait_started()
