"""Throughput and request latency of each broker, from the Prometheus text its metrics
listener serves (``kbroker serve`` with ``metrics.listeners``; the names are those of
Kafka's JMX metrics as the Prometheus JMX exporter writes them).

`BrokerMetrics` scrapes each URL it was given (``--metrics``), keeps the last two
scrapes of each, and turns them into rates: record bytes in and out and records in per
second (per topic too), and the mean time of Produce and consumer Fetch requests answered
between the two scrapes. A URL that cannot be read is reported with why, never raised.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# The most of one /metrics answer read (a broker with very many partitions is cut there).
MAX_SCRAPE_BYTES = 32 << 20
LATENCY_REQUESTS = {"produce_ms": "Produce", "fetch_ms": "FetchConsumer"}


@dataclass
class Scrape:
    at: float  # time.monotonic() of the scrape
    broker_id: int | None = None
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    messages_in: dict[str, float] = field(default_factory=dict)
    # request type -> (seconds in all, requests answered)
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)


def parse(text: str, at: float) -> Scrape:
    scrape = Scrape(at)
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "kbroker_broker_info" and labels.get("broker_id", "").isdigit():
                scrape.broker_id = int(labels["broker_id"])
            elif name == "kafka_server_brokertopicmetrics_bytesin_total":
                scrape.bytes_in += value
            elif name == "kafka_server_brokertopicmetrics_bytesout_total":
                scrape.bytes_out += value
            elif name == "kafka_server_brokertopicmetrics_messagesin_total":
                topic = labels.get("topic", "")
                scrape.messages_in[topic] = scrape.messages_in.get(topic, 0.0) + value
            elif name == "kafka_network_requestmetrics_totaltime_seconds_sum":
                sums[labels.get("request", "")] = value
            elif name == "kafka_network_requestmetrics_totaltime_seconds_count":
                counts[labels.get("request", "")] = value
    scrape.latency = {r: (sums[r], counts[r]) for r in sums.keys() & counts.keys()}
    return scrape


def rates(before: Scrape, after: Scrape) -> dict[str, Any]:
    """Per second between two scrapes of one broker; a counter that went back (the broker
    restarted) counts from zero."""
    seconds = max(after.at - before.at, 1e-3)

    def per_second(old: float, new: float) -> float:
        return (new - old if new >= old else new) / seconds

    out: dict[str, Any] = {
        "broker_id": after.broker_id,
        "bytes_in_per_sec": per_second(before.bytes_in, after.bytes_in),
        "bytes_out_per_sec": per_second(before.bytes_out, after.bytes_out),
        "messages_in_per_sec": {
            topic: per_second(before.messages_in.get(topic, 0.0), value)
            for topic, value in after.messages_in.items()
        },
    }
    for key, request in LATENCY_REQUESTS.items():
        old_sum, old_count = before.latency.get(request, (0.0, 0.0))
        new_sum, new_count = after.latency.get(request, (0.0, 0.0))
        answered = new_count - old_count
        out[key] = (new_sum - old_sum) / answered * 1000 if answered > 0 else None
    return out


class BrokerMetrics:
    def __init__(self, urls: tuple[str, ...], timeout: float) -> None:
        self.urls = urls
        self.timeout = timeout
        self._scrapes: dict[str, tuple[Scrape | None, Scrape]] = {}
        self.errors: dict[str, str] = {}

    def scrape_all(self) -> None:
        """Reads every URL once (blocking; the console runs it in a worker thread)."""
        for url in self.urls:
            try:
                request = urllib.request.Request(url, headers={"Accept": "text/plain"})
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    text = answer.read(MAX_SCRAPE_BYTES).decode("utf-8", errors="replace")
                scrape = parse(text, time.monotonic())
            except (OSError, ValueError, urllib.error.URLError) as exc:
                self.errors[url] = str(getattr(exc, "reason", exc))
                continue
            self.errors.pop(url, None)
            previous = self._scrapes.get(url)
            self._scrapes[url] = (previous[1] if previous else None, scrape)

    def view(self) -> dict[str, Any]:
        """{"brokers": broker id -> rates, "topics": topic -> records in per second (all
        brokers), "errors": url -> why it could not be read}."""
        brokers: dict[int, dict[str, Any]] = {}
        topics: dict[str, float] = {}
        for before, after in self._scrapes.values():
            if before is None or after.broker_id is None:
                continue
            found = rates(before, after)
            brokers[after.broker_id] = found
            for topic, value in found["messages_in_per_sec"].items():
                topics[topic] = topics.get(topic, 0.0) + value
        return {"brokers": brokers, "topics": topics, "errors": dict(self.errors)}
