"""bench.stall end to end, briefly: a probe alone, then beside a flush.messages=1 load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.run import bench, bench_rows


@pytest.mark.timeout(200)
def test_the_probe_is_measured_alone_then_beside_the_flushing_load(tmp_path: Path) -> None:
    results = tmp_path / "stall.jsonl"
    rows = bench_rows(
        "bench.stall", "--io-threads", "2", "--seconds", "1", "--partitions", "2",
        "--probe-rate", "100", "--data-dir", str(tmp_path), "--results", str(results),
        timeout=180,
    )  # fmt: skip
    assert rows == [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["system"], r["io_threads"], r["phase"]) for r in rows] == [
        ("kbroker", 2, "unloaded"),
        ("kbroker", 2, "loaded"),
    ]
    for r in rows:
        assert r["probe_errors"] == 0 and r["probe_requests"] >= 50
        assert 0 < r["probe_p50_ms"] <= r["probe_p99_ms"] <= r["probe_p999_ms"]
    unloaded, loaded = rows
    assert unloaded["load_mb_s"] is None and loaded["load_mb_s"] > 0
    assert [p.name for p in tmp_path.iterdir()] == ["stall.jsonl"]


def test_an_unknown_system_gets_a_usage_error_not_a_traceback() -> None:
    proc = bench("bench.stall", "--systems", "redpanda", timeout=60)
    assert proc.returncode == 2 and "'redpanda'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_negative_load_rate_gets_a_usage_error() -> None:
    proc = bench("bench.stall", "--load-rate", "-5", timeout=60)
    assert proc.returncode == 2 and "--load-rate must be" in proc.stderr
    assert "Traceback" not in proc.stderr
