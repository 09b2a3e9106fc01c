"""Log lines: one per event, JSON with --log-format json, and request logging turned on and off
at runtime through IncrementalAlterConfigs on the BROKER_LOGGER resource."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from kbroker.metrics.logs import JsonFormatter, TextFormatter
from kbroker.tools.cluster import Cluster
from kbroker.tools.configs import Resource, alter
from tests.helpers import BrokerProcess, create_topic, produce, topic_name, wait_for

BROKER_LOGGER = 8


def _record(msg: str, exc: bool = False, **extra: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad\nthing")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    record = logging.LogRecord("kbroker.x", logging.ERROR, __file__, 1, msg, (), exc_info)
    record.__dict__.update(extra)
    return record


def test_formatters_write_one_line_per_event() -> None:
    text = TextFormatter().format(_record("line one\nline two", exc=True))
    assert "\n" not in text
    assert "line one\\nline two" in text and "ValueError: bad\\nthing" in text
    line = JsonFormatter().format(_record("group g1 is stable", exc=True, group="g1"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR" and entry["logger"] == "kbroker.x"
    assert entry["message"] == "group g1 is stable" and entry["group"] == "g1"
    assert "ValueError: bad" in entry["exception"]
    assert entry["ts"].endswith("Z")


def _json_lines(broker: BrokerProcess) -> list[dict[str, object]]:
    lines = [line for line in broker.output().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_json_logs_and_request_logging_at_runtime(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", args=["--log-format", "json"])
    broker.start()
    cluster = Cluster(broker.bootstrap)
    try:
        topic = topic_name("logs")
        create_topic(broker.bootstrap, topic, partitions=2)
        entries = wait_for(
            lambda: [e for e in _json_lines(broker) if topic in str(e["message"])],
            "the topic creation line",
        )
        assert entries[0]["level"] == "INFO" and entries[0]["logger"] == "kbroker"
        assert not [e for e in _json_lines(broker) if e["logger"] == "kbroker.request"]

        # On: every request gets a line naming it, its client and its phases.
        alter(cluster, Resource(BROKER_LOGGER, "0"), {"kbroker.request": "DEBUG"})
        produce(broker.bootstrap, topic, [(None, b"v")], **{"client.id": "logs-test-client"})
        lines = wait_for(
            lambda: [
                e
                for e in _json_lines(broker)
                if e["logger"] == "kbroker.request" and "Produce" in str(e["message"])
            ],
            "a request log line",
        )
        message = str(lines[0]["message"])
        assert "client_id=logs-test-client" in message
        for phase in ("total_ms=", "request_queue_ms=", "local_ms=", "remote_ms=", "send_ms="):
            assert phase in message

        # Off again: no more request lines.
        alter(cluster, Resource(BROKER_LOGGER, "0"), {"kbroker.request": "INFO"})
        time.sleep(0.2)
        count = len([e for e in _json_lines(broker) if e["logger"] == "kbroker.request"])
        produce(broker.bootstrap, topic, [(None, b"w")], **{"client.id": "logs-test-client"})
        time.sleep(0.5)
        after = [e for e in _json_lines(broker) if e["logger"] == "kbroker.request"]
        assert len(after) == count
    finally:
        cluster.close()
        broker.stop()
