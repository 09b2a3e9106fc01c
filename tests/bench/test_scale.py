"""bench.scale end to end at a small size on a real kbroker: idle client connections beside
the latency probe, and a many-partition topic's creation, Metadata, produce and restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.run import bench, bench_rows


@pytest.mark.timeout(300)
def test_connections_and_partitions_phases_report_what_they_measured(tmp_path: Path) -> None:
    results = tmp_path / "scale.jsonl"
    rows = bench_rows(
        "bench.scale", "--systems", "kbroker", "--connections", "300", "--partitions", "60",
        "--seconds", "1", "--metadata-requests", "5", "--data-dir", str(tmp_path),
        "--results", str(results), timeout=280,
    )  # fmt: skip
    assert rows == [json.loads(line) for line in results.read_text().splitlines()]
    conns, parts = rows
    assert conns["phase"] == "connections" and conns["connections"] == 300
    assert conns["rss_with_connections_mb"] > 0 and conns["open_s"] > 0
    for phase in ("alone", "beside"):
        assert conns[f"{phase}_probe_records"] > 500
        assert 0 < conns[f"{phase}_publish_p50_ms"] <= conns[f"{phase}_publish_p99_ms"]
    assert parts["phase"] == "partitions" and parts["partitions"] == 60
    assert parts["partitions_written"] == 60 and parts["produce_mb_s"] > 0
    assert 0 < parts["metadata_p50_ms"] <= parts["metadata_p99_ms"]
    assert 0 < parts["restart_listening_s"] <= parts["restart_served_s"]
    assert [p.name for p in tmp_path.iterdir()] == ["scale.jsonl"]


def test_a_connection_count_over_the_open_files_limit_is_refused_plainly() -> None:
    proc = bench("bench.scale", "--connections", "10000000", "--only", "connections", timeout=60)
    assert proc.returncode == 2 and "open-files limit" in proc.stderr
    assert "Traceback" not in proc.stderr
