"""The aggregate job against the same computation in plain Python: tumbling windows,
watermark, late records dropped, results only for windows the watermark closed."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from kbroker.spark import aggregate
from tests.helpers import BrokerProcess, consume_all, create_topic, produce, topic_name
from tests.spark.conftest import pipeline

WINDOW_MS = 10_000
DELAY_MS = 30_000
KEYS = [b"k%d" % i for i in range(5)]


def records(start_ms: int, end_ms: int, step_ms: int, salt: int) -> list[tuple[Any, ...]]:
    """Numbers that are exact in binary (quarters), so sums do not depend on order."""
    out: list[tuple[Any, ...]] = []
    for i, ts in enumerate(range(start_ms, end_ms, step_ms)):
        key = KEYS[(i + salt) % len(KEYS)]
        out.append((key, b"%g" % (((i * 7 + salt) % 40) / 4), None, None, ts))
    return out


def expected(
    phases: list[list[tuple[Any, ...]]],
) -> dict[tuple[str, int], tuple[int, float, float]]:
    """The job's semantics in plain Python: each run of the job sees one phase; a
    record is dropped if its window ended at or before the watermark of the previous
    phases; a window is output once the final watermark reaches its end."""
    watermark = -(1 << 62)
    sums: dict[tuple[str, int], list[float]] = defaultdict(list)
    for phase in phases:
        max_ts = watermark + DELAY_MS
        for key, value, _h, _p, ts in phase:
            start = ts - ts % WINDOW_MS
            max_ts = max(max_ts, ts)
            if start + WINDOW_MS <= watermark:
                continue  # late: its window was already closed
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue  # not a number: skipped (but its time still moves the watermark)
            sums[(key.decode(), start)].append(number)
        watermark = max(watermark, max_ts - DELAY_MS)
    return {
        k: (len(v), sum(v), sum(v) / len(v))
        for k, v in sums.items()
        if k[1] + WINDOW_MS <= watermark
    }


def test_windows_match_plain_python(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    bs = spark_broker.bootstrap
    src, dst = topic_name("agg-in"), topic_name("agg-out")
    create_topic(bs, src, partitions=3)
    create_topic(bs, dst, partitions=2)
    t0 = (int(time.time() * 1000) - 3_600_000) // WINDOW_MS * WINDOW_MS
    checkpoint = str(tmp_path / "checkpoint")

    phase1 = records(t0, t0 + 60_000, 97, salt=0)
    phase1 += [
        (b"k1", b"not a number", None, None, t0 + 5_000),
        (b"k2", None, None, None, t0 + 6_000),
    ]
    produce(bs, src, phase1)
    # First run through the command line, so that it is covered end to end.
    pipeline(
        "aggregate",
        "--topic",
        src,
        "--output-topic",
        dst,
        "--window",
        "10s",
        "--watermark",
        "30s",
        "--bootstrap",
        bs,
        "--checkpoint",
        checkpoint,
        "--once",
        "--conf",
        "spark.ui.enabled=false",
    )

    late = records(t0, t0 + 20_000, 331, salt=1)  # windows already closed: dropped
    on_time = records(t0 + 40_000, t0 + 60_000, 173, salt=2)  # windows still open: counted
    newer = records(t0 + 60_000, t0 + 120_000, 89, salt=3)
    phase2 = late + on_time + newer
    produce(bs, src, phase2)
    aggregate(spark, bs, src, dst, window="10s", watermark="30s", checkpoint=checkpoint, once=True)

    want = expected([phase1, phase2])
    got: dict[tuple[str, int], tuple[int, float, float]] = {}
    msgs = consume_all(bs, dst, 2, len(want), timeout=30)
    for m in msgs:
        row = json.loads(m.value())
        assert m.key().decode() == row["key"]
        assert row["window_end"] - row["window_start"] == WINDOW_MS
        k = (row["key"], row["window_start"])
        assert k not in got, f"window {k} written twice"
        got[k] = (row["count"], row["sum"], row["avg"])
    assert got == want
    assert len(want) >= 30
