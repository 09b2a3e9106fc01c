"""bench.wire, the wire-level load generator, against a real kbroker and a real Apache Kafka.

What it reports must be what the broker holds: the records it counts as acknowledged are
read back by a real client (confluent-kafka), partition by partition and value by value;
its consume counts exactly the records produced; an error code in an answer is counted
and reported, not crashed on. Each broker is started once per module: kbroker, and Apache
Kafka 4.1.1 (KRaft, bench.systems.kafka_node, the benchmark's Kafka) as a ``kafka``-marked
reference run (``--kafka-reference``), which shows both brokers accept its requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.loadgen import create_topic
from confluent_kafka import Consumer, TopicPartition

from bench import systems, wire
from tests.helpers import BrokerProcess

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(
    scope="module",
    params=["kbroker", pytest.param("kafka4", marks=pytest.mark.kafka)],
)
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"wire-{request.param}")
    if request.param == "kbroker":
        node = BrokerProcess(root / "data").start()
        try:
            yield node.bootstrap
        finally:
            node.stop()
    else:
        if not systems.kafka_available():
            pytest.skip("Kafka's jars are not fetched (bench/kafka/fetch.sh)")
        with systems.kafka_node(root, {}, None, log_path=root / "kafka.log") as broker:
            yield broker.bootstrap


def _read_back(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> list[tuple[int, bytes]]:
    """Every record of ``topic`` as (partition, value), read from offset 0 by confluent-kafka
    until ``expected`` arrived and a further second brought nothing."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msgs = consumer.consume(10_000, 0.2)
            for m in msgs:
                assert m.error() is None, m.error()
                got.append((m.partition(), m.value()))
            if msgs:
                quiet_since = time.monotonic()
            elif len(got) >= expected and time.monotonic() - quiet_since > 1.0:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.timeout(180)
def test_acknowledged_records_are_the_ones_a_client_reads_back_and_consume_counts_them(
    bootstrap: str,
) -> None:
    topic, partitions = "wire-check", 4
    create_topic(bootstrap, topic, partitions)
    batches = wire.build_batches(count=8, records_per_batch=50, record_bytes=200)
    # 8 batches over 4 partitions, 2 per request: 4 distinct requests; 5 rounds of them.
    row, result = wire.produce(
        bootstrap,
        topic,
        seconds=30,
        max_records=20 * 100,
        record_bytes=200,
        partitions_per_request=2,
        connections=2,
        in_flight=3,
        batches=batches,
    )
    assert row["errors"] == 0 and row["fatal"] is None, json.dumps(row)
    assert row["records"] == row["records_sent"] == 2000
    assert set(result.acked_by_partition) == set(range(partitions))
    assert row["client_cpu_s"] > 0 and len(row["thread_cpu_s"]) == 2
    assert row["publish_p50_ms"] > 0

    got = _read_back(bootstrap, topic, partitions, row["records"])
    assert len(got) == row["records"]
    assert Counter(p for p, _ in got) == result.acked_by_partition
    sent_values = {v for vals in batches.values for v in vals}
    assert len(sent_values) == 8 * 50  # every value of the set distinct
    read_values = Counter(v for _, v in got)
    assert set(read_values) == sent_values
    assert all(n == 5 for n in read_values.values())  # each batch went out 5 times

    crow, cresult = wire.consume(bootstrap, topic, connections=2, timeout=60)
    assert crow["complete"] and crow["errors"] == 0, crow
    assert crow["offsets"] == crow["records"] == row["records"]
    assert cresult.records_by_partition == result.acked_by_partition
    assert crow["bytes"] > row["records"] * 200


@pytest.mark.timeout(120)
def test_the_command_line_prints_one_json_line_and_counts_errors(bootstrap: str) -> None:
    topic = "wire-too-large"
    # Batches of 20 KB against a 1,000-byte limit: every partition answers MESSAGE_TOO_LARGE.
    create_topic(bootstrap, topic, 2, config={"max.message.bytes": "1000"})
    cmd = [sys.executable, "-m", "bench.wire", "produce", "--bootstrap", bootstrap]
    proc = subprocess.run(
        [*cmd, "--topic", topic, "--seconds", "5", "--record-bytes", "1000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stdout.splitlines()
    row = json.loads(line)
    assert row["records"] == 0 and row["errors"] >= 1, line
    assert row["fatal"] == "MESSAGE_TOO_LARGE", line
    assert set(row["error_codes"]) == {"MESSAGE_TOO_LARGE"}, line
    assert "Traceback" not in proc.stderr

    missing = subprocess.run(
        [*cmd, "--topic", "wire-no-such-topic", "--seconds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and missing.stdout == ""
    assert (
        missing.stderr.startswith("bench.wire: ") and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    )
    assert "Traceback" not in missing.stderr


@pytest.mark.timeout(60)
def test_a_fixed_rate_with_acks_all_is_kept(bootstrap: str) -> None:
    topic = "wire-rate"
    create_topic(bootstrap, topic, 3)
    # 3,000 records/s in requests of 10 records: 300 requests/s over two connections.
    row, result = wire.produce(
        bootstrap,
        topic,
        seconds=2,
        record_bytes=100,
        records_per_batch=10,
        partitions_per_request=1,
        acks=-1,
        rate=3000,
    )
    assert row["errors"] == 0 and row["acks"] == -1, json.dumps(row)
    assert 0.85 * 6000 <= row["records"] <= 1.05 * 6000, json.dumps(row)
    assert sum(result.acked_by_partition.values()) == row["records"]
    assert len(result.latencies_ms) == row["requests"] and row["publish_p99_ms"] < 1000


def test_count_batches_reads_whole_batches_only() -> None:
    from kbroker._kbroker import build_batch

    first = build_batch([(None, b"a" * 10, [])] * 3, base_offset=0)
    second = build_batch([(None, b"b" * 10, [])] * 4, base_offset=3)
    records = memoryview(first + second[:-5])  # the second cut short, as a fetch limit cuts it
    assert wire.count_batches(records, 0) == (3, len(first), 3)
    assert wire.count_batches(memoryview(first + second), 0) == (7, len(first) + len(second), 7)
    # Batches wholly before the fetch offset (a broker may send them) are not counted.
    assert wire.count_batches(memoryview(first + second), 3) == (4, len(second), 7)


@pytest.mark.timeout(120)
def test_a_following_consume_reads_what_a_producer_writes_meanwhile_and_no_earlier_record(
    bootstrap: str,
) -> None:
    """``--follow-stdin`` as the harness's wire.prodcons runs it: the consume starts at the end
    of a topic that already holds records, follows a producer until told to stop, and then
    reads to the end offsets of that moment: exactly the records written meanwhile."""
    topic, partitions = "wire-follow", 3
    create_topic(bootstrap, topic, partitions)
    shape = {"record_bytes": 300, "records_per_batch": 100, "partitions_per_request": 3}
    before, _ = wire.produce(bootstrap, topic, max_records=600, seconds=20, **shape)
    assert before["errors"] == 0 and before["records"] == 600
    produce_args = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    produce_args += ["--records", "6000", "--seconds", "20"]
    with wire.WireProcess("consume", bootstrap, topic, "--follow-stdin") as consumer:
        consumer.started(60)  # its start offsets taken: only now may the producer begin
        with wire.WireProcess("produce", bootstrap, topic, *produce_args) as producer:
            producer.started(60)
            wrote = producer.row(60)
        consumer.end_follow()
        read = consumer.row(60)
    assert wrote["errors"] == 0 and wrote["records"] == 6000, wrote
    assert read["complete"] and read["errors"] == 0, read
    assert read["records"] == read["offsets"] == wrote["records"], (read, wrote)
    assert read["followed_s"] > 0 and read["drain_s"] >= 0


@pytest.mark.timeout(60)
def test_a_process_that_fails_before_its_timed_part_is_reported_not_waited_for(
    bootstrap: str,
) -> None:
    proc = wire.WireProcess("produce", bootstrap, "wire-never-created", "--seconds", "1")
    with pytest.raises(wire.WireError, match=r"did not start:.*UNKNOWN_TOPIC_OR_PARTITION"):
        proc.started(30)
    assert proc.proc.poll() is not None
