"""Transactional offset commits across a 3-broker cluster, and their group coordinator killed
mid-transaction: Apache Kafka 3.9.1 in ZooKeeper mode first, then kbroker.

A stream processor (a read_committed consumer in a group and a transactional
producer, confluent-kafka) reads a replicated topic and writes each batch's
results with its input offsets in one transaction. Midway, with a transaction
holding offsets, the group's coordinator (the leader of its
``__consumer_offsets`` partition; not the transaction's coordinator) is
killed -9: the new leader loads the partition, the offsets are still pending
there (UNSTABLE_OFFSET_COMMIT), and the transaction's commit makes them the
group's. Every input is in the output exactly once for read_committed readers,
and the group ends committed at the end of the input.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from kbroker.protocol import ErrorCode
from tests.broker.transactions import (
    consume,
    consumer,
    coordinator,
    fetch_offsets,
    new_topic,
    produce_inputs,
    read_sink,
    run_in_transaction,
    settled,
    transactional_producer,
)
from tests.cluster.nodes import SESSION_TIMEOUT_MS, SYSTEMS, fresh_cluster
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

E = ErrorCode
SETTINGS = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "3000",
}
PARTITIONS = 3
INPUTS = 60


@pytest.fixture(params=SYSTEMS)
def system(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_offsets_survive_their_coordinators_kill_mid_transaction(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with fresh_cluster(system, zookeeper.connect, "txoff", tmp_path, SETTINGS) as cl:
        conf = cl.client()
        nodes = [n.bootstrap for n in cl.nodes.values()]
        source = new_topic(conf, PARTITIONS, replicas=3)
        sink = new_topic(conf, 1, replicas=3)
        group = f"g-{source}"
        inputs = produce_inputs(conf, source, PARTITIONS, INPUTS)
        _, group_node = wait_for(lambda: coordinator(nodes, group), "the group's coordinator")
        # A transactional id coordinated elsewhere: the kill takes the group's coordinator
        # only, so the transaction itself carries on.
        transactional_id = next(
            t
            for t in (f"tx-{uuid.uuid4().hex[:8]}" for _ in range(200))
            if wait_for(lambda t=t: coordinator(nodes, t, 1), "a transaction coordinator")[1]
            != group_node
        )
        c = consumer(conf, group, **{"session.timeout.ms": 30000})
        p = transactional_producer(conf, transactional_id)
        c.subscribe([source])
        try:
            done = 0
            # Two rounds, then one left open while the group's coordinator dies.
            while done < INPUTS // 3:
                batch = consume(c, 10)
                assert batch, "the source ran dry"
                if run_in_transaction(p, c, batch, sink):
                    done += len(batch)
            batch = consume(c, 10)
            assert batch
            p.begin_transaction()
            for msg in batch:
                p.produce(sink, msg.value().upper())
            positions = c.position(c.assignment())
            p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 60)
            # (librdkafka leaves out partitions with no position yet.)
            held = {tp.partition: tp.offset for tp in positions if tp.offset >= 0}
            assert held

            started = time.monotonic()
            cl.nodes[group_node].kill()
            live = [n.bootstrap for n in cl.nodes.values() if n.alive]
            moved = wait_for(
                lambda: (
                    (found := coordinator(live, group)) is not None
                    and found[1] != group_node
                    and found
                ),
                "a new group coordinator",
                timeout=SESSION_TIMEOUT_MS / 1000 + 30,
            )
            pending = fetch_offsets(live, group, source, sorted(held))
            print(
                f"\n[{system}] group coordinator {group_node} killed; broker {moved[1]} "
                f"serves the group after {time.monotonic() - started:.1f}s: {pending}"
            )
            assert pending == dict.fromkeys(held, E.UNSTABLE_OFFSET_COMMIT)
            p.commit_transaction(60)
            done += len(batch)
            assert settled(live, group, source, sorted(held)) == held

            # The rest of the input, through the new coordinator.
            deadline = time.monotonic() + 120
            while done < INPUTS:
                assert time.monotonic() < deadline, f"processed {done} of {INPUTS} in 120s"
                batch = consume(c, 10, timeout=5)
                if batch and run_in_transaction(p, c, batch, sink):
                    done += len(batch)
        finally:
            c.close()

        live_conf = cl.client(",".join(live))
        expected = sorted(v.upper().encode() for v in inputs)
        assert sorted(read_sink(live_conf, sink, "read_committed", INPUTS)) == expected
        ends = {q: INPUTS // PARTITIONS for q in range(PARTITIONS)}
        assert settled(live, group, source, list(ends)) == ends
        # What a member of the group would start from (librdkafka asks with require_stable).
        member = consumer(live_conf, group)
        try:
            committed = member.committed([TopicPartition(source, q) for q in ends], 30)
        finally:
            member.close()
        assert {tp.partition: tp.offset for tp in committed} == ends
