"""bench.wire_ab: a broker's CPU split between its event loop and its I/O threads."""

from __future__ import annotations

import pytest

from tests.bench.run import bench_rows


@pytest.mark.timeout(180)
def test_each_run_splits_the_brokers_cpu_by_thread() -> None:
    printed = bench_rows(
        "bench.wire_ab", "--reps", "1", "--seconds", "2", "--io-threads", "2,0",
        "--", "--in-flight", "4", timeout=170,
    )  # fmt: skip
    rows = {r["io_threads"]: r for r in printed}
    assert set(rows) == {0, 2}
    for row in rows.values():
        assert row["mb_s"] > 0 and row["errors"] == 0
        assert row["loop_cores"] > 0 and row["loop_us_per_mb"] > 0
    # The appends run on the I/O threads with 2, on the loop with 0.
    assert rows[2]["other_threads_cores"] > rows[0]["other_threads_cores"]
