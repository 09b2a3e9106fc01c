"""Rates from two scrapes of a broker's Prometheus text: bytes, records per topic, mean
request time, and a restarted broker's counters."""

from __future__ import annotations

import pytest

from kbroker.console.metrics import parse, rates

TEXT = """\
kbroker_broker_info{{broker_id="3",version="x"}} 1.0
kafka_server_brokertopicmetrics_bytesin_total{{topic="a"}} {bytes_a}
kafka_server_brokertopicmetrics_bytesin_total{{topic="b"}} 100.0
kafka_server_brokertopicmetrics_bytesout_total{{topic="a"}} 50.0
kafka_server_brokertopicmetrics_messagesin_total{{topic="a"}} {records_a}
kafka_network_requestmetrics_totaltime_seconds_sum{{request="Produce"}} {produce_sum}
kafka_network_requestmetrics_totaltime_seconds_count{{request="Produce"}} {produce_count}
"""


def scrape(at: float, bytes_a: float, records_a: float, produce_sum: float, count: float):  # type: ignore[no-untyped-def]
    text = TEXT.format(
        bytes_a=bytes_a, records_a=records_a, produce_sum=produce_sum, produce_count=count
    )
    return parse(text, at)


def test_rates_between_two_scrapes() -> None:
    before = scrape(10.0, 1000, 10, 0.5, 100)
    after = scrape(12.0, 3000, 30, 0.9, 300)
    assert after.broker_id == 3
    found = rates(before, after)
    assert found["bytes_in_per_sec"] == pytest.approx(1000.0)  # (3100 - 1100) / 2
    assert found["bytes_out_per_sec"] == 0.0
    assert found["messages_in_per_sec"] == {"a": pytest.approx(10.0)}
    assert found["produce_ms"] == pytest.approx(2.0)  # 0.4 s over 200 requests
    assert found["fetch_ms"] is None  # no consumer fetch answered


def test_a_restarted_broker_counts_from_zero() -> None:
    before = scrape(10.0, 5000, 50, 1.0, 100)
    after = scrape(11.0, 400, 4, 0.1, 10)
    found = rates(before, after)
    assert found["messages_in_per_sec"] == {"a": pytest.approx(4.0)}
    assert found["bytes_in_per_sec"] == pytest.approx(500.0)  # all 500 written since it started
