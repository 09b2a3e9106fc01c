"""Kafka Streams 3.9.1's word count with processing.guarantee=exactly_once_v2 on a 3-broker
ZooKeeper cluster, the broker coordinating its transactions killed (kill -9) and restarted
while lines keep coming: the counts read with read_committed are exact at the end, and with
no record cache each word's committed counts are exactly 1, 2, ... its number in the input
(none repeated, none lost, none past it). Afterwards Kafka's kafka-transactions tool lists
the application's transactional id at its coordinator and finds no hanging transaction on
the partitions it wrote. Kafka 3.9.1's cluster first (proving the test), then kbroker's,
with the same settings.

A short run of bench/streams_eos.py (`run_word_count`); the long one is
``python -m bench.streams_eos``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.java import JavaMissing
from bench.streams_eos import Plan, run_word_count, streams_available
from confluent_kafka.admin import AdminClient

from tests.broker.transactions import coordinator, kafka_transactions, tool_rows
from tests.cluster.nodes import SYSTEMS, Cluster, fresh_cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

# The same names and values for both systems.
SETTINGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "replica.lag.time.max.ms": "5000",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
}
# 10 s of input; the victim goes down after 1.5 s and is started again 7 s later, past the
# ZooKeeper session's 6 s: the controller moves its leaderships and its transaction
# coordinator's partitions while the application keeps going.
PLAN = Plan(lines=1600, rate=160, kill_at=0.15, restart_at=0.85, settle_timeout=90)


@pytest.fixture(params=SYSTEMS)
def streams_cluster(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    if not streams_available():
        pytest.skip("needs Kafka Streams' jars (bench/kafka/fetch-streams.sh)")
    root = tmp_path_factory.mktemp(f"streams-{request.param}")
    with fresh_cluster(request.param, zookeeper.connect, "streams", root, SETTINGS) as c:
        yield c
        if c.system == "kbroker":
            for node in c.nodes.values():
                assert "Traceback" not in node.output(), node.tail()


def test_streams_word_count_exactly_once_through_a_broker_kill(
    streams_cluster: Cluster, tmp_path: Path
) -> None:
    c = streams_cluster
    try:
        outcome = run_word_count(
            c.system,
            c.client(),
            {i: n.bootstrap for i, n in c.nodes.items()},
            lambda i: c.nodes[i].kill(),
            lambda i: c.nodes[i].restart(),
            tmp_path,
            PLAN,
            print,
        )
    except JavaMissing as exc:
        pytest.skip(str(exc))
    print(outcome.summary())
    assert outcome.victim in c.nodes
    assert outcome.exact_after_s is not None, outcome
    assert outcome.wrong == {}, outcome
    assert (outcome.over_counts, outcome.regressions) == (0, 0), outcome
    assert outcome.committed_records == outcome.words, outcome
    assert outcome.exact

    # Kafka's kafka-transactions tool afterwards: the application's transactional id is
    # listed by its coordinator (as FindCoordinator names it) and was completed.
    listed = [
        r
        for r in tool_rows(kafka_transactions(c.bootstrap, "list"))
        if r[0].startswith(outcome.application_id)
    ]
    assert listed, "the application's transactional id is not listed"
    for txn, coordinator_id, _, state in listed:
        found = coordinator([n.bootstrap for n in c.nodes.values()], txn, key_type=1)
        assert found is not None and str(found[1]) == coordinator_id
        assert state in ("CompleteCommit", "CompleteAbort", "Empty"), listed
    assert outcome.words == PLAN.lines * PLAN.words

    # Any replica answers DescribeProducers, followers too (the tool's --broker-id): the
    # producers a follower of the output rebuilt from what it replicated are those its
    # leader knows. No transaction hangs on any partition of the broker, through the kill
    # (find-hanging asks it about each partition it holds: every one of the input, the
    # output and the application's internal topics, 3 replicas each).
    md = AdminClient(c.client()).list_topics(outcome.sink, timeout=10).topics[outcome.sink]
    sink0 = md.partitions[0]
    follower = next(r for r in sink0.replicas if r != sink0.leader)
    where = ("describe-producers", "--topic", outcome.sink, "--partition", "0")
    leader_rows = tool_rows(kafka_transactions(c.bootstrap, *where))
    assert leader_rows
    assert tool_rows(kafka_transactions(c.bootstrap, *where, "--broker-id", str(follower))) == (
        leader_rows
    )
    out = kafka_transactions(
        c.bootstrap,
        "find-hanging",
        "--broker-id",
        str(follower),
        "--max-transaction-timeout",
        "0",
    )
    assert tool_rows(out) == [], out
