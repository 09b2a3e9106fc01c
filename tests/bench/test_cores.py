"""bench.cores end to end, briefly: one pinned kbroker node, and two kbroker brokers on a real
ZooKeeper with the topic's leaders split between them, each written by the wire generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.run import bench_rows


@pytest.mark.timeout(300)
def test_each_setup_reports_the_brokers_and_the_generators_cores(tmp_path: Path) -> None:
    results = tmp_path / "cores.jsonl"
    printed = bench_rows(
        "bench.cores", "--seconds", "1", "--reps", "1",
        "--setups", "1broker-1core,2brokers-all", "--data-dir", str(tmp_path),
        "--results", str(results), timeout=280,
    )  # fmt: skip
    rows = {r["setup"]: r for r in printed}
    assert set(rows) == {"1broker-1core", "2brokers-all"}
    one, two = rows["1broker-1core"], rows["2brokers-all"]
    assert (one["brokers"], one["leaders"]) == (1, 1)
    assert (two["brokers"], two["leaders"]) == (2, 2) and two["connections"] == 4
    for r in (one, two):
        assert r["mb_s"] > 0 and r["broker_cores"] > 0 and r["generator_cores"] > 0
        assert 0 <= r["machine_idle"] <= 1
    # A broker pinned to one CPU cannot use more than that one.
    assert one["broker_cores"] <= 1.05
    assert [p.name for p in tmp_path.iterdir()] == ["cores.jsonl"]
