"""The pipeline's pure-Python parts: durations, topic specs, the sink-log cleanup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbroker.spark import PipelineError, parse_duration, remove_uncommitted_files
from kbroker.spark.archive import committed_files
from kbroker.spark.common import duration_ms
from kbroker.spark.jars import artifact_name
from kbroker.spark.kafka import is_pattern


@pytest.mark.parametrize(
    ("text", "spark", "ms"),
    [
        ("10s", "10 seconds", 10_000),
        ("500ms", "500 milliseconds", 500),
        ("5 minutes", "5 minutes", 300_000),
        ("1h", "1 hours", 3_600_000),
        ("2D", "2 days", 172_800_000),
        (" 3 sec ", "3 seconds", 3_000),
    ],
)
def test_durations(text: str, spark: str, ms: int) -> None:
    assert parse_duration(text) == spark
    assert duration_ms(spark) == ms


def test_zero_only_where_allowed() -> None:
    assert parse_duration("0s", allow_zero=True) == "0 seconds"
    with pytest.raises(PipelineError, match="more than zero"):
        parse_duration("0s", "window")


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("events", False),
        ("a.b-c_D9", False),
        ("a,b", False),
        ("a.*", True),
        ("events\\..*", True),
        ("(x|y)", True),
        ("a b", True),
    ],
)
def test_topic_specs(spec: str, pattern: bool) -> None:
    assert is_pattern(spec) is pattern


def test_artifact_names() -> None:
    assert artifact_name("spark-sql-kafka-0-10_2.13-4.0.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert artifact_name("kafka-clients-3.9.0.jar") == "kafka-clients"
    assert artifact_name("guava-33.0-jre.jar") == "guava"
    assert (
        artifact_name("scala-parallel-collections_2.13-1.2.0.jar")
        == "scala-parallel-collections_2.13"
    )


def test_uncommitted_part_files_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    hour = out / "topic=t" / "date=2024-01-01" / "hour=3"
    hour.mkdir(parents=True)
    (out / "_checkpoint").mkdir()
    (out / "_checkpoint" / "part-not-data").write_text("")
    for name in ("part-0-a.parquet", "part-1-b.parquet", "part-2-stray.parquet"):
        (hour / name).write_text("")
    (hour / ".part-2-stray.parquet.crc").write_text("")
    assert remove_uncommitted_files(out) == []  # no sink log yet: nothing is judged
    log = out / "_spark_metadata"
    log.mkdir()

    def entry(name: str) -> str:
        return json.dumps(
            {"path": f"file://{hour / name}", "size": 0, "isDir": False, "action": "add"}
        )

    (log / "0").write_text("v1\n" + entry("part-0-a.parquet") + "\n")
    (log / "1.compact").write_text(
        "v1\n" + entry("part-0-a.parquet") + "\n" + entry("part-1-b.parquet")
    )
    assert committed_files(out) == {"part-0-a.parquet", "part-1-b.parquet"}
    assert remove_uncommitted_files(out) == [hour / "part-2-stray.parquet"]
    assert sorted(p.name for p in hour.iterdir()) == ["part-0-a.parquet", "part-1-b.parquet"]
    assert (out / "_checkpoint" / "part-not-data").exists()
