"""Offsets committed in transactions, on one broker: Apache Kafka 3.9.1 first, then kbroker.

A transactional producer commits a consumer group's offsets with
``send_offsets_to_transaction`` (AddOffsetsToTxn, then TxnOffsetCommit to the
group coordinator). The offsets are the group's only once the transaction
commits; until its marker, OffsetFetch with require_stable (KIP-447) answers
UNSTABLE_OFFSET_COMMIT, and at abort they are dropped. Of a transactional
commit and a consumer's commit of the same partition, the later record wins
when the transaction commits. A pending transactional commit survives a crash
of the broker (kill -9): it is replayed from ``__consumer_offsets`` and ends
with its transaction. The consume-transform-produce loop built on this is
exactly once.

Every test runs on both systems (the ``single`` fixture: one broker of each
for the module, Kafka's first, with the same settings); the restart test
comes last (it restarts the module's broker).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from kbroker.coordinator.consumer_protocol import encode_subscription
from kbroker.coordinator.records import partition_for
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import InitProducerIdRequest
from kbroker.protocol.messages.group import (
    FindCoordinatorRequest,
    JoinGroupRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from kbroker.protocol.messages.txn import AddOffsetsToTxnRequest, EndTxnRequest
from tests.broker.transactions import (
    consume,
    consumer,
    fetch_offsets,
    new_topic,
    produce_inputs,
    read_sink,
    rewind,
    run_in_transaction,
    settled,
    transactional_producer,
)
from tests.cluster.kafka_zk import prepare_kafka_zk_broker, require_kafka
from tests.helpers import BrokerProcess, Wire, free_port, wait_for
from tests.zookeeper import zk_session

pytestmark = pytest.mark.timeout(180)

E = ErrorCode
# Answers to ask again: the coordinator loads, or the transaction's last end completes.
_RETRY = (E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.CONCURRENT_TRANSACTIONS)
# ZooKeeper's session of Kafka's broker: a restart after kill -9 waits for it to expire.
ZK_SESSION_MS = 6000
SETTINGS = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class Single:
    system: str
    bootstrap: str
    # kill -9, then start again on the same data and port
    restart: Callable[[], None]

    @property
    def conf(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}

    @property
    def bootstraps(self) -> list[str]:
        return [self.bootstrap]


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def single(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Single]:
    system = str(request.param)
    root = tmp_path_factory.mktemp(f"txn-offsets-{system}")
    if system == "kafka":
        require_kafka()
        zookeeper = request.getfixturevalue("zookeeper")
        chroot = f"/txn-offsets-{uuid.uuid4().hex[:8]}"
        kafka = prepare_kafka_zk_broker(
            zookeeper.connect,
            chroot,
            root,
            settings={**SETTINGS, "zookeeper.session.timeout.ms": str(ZK_SESSION_MS)},
        )

        def restart_kafka() -> None:
            kafka.kill()
            # The killed broker's registration lasts until its ZooKeeper session expires;
            # a broker started before that refuses to start.
            with zk_session(zookeeper.connect + chroot) as zk:
                wait_for(lambda: not zk.exists("/brokers/ids/1"), "the old session to expire")
            kafka.launch()
            kafka.wait_started()

        kafka.launch()
        try:
            kafka.wait_started()
            yield Single(system, kafka.bootstrap, restart_kafka)
        finally:
            kafka.kill()
    else:
        broker = BrokerProcess(root / "data", port=free_port())
        settings = [f"{k}={v}" for k, v in SETTINGS.items()]
        broker.start(*settings)

        def restart() -> None:
            broker.kill()
            broker.start(*settings)

        try:
            yield Single(system, broker.bootstrap, restart)
        finally:
            broker.kill()


def test_offsets_wait_for_the_transaction_and_go_at_abort(single: Single) -> None:
    topic = new_topic(single.conf, 2)
    group = f"g-{topic}"
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 30)
        # Pending: stable readers are told to retry; the committed offset is still 3.
        assert fetch_offsets(single.bootstraps, group, topic, [0, 1]) == {
            0: E.UNSTABLE_OFFSET_COMMIT,
            1: -1,
        }
        p.commit_transaction(30)
        assert settled(single.bootstraps, group, topic, [0, 1]) == {0: 7, 1: -1}

        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 9), TopicPartition(topic, 1, 4)], meta, 30
        )
        assert fetch_offsets(single.bootstraps, group, topic, [0, 1]) == {
            0: E.UNSTABLE_OFFSET_COMMIT,
            1: E.UNSTABLE_OFFSET_COMMIT,
        }
        p.abort_transaction(30)
        assert settled(single.bootstraps, group, topic, [0, 1]) == {0: 7, 1: -1}
    finally:
        c.close()


def test_the_later_record_wins_between_a_transaction_and_a_consumer(single: Single) -> None:
    """A consumer's commit made while a transaction holds offsets of the same partition:
    whichever record is later in ``__consumer_offsets`` is the committed offset once the
    transaction commits (Kafka orders them by record offset, not by marker)."""
    topic = new_topic(single.conf, 1)
    group = f"g-{topic}"
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    try:
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 11)], meta, 30)
        c.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
        p.commit_transaction(30)
        assert settled(single.bootstraps, group, topic, [0]) == {0: 12}

        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 15)], meta, 30)
        p.commit_transaction(30)
        assert settled(single.bootstraps, group, topic, [0]) == {0: 15}
    finally:
        c.close()


def test_consume_transform_produce_is_exactly_once(single: Single) -> None:
    """The loop of a stream processor: read a batch, write its results and its input
    offsets in one transaction. One round is aborted and read again from the committed
    offsets: every input is in the output exactly once for read_committed readers."""
    source = new_topic(single.conf, 2)
    sink = new_topic(single.conf, 1)
    group = f"g-{source}"
    inputs = produce_inputs(single.conf, source, 2, 40)
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    c.subscribe([source])
    try:
        done = rounds = 0
        while done < len(inputs):
            batch = consume(c, 8)
            assert batch, "the source ran dry before every input was processed"
            rounds += 1
            if rounds == 2:
                # Processing failed: nothing of this round counts.
                p.begin_transaction()
                for msg in batch:
                    p.produce(sink, msg.value().upper())
                p.send_offsets_to_transaction(
                    c.position(c.assignment()), c.consumer_group_metadata(), 30
                )
                # Written before the abort (which would drop what is still queued).
                assert p.flush(30) == 0
                p.abort_transaction(30)
                rewind(c)
            elif run_in_transaction(p, c, batch, sink):
                done += len(batch)
    finally:
        c.close()

    expected = sorted(v.upper().encode() for v in inputs)
    assert sorted(read_sink(single.conf, sink, "read_committed", len(inputs))) == expected
    # The aborted round's records are in the log; read_uncommitted readers see them.
    assert len(read_sink(single.conf, sink, "read_uncommitted", len(inputs) + 1)) > len(inputs)
    assert settled(single.bootstraps, group, source, [0, 1]) == {0: 20, 1: 20}
    # The group resumes after the last committed transaction: nothing is left to read.
    again = consumer(single.conf, group)
    again.subscribe([source])
    try:
        assert consume(again, 1, timeout=8) == []
    finally:
        again.close()


def _wire_transaction(w: Wire, transactional_id: str, group: str) -> tuple[int, int]:
    """A transactional id's producer id and epoch (InitProducerId), with ``group``'s
    offsets partition added to its transaction (AddOffsetsToTxn)."""
    # (Kafka creates __transaction_state when a transaction coordinator is first looked up.)
    wait_for(
        lambda: (
            w.request(
                ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=transactional_id, key_type=1)
            ).error_code
            == E.NONE
        ),
        "the transaction coordinator",
    )
    init = wait_for(
        lambda: (
            r
            if (
                r := w.request(
                    ApiKey.INIT_PRODUCER_ID,
                    3,
                    InitProducerIdRequest(
                        transactional_id=transactional_id, transaction_timeout_ms=60000
                    ),
                )
            ).error_code
            not in _RETRY
            else None
        ),
        "a producer id",
    )
    assert init.error_code == E.NONE
    add = AddOffsetsToTxnRequest(
        transactional_id=transactional_id,
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
        group_id=group,
    )
    added = wait_for(
        lambda: (
            r
            if (r := w.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, add)).error_code not in _RETRY
            else None
        ),
        "the offsets partition in the transaction",
    )
    assert added.error_code == E.NONE
    return init.producer_id, init.producer_epoch


def test_txn_offset_commit_checks_like_kafka(single: Single) -> None:
    """TxnOffsetCommit's answers inside a real transaction, on the wire: the member checks of
    v3+ (a static member fenced by instance, a generation of the past), what v0 skips, the
    producer's id and epoch, and bad input (no group, a topic that does not exist, metadata
    past offset.metadata.max.bytes). What is refused is not committed."""
    topic = new_topic(single.conf, 1)
    group = f"g-{topic}"
    with Wire(single.bootstrap) as w:
        wait_for(
            lambda: (
                w.request(
                    ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group, key_type=0)
                ).error_code
                == E.NONE
            ),
            "the group coordinator",
        )
        joined = w.request(
            ApiKey.JOIN_GROUP,
            5,
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=30000,
                rebalance_timeout_ms=30000,
                member_id="",
                group_instance_id="instance-1",
                protocol_type="consumer",
                protocols=[
                    JoinGroupRequest.Protocol(name="range", metadata=encode_subscription([topic]))
                ],
            ),
        )
        assert joined.error_code == E.NONE
        member, generation = joined.member_id, joined.generation_id
        synced = w.request(
            ApiKey.SYNC_GROUP,
            3,
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=member,
                group_instance_id="instance-1",
                assignments=[SyncGroupRequest.Assignment(member_id=member, assignment=b"")],
            ),
        )
        assert synced.error_code == E.NONE
        transactional_id = f"tx-{topic}"
        producer_id, epoch = _wire_transaction(w, transactional_id, group)

        def commit(
            version: int,
            offset: int,
            *,
            member_id: str = "",
            instance: str | None = None,
            generation_id: int = -1,
            group_id: str = group,
            topic_name: str = topic,
            pid: int = producer_id,
            metadata: str | None = None,
        ) -> ErrorCode:
            T = TxnOffsetCommitRequest.Topic
            request = TxnOffsetCommitRequest(
                transactional_id=transactional_id,
                group_id=group_id,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=instance,
                topics=[
                    T(
                        name=topic_name,
                        partitions=[
                            T.Partition(
                                partition_index=0,
                                committed_offset=offset,
                                committed_leader_epoch=-1,
                                committed_metadata=metadata,
                            )
                        ],
                    )
                ],
            )
            return E(
                w.request(ApiKey.TXN_OFFSET_COMMIT, version, request)
                .topics[0]
                .partitions[0]
                .error_code
            )

        me = {"member_id": member, "instance": "instance-1", "generation_id": generation}
        assert commit(3, 1, **me) == E.NONE
        assert commit(3, 2) == E.NONE  # no member, no generation: a producer outside
        assert commit(0, 3) == E.NONE
        assert commit(3, 90, member_id="nobody", generation_id=generation) == E.UNKNOWN_MEMBER_ID
        assert commit(
            3, 91, member_id=member, instance="instance-1", generation_id=generation + 1
        ) == (E.ILLEGAL_GENERATION)
        assert commit(3, 92, member_id=member, instance="instance-1") == E.ILLEGAL_GENERATION
        assert commit(
            3, 93, member_id="other", instance="instance-1", generation_id=generation
        ) == (E.FENCED_INSTANCE_ID)
        assert commit(3, 94, member_id=member, instance="instance-9", generation_id=generation) == (
            E.UNKNOWN_MEMBER_ID
        )
        assert commit(3, 95, generation_id=generation) == E.UNKNOWN_MEMBER_ID
        assert commit(3, 96, pid=-1) == E.INVALID_PRODUCER_ID_MAPPING
        assert commit(3, 97, pid=producer_id + 1) == E.INVALID_PRODUCER_ID_MAPPING
        assert commit(3, 98, group_id="") == E.INVALID_GROUP_ID
        assert commit(3, 99, topic_name="no-such-topic") == E.UNKNOWN_TOPIC_OR_PARTITION
        assert commit(3, 100, metadata="m" * 5000) == E.OFFSET_METADATA_TOO_LARGE
        # The offsets partition of another group is not in the transaction (KIP-890).
        other = next(
            g
            for g in (f"{group}-{i}" for i in range(100))
            if partition_for(g, 3) != partition_for(group, 3)
        )
        assert commit(3, 101, group_id=other) == E.INVALID_TXN_STATE

        end = w.request(
            ApiKey.END_TXN,
            3,
            EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                committed=True,
            ),
        )
        assert end.error_code == E.NONE
    # The last accepted commit is the group's; nothing refused got in.
    assert settled(single.bootstraps, group, topic, [0]) == {0: 3}


def test_a_pending_transactional_commit_survives_a_crash(single: Single) -> None:
    """kill -9 of the broker while a transaction holds offsets: reloaded from the log, they
    are still pending, and the transaction's end decides them (here: its commit)."""
    topic = new_topic(single.conf, 1)
    group = f"g-{topic}"
    c = consumer(single.conf, group)
    p = transactional_producer(single.conf)
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 5)], c.consumer_group_metadata(), 30
        )
        single.restart()
        assert fetch_offsets(single.bootstraps, group, topic, [0]) == {0: E.UNSTABLE_OFFSET_COMMIT}
        p.commit_transaction(60)
        assert settled(single.bootstraps, group, topic, [0]) == {0: 5}
    finally:
        c.close()
