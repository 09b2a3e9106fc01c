"""A real Prometheus server (Debian's package) scrapes a running broker under load from a real
client; PromQL through Prometheus's HTTP API gives the bytes-in rate the client produced and
the lag of a group that the client sees."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TP

from tests.helpers import BrokerProcess, create_topic, topic_name, wait_for
from tests.metrics.prom import prometheus, promql_value, start_metrics_broker, wait_scraped

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="needs Debian's prometheus (deploy/setup.sh test)"
)

RECORD = 1000  # value bytes
RATE = 1500  # records/s
LOAD_S = 10.0


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    tmp = tmp_path_factory.mktemp("prom")
    broker, base = start_metrics_broker(tmp / "data")
    try:
        port = int(base.rsplit(":", 1)[1])
        with prometheus(tmp, [f"127.0.0.1:{port}"]) as url:
            wait_scraped(url, port)
            yield broker, url
    finally:
        broker.kill()


def _paced_produce(bootstrap: str, topic: str, seconds: float) -> tuple[float, float, int]:
    """Produces RATE records/s of RECORD bytes for ``seconds``: (start, end, records)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"x" * RECORD
    sent = 0
    start = time.time()
    while (now := time.time()) < start + seconds:
        due = int((now - start) * RATE)
        while sent < due:
            producer.produce(topic, value=value, partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(0.005)
    assert producer.flush(30) == 0
    return start, time.time(), sent


def test_bytes_in_rate_matches_what_the_client_produced(
    scraped: tuple[BrokerProcess, str],
) -> None:
    broker, url = scraped
    topic = topic_name("rate")
    create_topic(broker.bootstrap, topic)
    # A consumer reads alongside: the broker is under produce and fetch load.
    stop = threading.Event()

    def consume() -> None:
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": topic,
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe([topic])
        while not stop.is_set():
            c.poll(0.2)
        c.close()

    reader = threading.Thread(target=consume)
    reader.start()
    try:
        start, end, records = _paced_produce(broker.bootstrap, topic, LOAD_S)
    finally:
        stop.set()
        reader.join(30)
    # The bytes the broker stored: what the client sent, batch headers included.
    stored = sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-0").glob("*.log"))
    assert stored >= records * RECORD
    counter = f'kafka_server_brokertopicmetrics_bytesin_total{{topic="{topic}"}}'
    # Prometheus has scraped the counter's final value.
    wait_for(lambda: promql_value(url, counter) == stored, "the final bytes-in count", timeout=30)
    # The rate over the middle of the load is the client's steady rate.
    mid = (start + end) / 2
    rate = promql_value(url, f"rate({counter}[4s])", at=mid)
    expected = stored / (end - start)
    assert rate is not None
    assert 0.75 * expected <= rate <= 1.25 * expected, (rate, expected)
    messages = promql_value(
        url, f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{topic}"}}'
    )
    assert messages == records
    # And it was read back: bytes out counts the fetched record bytes.
    out = promql_value(
        url, f'max_over_time(kafka_server_brokertopicmetrics_bytesout_total{{topic="{topic}"}}[1m])'
    )
    assert out is not None and out > 0


def test_group_lag_matches_what_the_client_sees(scraped: tuple[BrokerProcess, str]) -> None:
    broker, url = scraped
    topic, group = topic_name("lag"), topic_name("group")
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(1000):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TP(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 400 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 400
        consumer.commit(offsets=[TP(topic, 0, 400)], asynchronous=False)
        for i in range(250):  # the group falls further behind
            producer.produce(topic, value=b"w%d" % i, partition=0)
        assert producer.flush(30) == 0
        # The client's view of its lag: the high watermark minus its committed offset.
        [committed] = consumer.committed([TP(topic, 0)], timeout=10)
        _low, high = consumer.get_watermark_offsets(TP(topic, 0), timeout=10)
        client_lag = high - committed.offset
        assert client_lag == 1250 - 400
    finally:
        consumer.close()
    labels = f'consumergroup="{group}",topic="{topic}"'
    wait_for(
        lambda: (
            promql_value(url, f'kafka_consumergroup_lag{{{labels},partition="0"}}') == client_lag
        ),
        "prometheus to see the group's lag",
        timeout=30,
    )
    assert promql_value(url, f"kafka_consumergroup_lag_sum{{{labels}}}") == client_lag
    assert promql_value(url, f'kafka_consumergroup_current_offset{{{labels},partition="0"}}') == 400
