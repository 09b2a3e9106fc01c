"""``kbroker pipeline`` refuses bad input with one readable line and a non-zero exit
(no traceback), before it starts a JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import BrokerProcess, create_topic, free_port, topic_name
from tests.spark.conftest import pipeline


def refused(*args: str) -> str:
    done = pipeline(*args, timeout=60, check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("Error: "), done.stderr
    return lines[-1]


def test_unreachable_broker(tmp_path: Path) -> None:
    bs = f"127.0.0.1:{free_port()}"
    msg = refused("archive", "--topic", "t", "--output", str(tmp_path), "--bootstrap", bs, "--once")
    assert f"no broker reachable at {bs}" in msg
    msg = refused("aggregate", "--topic", "a", "--output-topic", "b", "--bootstrap", bs, "--once")
    assert "no broker reachable" in msg


def test_missing_topics(spark_broker: BrokerProcess, tmp_path: Path) -> None:
    bs = spark_broker.bootstrap
    msg = refused(
        "archive", "--topic", "no-such-topic", "--output", str(tmp_path), "--bootstrap", bs
    )
    assert msg == f"Error: topic no-such-topic does not exist on {bs}"
    msg = refused("archive", "--topic", "no-such-.*", "--output", str(tmp_path), "--bootstrap", bs)
    assert msg == f"Error: no topic on {bs} matches 'no-such-.*'"
    existing = topic_name("cli")
    create_topic(bs, existing)
    msg = refused(
        "aggregate", "--topic", existing, "--output-topic", "no-such-out", "--bootstrap", bs
    )
    assert msg == f"Error: topic no-such-out does not exist on {bs}"


@pytest.mark.parametrize("window", ["10x", "ten seconds", "0s", "-5s", ""])
def test_bad_window(spark_broker: BrokerProcess, window: str) -> None:
    msg = refused(
        "aggregate",
        "--topic",
        "a",
        "--output-topic",
        "b",
        "--window",
        window,
        "--bootstrap",
        spark_broker.bootstrap,
    )
    assert msg.startswith(f"Error: bad window {window!r}")


def test_bad_watermark_interval_and_conf(spark_broker: BrokerProcess, tmp_path: Path) -> None:
    bs = spark_broker.bootstrap
    assert refused(
        "aggregate", "--topic", "a", "--output-topic", "b", "--watermark", "soon", "--bootstrap", bs
    ).startswith("Error: bad watermark 'soon'")
    assert refused(
        "archive", "--topic", "a", "--output", str(tmp_path), "--interval", "1y", "--bootstrap", bs
    ).startswith("Error: bad interval '1y'")
    topic = topic_name("cli")
    create_topic(bs, topic)
    file = tmp_path / "a-file"
    file.write_text("")
    msg = refused("archive", "--topic", topic, "--output", str(file), "--bootstrap", bs, "--once")
    assert msg == f"Error: output {file} exists and is not a directory"
