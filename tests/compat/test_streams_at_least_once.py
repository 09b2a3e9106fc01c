"""Kafka Streams 3.9.1's word count with processing.guarantee=at_least_once on one broker:
Kafka 3.9.1 (ZooKeeper mode; proves the test) and a kbroker single node.

The program of the exactly-once test (bench/java/StreamsWordCount.java, no record cache:
every count goes out) counts the words of half the lines; with no failure the output is
exact, one record per word of the input, each word's counts 1, 2, 3, ... Then the
application is killed (kill -9) before it commits, the other half is written while it is
down, and it is started again on its state: at least once, every word of the input is
counted and no count is below the word's number in the input (counts re-applied after the
kill may take some above it, by at most twice what was counted before the kill).

The exactly-once variant, through a broker kill on a 3-broker cluster, is
tests/cluster/test_streams_eos.py.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.java import JavaMissing
from bench.streams_eos import PARTITIONS, Plan, StreamsApp, corpus, read_counts, streams_available
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.systems import SYSTEMS, single_node
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PLAN = Plan(lines=400, words=5, vocabulary=60)


@pytest.fixture(scope="module", params=SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    if not streams_available():
        pytest.skip("needs Kafka Streams' jars (bench/kafka/fetch-streams.sh)")
    root = tmp_path_factory.mktemp(f"streams-alo-{request.param}")
    settings = {"group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"}
    with single_node(request.param, zookeeper, root, settings) as address:
        yield address


def write(bootstrap: str, topic: str, lines: list[str], first: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, line in enumerate(lines, first):
        producer.produce(topic, value=line.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def wait_counts(bootstrap: str, sink: str, done: object, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = read_counts({"bootstrap.servers": bootstrap}, sink, committed=False)
        if done(counts):  # type: ignore[operator]
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {counts.last}"
        time.sleep(0.5)


def test_word_count_at_least_once(bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    source, sink, app_id = f"alo-in-{tag}", f"alo-out-{tag}", f"alo-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(n, PARTITIONS, 1) for n in (source, sink)], operation_timeout=30
    ).values():
        future.result(60)
    lines = corpus(PLAN)
    half = len(lines) // 2
    before = Counter(w for line in lines[:half] for w in line.split())
    expected = Counter(w for line in lines for w in line.split())

    def start() -> StreamsApp:
        return StreamsApp(
            bootstrap,
            app_id,
            source,
            sink,
            tmp_path / "app",
            0,
            replicas=1,
            guarantee="at_least_once",
        )

    try:
        app = start()
    except JavaMissing as exc:
        pytest.skip(str(exc))
    try:
        app.wait_running(90)
        write(bootstrap, source, lines[:half], 0)
        wait_counts(bootstrap, sink, lambda c: c.last == dict(before), "the first half's counts")
        # No failure: exact, one record per word, each word's counts 1, 2, 3, ...
        exact = read_counts({"bootstrap.servers": bootstrap}, sink, committed=False)
        assert exact.last == dict(before)
        assert exact.highest == dict(before)
        assert (exact.records, exact.regressions) == (sum(before.values()), 0)
        assert app.errors == []

        # kill -9 before the application commits (commit.interval.ms is 30 s at
        # at_least_once), the rest written while it is down, then started on its state.
        app.kill()
        write(bootstrap, source, lines[half:], half)
        app = start()
        app.wait_running(90)
        wait_counts(
            bootstrap,
            sink,
            lambda c: (
                set(c.last) == set(expected) and all(c.last[w] >= n for w, n in expected.items())
            ),
            "every word counted at least as often as it was written",
        )
        counts = read_counts({"bootstrap.servers": bootstrap}, sink, committed=False)
        assert set(counts.last) == set(expected)
        short = {w: (n, counts.last[w]) for w, n in expected.items() if counts.last[w] < n}
        assert short == {}
        # What one kill can re-apply: the words counted before it, once through the state
        # restored from its changelog and once more through the repartition topic (the
        # lines re-read, their words written to it again, and all of it read again).
        over = {w: counts.last[w] - n for w, n in expected.items() if counts.last[w] > n}
        assert all(extra <= 2 * before[w] for w, extra in over.items()), (over, before)
        assert counts.records >= sum(expected.values())
        print(
            f"at least once after a kill: {counts.records} records for "
            f"{sum(expected.values())} words; "
            f"{len(over)} words over-counted"
        )
        assert app.errors == []
    finally:
        app.stop()
