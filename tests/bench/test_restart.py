"""bench.restart end to end on a small data set: a real broker filled, killed with -9 and
started again on the same data, until every partition serves its acknowledged records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import systems
from tests.bench.run import bench, bench_rows


@pytest.mark.timeout(300)
@pytest.mark.parametrize("system", ["kbroker", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_killed_broker_is_timed_until_it_serves_every_record_again(
    system: str, tmp_path: Path
) -> None:
    if system == "kafka" and not systems.kafka_available("3.9.1"):
        pytest.skip("Kafka 3.9.1's jars are not fetched (bench/kafka/fetch.sh 3.9.1)")
    results = tmp_path / "restart.jsonl"
    [row] = bench_rows(
        "bench.restart", "--gib", "0.05", "--partitions", "20", "--systems", system,
        "--data-dir", str(tmp_path), "--results", str(results), "--timeout", "120",
        timeout=280,
    )  # fmt: skip
    assert row == json.loads(results.read_text())
    assert row["system"] == system and row["partitions"] == 20
    assert row["records"] > 40_000 and row["value_gib"] > 0.04
    assert 0 < row["listening_s"] <= row["served_s"] < 120
    assert row["restart_cpu_s"] > 0 and row["restart_peak_rss_mb"] > 0
    # The data directory went with the run.
    assert [p.name for p in tmp_path.iterdir()] == ["restart.jsonl"]


def test_bad_sizes_get_a_usage_error_not_a_traceback() -> None:
    proc = bench("bench.restart", "--gib", "0", "--systems", "kbroker", timeout=60)
    assert proc.returncode == 2 and "must be positive" in proc.stderr
    assert "Traceback" not in proc.stderr
