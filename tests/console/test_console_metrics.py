"""`kbroker console --metrics URL`: throughput and request latency per broker and records
in per second per topic, from a real kbroker broker's metrics listener while a real
producer (confluent-kafka) writes; a metrics URL that cannot be read is named on the page.
Apache Kafka serves no Prometheus metrics of its own (it needs the JMX exporter), so this
runs against kbroker only.
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.console.conftest import ConsoleProcess, wait_until
from tests.helpers import BrokerProcess, create_topic, free_port, topic_name


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker with a metrics listener, and its metrics URL."""
    port = free_port()
    node = BrokerProcess(tmp_path_factory.mktemp("metered") / "data")
    node.start(f"metrics.listeners=127.0.0.1:{port}")
    try:
        yield node, f"http://127.0.0.1:{port}/metrics"
    finally:
        node.kill()


def cell(page: str, row: str, css_class: str) -> str | None:
    """The text of the cell of class ``css_class`` in the row whose tag has ``row``."""
    match = re.search(
        rf"<tr {re.escape(row)}.*?<td class=\"{css_class}\">([^<]*)</td>", page, re.DOTALL
    )
    return None if match is None else html.unescape(match.group(1))


def test_throughput_and_latency_per_broker_and_records_in_per_topic(
    metered: tuple[BrokerProcess, str], tmp_path: Path
) -> None:
    broker, url = metered
    unreadable = f"http://127.0.0.1:{free_port()}/metrics"
    console = ConsoleProcess(
        broker.bootstrap, tmp_path / "console.log", ("--metrics", url, "--metrics", unreadable)
    ).start()
    topic = topic_name("metered")
    create_topic(broker.bootstrap, topic)
    stop = threading.Event()

    def write() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        while not stop.is_set():
            for _ in range(20):
                producer.produce(topic, b"x" * 100)
            producer.flush(10)
            stop.wait(0.05)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        # The one broker's row, its rates matched to it by the metrics' kbroker_broker_info.
        def busy() -> bool:
            page = console.get("/").body
            rate = cell(page, 'data-broker="', "bytes-in")
            produce_ms = cell(page, 'data-broker="', "produce-ms")
            return rate not in (None, "?", "0") and produce_ms not in (None, "")

        wait_until(busy, "bytes in per second and Produce latency on the cluster page")
        page = console.get("/").body
        assert float(cell(page, 'data-broker="', "bytes-in") or 0) > 0
        assert float(cell(page, 'data-broker="', "produce-ms") or 0) > 0
        assert f"The metrics at {unreadable} cannot be read" in html.unescape(page)
        wait_until(
            lambda: (
                float(cell(console.get("/topics").body, f'data-name="{topic}"', "messages-in") or 0)
                > 0
            ),
            "records in per second of the topic",
        )
    finally:
        stop.set()
        writer.join(30)
        console.stop()
