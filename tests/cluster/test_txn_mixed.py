"""Transactions in a cluster of both implementations: an Apache Kafka 3.9.1 broker (id 1,
started first, so it is the controller and answers its brokers' AllocateProducerIds) and
kbroker brokers 2 and 3 on one ZooKeeper chroot.

``__transaction_state`` has one replica per partition, so a transactional id's coordinator
is the one broker holding its partition; a test puts that partition on the broker it wants
with a reassignment (Kafka's controller carries it out). Each data topic has a partition
on each broker (1, 2, 3), so a transaction's markers (WriteTxnMarkers) and the KIP-890
verifications its partitions' leaders ask for (AddPartitionsToTxn v4, verify-only) cross
from one implementation to the other, both ways:

- a confluent-kafka producer commits and aborts with a Kafka coordinator and with a
  kbroker coordinator; read_committed reads each transaction whole or not at all;
- a transactional batch to a partition not added to the transaction is refused by its
  leader after asking the coordinator, whichever kind each is, as Kafka refuses it alone,
  and accepted once the partition is added;
- an open transaction's coordinator moves to the other implementation (the partition of
  ``__transaction_state`` is copied by the other kind and led there): the new coordinator
  describes what the old one wrote, the producer commits through it, and a new instance
  with the same transactional.id carries on;
- a transaction left in PrepareCommit (one of its partitions' leader is down) is completed
  by the new coordinator of the other kind once that leader is back.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import InitProducerIdRequest, ProduceRequest
from kbroker.protocol.messages.txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    DescribeTransactionsRequest,
    EndTxnRequest,
)
from kbroker.tools.client import BrokerClient
from kbroker.txn.log import TRANSACTION_STATE_TOPIC, partition_of
from tests.cluster.kafka_zk import prepare_kafka_zk_broker, require_kafka
from tests.cluster.nodes import SESSION_TIMEOUT_MS, Cluster, KafkaNode, KbrokerNode, Node
from tests.cluster.test_reassignment import create_topic, partitions
from tests.cluster.test_transactions import coordinator_of, read, send, transactional
from tests.helpers import metadata, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

KAFKA, KBROKER, OTHER_KBROKER = 1, 2, 3
KIND = {KAFKA: "kafka", KBROKER: "kbroker", OTHER_KBROKER: "kbroker"}
TXN_PARTITIONS = 5
SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
    "unclean.leader.election.enable": "false",
}
# Not ready yet: asked again.
_RETRY = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


@pytest.fixture(scope="module")
def mixed(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    require_kafka()
    root: Path = tmp_path_factory.mktemp("txn-mixed")
    chroot = f"/txn-mixed-{uuid.uuid4().hex[:8]}"
    nodes: dict[int, Node] = {}
    with contextlib.ExitStack() as stack:
        nodes[KAFKA] = KafkaNode(
            prepare_kafka_zk_broker(zookeeper.connect, chroot, root / "k1", KAFKA, SETTINGS)
        )
        stack.callback(nodes[KAFKA].kill)
        nodes[KAFKA].launch()
        nodes[KAFKA].wait_started()
        for i in (KBROKER, OTHER_KBROKER):
            nodes[i] = KbrokerNode(
                i,
                zookeeper.connect + chroot,
                root / f"b{i}",
                [f"{k}={v}" for k, v in SETTINGS.items()],
            )
            stack.callback(nodes[i].kill)
            nodes[i].launch()
        for node in nodes.values():
            node.wait_started()
            node.wait_knows_controller()
        c = Cluster("mixed", zookeeper.connect + chroot, nodes)
        assert c.controller_id() == KAFKA
        # The first FindCoordinator for a transactional id creates __transaction_state.
        coordinator_of(c, "create-the-log")
        wait_for(
            lambda: (
                len(found := partitions(c.bootstrap, TRANSACTION_STATE_TOPIC)) == TXN_PARTITIONS
                and all(p.leader > 0 for p in found.values())
            ),
            "every partition of __transaction_state led",
            timeout=60,
        )
        yield c
        for i in (KBROKER, OTHER_KBROKER):
            assert "Traceback" not in nodes[i].output(), nodes[i].tail()


def move_transaction_log(c: Cluster, targets: dict[int, int]) -> None:
    """Puts each partition of ``__transaction_state`` in ``targets`` on the broker it names
    (its only replica, so its leader) with a reassignment, and waits until every broker
    knows the new leaders."""
    moves = {
        KTP(TRANSACTION_STATE_TOPIC, p): [broker]
        for p, broker in targets.items()
        if partitions(c.bootstrap, TRANSACTION_STATE_TOPIC)[p].replicas != [broker]
    }
    if moves:
        admin = KafkaAdminClient(bootstrap_servers=c.live_bootstrap(), request_timeout_ms=30000)
        try:
            assert admin.alter_partition_reassignments(moves) == dict.fromkeys(moves)
            wait_for(
                lambda: admin.list_partition_reassignments() == {},
                f"the reassignment of {moves}",
                timeout=60,
            )
        finally:
            admin.close()
    for node in c.nodes.values():
        if node.alive:
            wait_for(
                lambda n=node: all(
                    (part := partitions(n.bootstrap, TRANSACTION_STATE_TOPIC)[p]).leader == b
                    and part.replicas == [b]
                    for p, b in targets.items()
                ),
                f"broker {node.broker_id} to know the new leaders of {targets}",
                timeout=30,
            )


def transactional_id(label: str, avoid: Collection[int] = ()) -> tuple[str, int]:
    """A new transactional id and its partition of ``__transaction_state`` (none of
    ``avoid``)."""
    while True:
        txn = f"{label}-{uuid.uuid4().hex[:8]}"
        partition = partition_of(txn, TXN_PARTITIONS)
        if partition not in avoid:
            return txn, partition


def coordinated_by(c: Cluster, broker: int, label: str, avoid: Collection[int] = ()) -> str:
    """A new transactional id coordinated by ``broker``."""
    txn, partition = transactional_id(label, avoid)
    move_transaction_log(c, {partition: broker})
    wait_for(lambda: coordinator_of(c, txn) == broker, f"broker {broker} to coordinate {txn}")
    return txn


def new_topic(c: Cluster) -> str:
    """A topic with partition i-1 on broker i alone (1 Kafka, 2 and 3 kbroker), known to
    every broker."""
    name = f"txn-mixed-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, name, [[KAFKA], [KBROKER], [OTHER_KBROKER]])
    for node in c.nodes.values():
        wait_for(
            lambda n=node: (
                [p.leader for _, p in sorted(partitions(n.bootstrap, name).items())]
                == [KAFKA, KBROKER, OTHER_KBROKER]
            ),
            f"broker {node.broker_id} to know the leaders of {name}",
        )
    return name


def describe(c: Cluster, txn: str) -> tuple[Any, ...] | None:
    """(state, producer id, epoch, timeout, start time, sorted partitions) of ``txn`` as
    its coordinator describes it; None while it is loading or not the coordinator."""
    node = c.nodes[coordinator_of(c, txn)]
    with BrokerClient(node.bootstrap, 10) as client:
        answer = client.request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[txn])
        )
    (s,) = answer.transaction_states
    if s.error_code in _RETRY:
        return None
    assert s.error_code == ErrorCode.NONE, ErrorCode(s.error_code)
    return (
        s.transaction_state,
        s.producer_id,
        s.producer_epoch,
        s.transaction_timeout_ms,
        s.transaction_start_time_ms,
        sorted((t.topic, p) for t in s.topics for p in t.partitions),
    )


def described(c: Cluster, txn: str) -> tuple[Any, ...]:
    """``describe`` once the coordinator answers (it may be loading ``txn``)."""
    found = wait_for(lambda: describe(c, txn), f"{txn} described")
    assert found is not None
    return found


def state_of(c: Cluster, txn: str) -> str:
    found = describe(c, txn)
    return "" if found is None else str(found[0])


@pytest.mark.parametrize("coordinator", [KAFKA, KBROKER], ids=KIND.get)
def test_commit_and_abort_with_markers_across_the_kinds(mixed: Cluster, coordinator: int) -> None:
    """The coordinator of one kind writes markers to leaders of both kinds, and each leader
    verifies its first transactional batch with it."""
    c = mixed
    topic = new_topic(c)
    txn = coordinated_by(c, coordinator, f"markers-{KIND[coordinator]}")
    p = transactional(c, txn)
    for round_ in range(2):
        p.begin_transaction()
        send(p, topic, [f"c{round_}-{i}" for i in range(6)])
        p.commit_transaction(60)
        p.begin_transaction()
        send(p, topic, [f"a{round_}-{i}" for i in range(6)])
        p.abort_transaction(60)
    committed = sorted(f"c{r}-{i}" for r in range(2) for i in range(6))
    aborted = sorted(f"a{r}-{i}" for r in range(2) for i in range(6))
    assert read(c, topic, committed=True) == committed
    assert read(c, topic, committed=False) == sorted(committed + aborted)
    wait_for(lambda: state_of(c, txn) == "CompleteAbort", "the last abort to complete")


def _until_answered(client: BrokerClient, api: ApiKey, version: int, body: Any) -> Any:
    """The answer once the coordinator is ready (loading, a transaction still completing)."""
    return wait_for(
        lambda: (a := client.request(api, version, body)).error_code not in _RETRY and a,
        f"an answer to API {api}",
    )


def _transactional_batch(
    client: BrokerClient, topic: str, partition: int, pid: int, epoch: int, txn: str
) -> ErrorCode:
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (None, b"v", [])
    ]
    batch = build_batch(
        records,
        timestamp=time.time_ns() // 1_000_000,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )
    request = ProduceRequest(
        transactional_id=txn,
        acks=-1,
        timeout_ms=10000,
        topic_data=[
            ProduceRequest.Topic(
                name=topic,
                partition_data=[ProduceRequest.Topic.Partition(index=partition, records=batch)],
            )
        ],
    )
    answer = client.request(ApiKey.PRODUCE, 9, request)
    return ErrorCode(answer.responses[0].partition_responses[0].error_code)


def verified_write(c: Cluster, topic: str, coordinator: int, leader: int) -> list[ErrorCode]:
    """A transactional batch to ``leader``'s partition before and after the partition is
    added to the transaction at ``coordinator``: (first produce, AddPartitionsToTxn, second
    produce)."""
    txn = coordinated_by(c, coordinator, f"verify-{coordinator}-{leader}")
    partition = leader - 1
    with (
        BrokerClient(c.nodes[coordinator].bootstrap, 10) as at_coordinator,
        BrokerClient(c.nodes[leader].bootstrap, 10) as at_leader,
    ):
        init = _until_answered(
            at_coordinator,
            ApiKey.INIT_PRODUCER_ID,
            3,
            InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60000),
        )
        assert init.error_code == ErrorCode.NONE, ErrorCode(init.error_code)
        pid, epoch = init.producer_id, init.producer_epoch
        unverified = _transactional_batch(at_leader, topic, partition, pid, epoch, txn)
        added = _until_answered(
            at_coordinator,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[AddPartitionsToTxnTopic(name=topic, partitions=[partition])],
            ),
        )
        ((result,),) = [t.results_by_partition for t in added.results_by_topic_v3_and_below]
        verified = _transactional_batch(at_leader, topic, partition, pid, epoch, txn)
        end = _until_answered(
            at_coordinator,
            ApiKey.END_TXN,
            3,
            EndTxnRequest(
                transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=False
            ),
        )
        assert end.error_code == ErrorCode.NONE, ErrorCode(end.error_code)
    return [unverified, ErrorCode(result.partition_error_code), verified]


def test_kip890_verification_across_the_kinds(mixed: Cluster) -> None:
    """A leader asks the coordinator whether the partition is in the transaction before it
    takes a transactional batch: Kafka alone (coordinator and leader broker 1) proves the
    expected answers; then a kbroker leader asks a Kafka coordinator, a Kafka leader asks a
    kbroker coordinator, and kbroker asks itself."""
    c = mixed
    topic = new_topic(c)
    kafka_alone = verified_write(c, topic, KAFKA, KAFKA)
    assert kafka_alone == [ErrorCode.INVALID_TXN_STATE, ErrorCode.NONE, ErrorCode.NONE]
    found = {
        (coordinator, leader): verified_write(c, topic, coordinator, leader)
        for coordinator, leader in ((KAFKA, KBROKER), (KBROKER, KAFKA), (KBROKER, OTHER_KBROKER))
    }
    assert found == dict.fromkeys(found, kafka_alone)
    # Nothing of the refused batches was written, the accepted ones were aborted.
    assert read(c, topic, committed=True) == []
    assert read(c, topic, committed=False) == ["v"] * 4


@pytest.mark.parametrize(
    ("first", "then"),
    [(KBROKER, KAFKA), (KAFKA, KBROKER)],
    ids=["kbroker-to-kafka", "kafka-to-kbroker"],
)
def test_an_open_transaction_moves_to_the_other_kind(mixed: Cluster, first: int, then: int) -> None:
    """The coordinator ``first`` writes an open transaction; its partition of
    ``__transaction_state`` moves to ``then`` (which copies it, then leads it): ``then``
    describes the transaction as ``first`` did, the producer commits through it, and a new
    instance with the same transactional.id fences the old one and carries on."""
    c = mixed
    topic = new_topic(c)
    txn = coordinated_by(c, first, f"handover-{KIND[first]}")
    p = transactional(c, txn)
    p.begin_transaction()
    send(p, topic, ["before0", "before1", "before2"])
    p.commit_transaction(60)
    p.begin_transaction()
    send(p, topic, ["during0", "during1", "during2"])
    written = described(c, txn)
    assert written[0] == "Ongoing"
    assert written[5] == [(topic, 0), (topic, 1), (topic, 2)]
    move_transaction_log(c, {partition_of(txn, TXN_PARTITIONS): then})
    wait_for(lambda: coordinator_of(c, txn) == then, f"broker {then} to coordinate {txn}")
    assert described(c, txn) == written
    p.commit_transaction(60)
    wait_for(lambda: state_of(c, txn) == "CompleteCommit", "the commit to complete")
    expected = ["before0", "before1", "before2", "during0", "during1", "during2"]
    assert read(c, topic, committed=True) == expected
    successor = transactional(c, txn)
    assert described(c, txn)[2] > written[2]
    with pytest.raises(KafkaException) as fenced:
        p.begin_transaction()
        p.produce(topic, value=b"zombie", partition=0)
        p.commit_transaction(30)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    send(successor, topic, ["after0", "after1", "after2"])
    successor.commit_transaction(60)
    assert read(c, topic, committed=True) == sorted([*expected, "after0", "after1", "after2"])


def wait_unregistered(c: Cluster, broker: int) -> None:
    """Until the killed ``broker``'s registration ended with its session (only then may it
    register again) and every live broker's metadata has dropped it (the controller tells
    them after its watch fires: until then an admin client may pick it to ask)."""
    zk = c.zk()
    try:
        wait_for(
            lambda: not zk.exists(f"/brokers/ids/{broker}"),
            f"broker {broker}'s session to expire",
            timeout=SESSION_TIMEOUT_MS / 1000 + 20,
        )
    finally:
        zk.stop()
        zk.close()
    for node in c.nodes.values():
        if node.alive:
            wait_for(
                lambda n=node: broker not in known_brokers(n),
                f"broker {node.broker_id}'s metadata to drop broker {broker}",
                timeout=30,
            )


def known_brokers(node: Node) -> set[int]:
    """The broker ids in ``node``'s own answer to Metadata."""
    with BrokerClient(node.bootstrap, 10) as client:
        return {b.node_id for b in metadata(client, []).brokers}


def test_prepare_commit_is_completed_by_the_other_kind(mixed: Cluster) -> None:
    """Two transactions end in PrepareCommit while the leader of one of their partitions
    (kbroker broker 3) is down: one coordinated by kbroker, one by Kafka. Their partitions
    of ``__transaction_state`` then swap kinds; each new coordinator loads PrepareCommit
    and, once broker 3 is back, writes the markers and completes the commit. Last in the
    module: it kills broker 3 (and starts it again)."""
    c = mixed
    topic = new_topic(c)
    by_kbroker = coordinated_by(c, KBROKER, "prepared-kbroker")
    by_kafka = coordinated_by(
        c, KAFKA, "prepared-kafka", avoid={partition_of(by_kbroker, TXN_PARTITIONS)}
    )
    producers = {txn: transactional(c, txn) for txn in (by_kbroker, by_kafka)}
    for txn, p in producers.items():
        p.begin_transaction()
        send(p, topic, [f"{txn}-{i}" for i in range(3)])
    c.nodes[OTHER_KBROKER].kill()
    try:
        for p in producers.values():
            p.commit_transaction(60)  # answered once PrepareCommit is written
        for txn in producers:
            assert state_of(c, txn) == "PrepareCommit"
        # Every broker's metadata then drops broker 3 (the admin client would try it).
        wait_unregistered(c, OTHER_KBROKER)
        move_transaction_log(
            c,
            {
                partition_of(by_kbroker, TXN_PARTITIONS): KAFKA,
                partition_of(by_kafka, TXN_PARTITIONS): KBROKER,
            },
        )
        for txn, now in ((by_kbroker, KAFKA), (by_kafka, KBROKER)):
            wait_for(lambda t=txn, b=now: coordinator_of(c, t) == b, f"{now} to coordinate {txn}")
            assert described(c, txn)[0] == "PrepareCommit"
    finally:
        wait_unregistered(c, OTHER_KBROKER)
        c.nodes[OTHER_KBROKER].launch()
        c.nodes[OTHER_KBROKER].wait_started()
    for txn in producers:
        wait_for(lambda t=txn: state_of(c, t) == "CompleteCommit", f"{txn} to complete", 60)
    assert read(c, topic, committed=True) == sorted(
        f"{txn}-{i}" for txn in producers for i in range(3)
    )
