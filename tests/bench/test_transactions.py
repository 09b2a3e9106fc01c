"""The transactional rows of `python -m bench --transactions`, in seconds: the rows' shapes,
the transactional load generator and the read_committed check against a real kbroker, and
the report's Transactions section. (The full run, both systems on one node and on three
brokers, takes minutes: bench/README.md.)"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from bench.transactions import committed_visible
from bench.workloads import FULL, QUICK, TRANSACTION_PARTITIONS, transactions_session

from bench import loadgen, report
from tests.helpers import BrokerProcess


def test_transaction_rows_are_one_ten_thousand_and_a_hundred_records_per_setup() -> None:
    single, rf3 = transactions_session(FULL), transactions_session(QUICK, replicas=3, producers=2)
    assert [w.name for w in single] == ["txn.single.t1", "txn.single.t100", "txn.single.t10000"]
    assert [w.name for w in rf3] == ["txn.rf3.t1", "txn.rf3.t100", "txn.rf3.t10000"]
    assert [w.transaction_records for w in single] == [1, 100, 10_000]
    for w in single + rf3:
        assert w.kind == "transactions" and w.acks == "all" and w.record_bytes == 1024
        assert w.partitions == TRANSACTION_PARTITIONS
        # Whole transactions for every producer, at least one each.
        assert w.records >= w.transaction_records * w.producers
    assert {w.replicas for w in rf3} == {3} and {w.producers for w in rf3} == {2}


@pytest.mark.timeout(120)
def test_transactional_producers_commit_what_they_count_and_only_that_is_visible(
    broker: BrokerProcess,
) -> None:
    from confluent_kafka import Producer

    topic = f"txn-bench-{uuid.uuid4().hex[:6]}"
    loadgen.create_topic(broker.bootstrap, topic, TRANSACTION_PARTITIONS)
    started: list[bool] = []
    r = loadgen.produce_transactions(
        broker.bootstrap, topic, TRANSACTION_PARTITIONS, 40, 10, 100, 2,
        on_start=lambda: started.append(True),
    )  # fmt: skip
    assert started == [True]
    assert (r.records, r.transactions, r.failed_transactions, r.errors) == (40, 4, 0, 0)
    assert len(r.commit_ms) == 4 and all(ms > 0 for ms in r.commit_ms)
    assert r.elapsed > 0 and r.client_cpu_s >= 0

    # An aborted transaction's records are in the log; a read_committed reader skips them.
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "bench-abort"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"aborted", partition=i % TRANSACTION_PARTITIONS)
    p.flush(30)
    p.abort_transaction(30)
    assert committed_visible(broker.bootstrap, topic, 40, timeout=30) == 40
    # (librdkafka reads committed data by default: kcat is told otherwise.)
    uncommitted = {"isolation.level": "read_uncommitted"}
    assert loadgen.consume(broker.bootstrap, topic, 1, 30, client=uncommitted).records == 45


def _row(system: str, workload: str, rep: int, **values: Any) -> dict[str, Any]:
    n = int(workload.rsplit(".t", 1)[1])
    return {
        "system": system,
        "version": "v",
        "workload": workload,
        "settings": {"kind": "transactions"},
        "rep": rep,
        "records": values.pop("records", 40),
        "records_per_transaction": n,
        "broker_peak_rss_mb": 50.0,
        "client_cpu_util": 0.1,
        "broker_cpu_util": 0.5,
        **values,
    }


def test_report_has_each_setup_and_size_per_system_and_kbroker_against_kafka(
    tmp_path: Path,
) -> None:
    rows = [{"type": "machine", "cpus": 2}]
    for rep in (1, 2, 3):
        rows += [
            _row("kbroker", "txn.single.t1", rep, records_s=2000 + rep, transactions_s=2000,
                 mb_s=2.0, broker_cpu_s_per_gb=300.0, broker_cpu_ms_per_transaction=0.3,
                 commit_p50_ms=2.0, commit_p99_ms=9.0, visible_records=40),
            _row("kafka", "txn.single.t1", rep, records_s=1000, transactions_s=1000, mb_s=1.0,
                 broker_cpu_s_per_gb=900.0, broker_cpu_ms_per_transaction=0.9,
                 commit_p50_ms=8.0, commit_p99_ms=20.0, visible_records=40),
            _row("kbroker", "txn.rf3.t10000", rep, records_s=50_000, transactions_s=5,
                 mb_s=51.2, broker_cpu_s_per_gb=12.0, broker_cpu_ms_per_transaction=123.0,
                 commit_p50_ms=100.0, commit_p99_ms=200.0,
                 visible_records=40 if rep != 2 else 39),
        ]  # fmt: skip
    text = report.render(rows, tmp_path, plots=False).read_text()
    section = text.split("## Transactions", 1)[1].split("\n## ", 1)[0]
    assert "| single | 1 | kbroker | 2,002 | 2,000 | 2.0 | 300.00 | 0.30 | 2.00 | 9.00 |" in section
    assert "| single | 1 | kafka | 1,000 | 1,000 | 1.0 | 900.00 | 0.90 | 8.00 | 20.00 |" in section
    # A repetition where the read_committed reader saw fewer than were committed shows.
    assert "| rf3 | 10,000 | kbroker |" in section and "40 of 40, 39 of 40, 40 of 40" in section
    # kbroker/Kafka throughput, Kafka/kbroker CPU per GB and commit p50.
    assert "| single | 1 | 2.00 | 3.00 | 4.00 |" in section
    assert "| rf3 |" not in section.split("kbroker/Kafka records/s", 1)[1]
    # A transactions run is not held to the other workloads' targets.
    assert "omb.rate50" not in text and "| txn.single.t1 | commit |" in text
