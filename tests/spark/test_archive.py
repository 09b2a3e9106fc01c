"""The archive job: 10,000+ records to Parquet row for row; a rerun adds only the new
records; a run killed with SIGKILL in the middle of a batch, then rerun, leaves no
duplicates and no gaps (checked with Spark and with pyarrow, a reader that does not
know Spark's commit log)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from kbroker.spark import archive
from kbroker.spark.archive import committed_files
from tests.helpers import KBROKER, BrokerProcess, create_topic, produce, topic_name, wait_for
from tests.spark.conftest import PIPELINE_TIMEOUT, descendants, pipeline, reap

PARTITIONS = 4
Expected = dict[
    tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]
]


def make_records(first: int, count: int, midnight_ms: int) -> list[tuple[Any, ...]]:
    """Records spread over four partitions and over two dates and hours (UTC)."""
    out: list[tuple[Any, ...]] = []
    for i in range(first, first + count):
        key = None if i % 97 == 0 else b"key-%d" % i
        value = None if i % 101 == 0 and key is not None else (b"value-%d-" % i) * (1 + i % 5)
        headers = [("n", b"%d" % i), ("none", None)] if i % 3 == 0 else None
        ts = midnight_ms - 1_800_000 + (i * 613) % 3_600_000  # 23:30 to 00:30 around a midnight
        out.append((key, value, headers, i % PARTITIONS, ts))
    return out


def produce_expected(
    bootstrap: str, topic: str, records: list[tuple[Any, ...]], into: Expected
) -> None:
    reports = produce(bootstrap, topic, records, **{"compression.type": "lz4"})
    assert all(err is None for err, _ in reports)
    # Delivery reports carry no headers: find each record by its (unique) key and value.
    headers = {(r[0], r[1]): r[2] or [] for r in records}
    assert len(headers) == len(records)
    for _err, msg in reports:
        into[(msg.partition(), msg.offset())] = (
            msg.key(),
            msg.value(),
            headers[(msg.key(), msg.value())],
            msg.timestamp()[1],
        )


def check_output(spark: Any, output: Path, topic: str, want: Expected) -> None:
    """Row for row, through Spark (which reads via the sink's commit log) and pyarrow."""
    rows = (
        spark.read.parquet(str(output))
        .selectExpr("*", "unix_millis(timestamp) AS ts_ms", "CAST(date AS STRING) AS day")
        .collect()
    )
    got: Expected = {}
    for r in rows:
        k = (r.partition, r.offset)
        assert k not in got, f"duplicate row {k}"
        assert r.topic == topic
        ts = datetime.fromtimestamp(r.ts_ms / 1000, UTC)
        assert (r.day, r.hour) == (ts.strftime("%Y-%m-%d"), ts.hour)
        headers = [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []]
        got[k] = (
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            headers,
            r.ts_ms,
        )
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, (
        f"missing {missing[:10]} ({len(missing)}), extra {extra[:10]} ({len(extra)})"
    )
    assert got == want

    table = pads.dataset(str(output), format="parquet", partitioning="hive").to_table(
        columns=["partition", "offset"]
    )
    pairs = list(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    )
    assert len(pairs) == len(set(pairs)) == len(want), "pyarrow sees files no committed batch wrote"


def checkpoint_batches(checkpoint: Path) -> tuple[int, int]:
    """(latest planned batch, latest committed batch), -1 for none."""

    def latest(d: Path) -> int:
        ids = [int(p.name) for p in d.glob("[0-9]*")] if d.is_dir() else []
        return max(ids, default=-1)

    return latest(checkpoint / "offsets"), latest(checkpoint / "commits")


def uncommitted_part_files(output: Path) -> list[Path]:
    committed = committed_files(output) or set()
    return [
        p
        for p in output.rglob("part-*")
        if "_checkpoint" not in p.parts and p.name not in committed
    ]


# Three Spark runs and a kill on 2 cores: ~350 s when the machine is busy.
@pytest.mark.timeout(900)
def test_archive_exactly_once_across_reruns_and_sigkill(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    bs = spark_broker.bootstrap
    topic = topic_name("archive")
    create_topic(bs, topic, partitions=PARTITIONS)
    now = int(time.time() * 1000)
    midnight = now - now % 86_400_000 - (86_400_000 if now % 86_400_000 < 1_800_000 else 0)
    output = tmp_path / "archive"
    checkpoint = output / "_checkpoint"
    want: Expected = {}

    # 1. 10,000 records, archived by the command (default checkpoint under the output).
    produce_expected(bs, topic, make_records(0, 10_000, midnight), want)
    pipeline(
        "archive",
        "--topic",
        topic,
        "--output",
        str(output),
        "--bootstrap",
        bs,
        "--once",
        "--conf",
        "spark.ui.enabled=false",
    )
    assert (checkpoint / "commits").is_dir()
    check_output(spark, output, topic, want)
    dates = {p.name for p in (output / f"topic={topic}").iterdir()}
    assert len(dates) == 2, dates

    # 2. More records, and the job without --once: it adds only the new records, picks up
    #    those produced while it runs, and stops cleanly on SIGTERM.
    produce_expected(bs, topic, make_records(10_000, 1_000, midnight), want)
    _planned, base = checkpoint_batches(checkpoint)
    proc = subprocess.Popen(
        [
            *KBROKER,
            "pipeline",
            "archive",
            "--topic",
            topic,
            "--output",
            str(output),
            "--bootstrap",
            bs,
            "--interval",
            "1s",
            "--conf",
            "spark.ui.enabled=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_job(lambda: checkpoint_batches(checkpoint)[1] > base, proc, "a first batch")
        produce_expected(bs, topic, make_records(11_000, 1_000, midnight), want)
        wait_for_job(
            lambda: spark.read.parquet(str(output)).count() >= len(want), proc, "the new records"
        )
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert not reap(below, 30), "the JVM outlived its driver"
    finally:
        if proc.poll() is None:
            below = descendants(proc.pid)
            proc.kill()
            proc.communicate()
            reap(below, 5)
    check_output(spark, output, topic, want)

    # 3. More records, archived 300 per batch; SIGKILL of the command in the middle of a
    #    batch. Its JVM notices its driver is gone and exits (cleaning up what it can).
    produce_expected(bs, topic, make_records(12_000, 6_000, midnight), want)
    kill_mid_batch(bs, topic, output, whole_tree=False)
    archive(spark, bs, topic, str(output), once=True)
    check_output(spark, output, topic, want)

    # 4. Again, but SIGKILL the command and its JVM at once, as a crash of the machine
    #    would: the batch's files are left half written, outside the sink's log.
    produce_expected(bs, topic, make_records(18_000, 6_000, midnight), want)
    orphans = kill_mid_batch(bs, topic, output, whole_tree=True)
    assert orphans and all(p.exists() for p in orphans)
    archive(spark, bs, topic, str(output), once=True)
    assert not any(p.exists() for p in orphans)
    check_output(spark, output, topic, want)
    assert len(want) == 24_000
    stamp = datetime.fromtimestamp(midnight / 1000, UTC).strftime("%Y-%m-%d")
    assert (output / f"topic={topic}" / f"date={stamp}" / "hour=0").is_dir()


def kill_mid_batch(bs: str, topic: str, output: Path, *, whole_tree: bool) -> list[Path]:
    """Runs the archive command 300 records a batch and SIGKILLs it once one batch of
    this run is committed and the next one has written part files; returns those files."""
    checkpoint = output / "_checkpoint"
    _planned, base = checkpoint_batches(checkpoint)
    proc = subprocess.Popen(
        [
            *KBROKER,
            "pipeline",
            "archive",
            "--topic",
            topic,
            "--output",
            str(output),
            "--bootstrap",
            bs,
            "--once",
            "--max-records-per-batch",
            "300",
            "--conf",
            "spark.ui.enabled=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    orphans: list[Path] = []
    killed_in = -1
    jvm_lingered: list[int] = []
    deadline = time.monotonic() + PIPELINE_TIMEOUT
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            planned, committed = checkpoint_batches(checkpoint)
            if planned > committed and committed >= base + 1:
                orphans = uncommitted_part_files(output)
                if orphans:
                    below = descendants(proc.pid)
                    if whole_tree:
                        for pid in [proc.pid, *below]:
                            # A short-lived child may be gone already.
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(pid, signal.SIGKILL)
                    else:
                        os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    killed_in = planned
                    jvm_lingered = reap(below, 30)
                    break
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            below = descendants(proc.pid)
            proc.kill()
            proc.wait()
            reap(below, 5)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    assert killed_in >= 0, f"the job ended before it could be killed mid-batch:\n{err[-2000:]}"
    assert not jvm_lingered
    planned, committed = checkpoint_batches(checkpoint)
    assert planned == killed_in and committed < planned, "the killed batch must be left uncommitted"
    return orphans


def wait_for_job(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    """Waits for `condition` while the pipeline job runs; fails as soon as it exits."""

    def check() -> bool:
        assert proc.poll() is None, f"the job exited ({proc.returncode}) before {what}"
        return condition()

    wait_for(check, what, timeout=PIPELINE_TIMEOUT, interval=0.5)
