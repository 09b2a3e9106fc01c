"""The broker's own measurements: cheap accumulators on the hot path, read at scrape time.

Hot paths (every request, every append, every fetch) only add to plain
Python ints and lists owned by `BrokerMetrics`; nothing here takes a lock or
allocates per event beyond a few integers. `BrokerMetrics.collect` turns the
accumulators into prometheus_client metric families when Prometheus scrapes
(from the metrics HTTP thread), so the exposition is prometheus_client's.

Writers: the event loop (requests, appends, fetches, connections, loop lag),
the flush thread (flush times) and the cleaner thread (cleaner passes); each
accumulator has one writer. The scraping thread only reads; a scrape may see
one observation in a histogram's buckets and not yet in its sum, never a
torn bucket list.

Names follow what Kafka's JMX exporter set-ups publish (see the README's
"Operating" section for the mapping); kbroker-only measurements start with
``kbroker_``.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

# Request phase and total latencies (seconds): 50 µs to 30 s.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# Event loop lag and flush times (seconds): 100 µs to 10 s.
LAG_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# The phases of a request, as Kafka's RequestMetrics splits its total time.
PHASES = ("requestqueuetime", "localtime", "remotetime", "responsequeuetime", "responsesendtime")
PHASE_HELP = {
    "requestqueuetime": "from its last bytes arriving to the handler starting",
    "localtime": "in the handler on this broker (decode, work, encode)",
    "remotetime": "waiting for others: acks=all replication, a long-poll fetch, a rebalance",
    "responsequeuetime": "from the response being ready to its write starting "
    "(behind earlier responses of the connection)",
    "responsesendtime": "writing the response to the socket (sendfile included)",
}


class Histogram:
    """Bucket counts of nanosecond observations; one writer, read by the scraper."""

    __slots__ = ("_bounds_ns", "bounds_s", "counts", "sum_ns")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_s = bounds_s
        self._bounds_ns = [int(b * 1e9) for b in bounds_s]
        self.counts = [0] * (len(bounds_s) + 1)  # the last one: +Inf
        self.sum_ns = 0

    def observe_ns(self, value_ns: int) -> None:
        self.counts[bisect.bisect_left(self._bounds_ns, value_ns)] += 1
        self.sum_ns += value_ns

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative buckets as prometheus_client's HistogramMetricFamily takes them."""
        counts = list(self.counts)  # one consistent copy
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip(self.bounds_s, counts, strict=False):
            total += n
            out.append((repr(bound), float(total)))
        total += counts[-1]
        out.append(("+Inf", float(total)))
        return out


class RequestStats:
    """One request type's phase histograms."""

    __slots__ = ("phases", "total")

    def __init__(self) -> None:
        self.phases = [Histogram(LATENCY_BUCKETS_S) for _ in PHASES]
        self.total = Histogram(LATENCY_BUCKETS_S)


class TopicStats:
    __slots__ = ("bytes_in", "bytes_out", "records_in")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.records_in = 0
        self.bytes_out = 0


class ListenerStats:
    __slots__ = ("closed", "created")

    def __init__(self) -> None:
        self.created = 0
        self.closed = 0

    def opened(self) -> None:
        self.created += 1

    def lost(self) -> None:
        self.closed += 1


class CleanerStats:
    __slots__ = (
        "bytes_read",
        "bytes_written",
        "last_dirty_ratio",
        "last_recopy_ratio",
        "last_seconds",
        "passes",
    )

    def __init__(self) -> None:
        self.passes = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.last_recopy_ratio = 0.0
        self.last_dirty_ratio = 0.0
        self.last_seconds = 0.0


class BrokerMetrics:
    """Everything the broker counts as it works (state read at scrape time is elsewhere)."""

    def __init__(self) -> None:
        self.requests: dict[str, RequestStats] = {}
        self.topics: dict[str, TopicStats] = {}
        self.listeners: dict[str, ListenerStats] = {}
        self.loop_lag = Histogram(LAG_BUCKETS_S)
        self.last_loop_lag_s = 0.0
        self.flush = Histogram(LAG_BUCKETS_S)
        self.cleaner = CleanerStats()
        self.started = time.time()

    # -- hot path hooks ---------------------------------------------------------

    def request_stats(self, name: str) -> RequestStats:
        stats = self.requests.get(name)
        if stats is None:
            stats = self.requests[name] = RequestStats()
        return stats

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def appended(self, topic: str, nbytes: int, records: int) -> None:
        stats = self.topics.get(topic) or self.topic(topic)
        stats.bytes_in += nbytes
        stats.records_in += records

    def fetched(self, topic: str, nbytes: int) -> None:
        stats = self.topics.get(topic) or self.topic(topic)
        stats.bytes_out += nbytes

    def listener(self, name: str) -> ListenerStats:
        stats = self.listeners.get(name)
        if stats is None:
            stats = self.listeners[name] = ListenerStats()
        return stats

    def loop_lagged(self, lag_ns: int) -> None:
        self.loop_lag.observe_ns(lag_ns)
        self.last_loop_lag_s = lag_ns / 1e9

    def flushed(self, elapsed_ns: int) -> None:
        self.flush.observe_ns(elapsed_ns)

    def cleaned(self, bytes_read: int, bytes_written: int, dirty_ratio: float, ms: int) -> None:
        c = self.cleaner
        c.passes += 1
        c.bytes_read += bytes_read
        c.bytes_written += bytes_written
        c.last_recopy_ratio = bytes_written / bytes_read if bytes_read else 0.0
        c.last_dirty_ratio = dirty_ratio
        c.last_seconds = ms / 1000

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series go (a topic made again starts from zero)."""
        self.topics.pop(topic, None)

    # -- exposition -------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield from self._collect_requests()
        yield from self._collect_topics()
        yield from self._collect_listeners()
        yield from self._collect_storage_work()

    def _collect_requests(self) -> Iterable[Metric]:
        requests = list(self.requests.items())
        count = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered (acks=0 produce: handled), by request type (Kafka's "
            "RequestsPerSec; Fetch is FetchConsumer or FetchFollower).",
            labels=["request"],
        )
        total = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from a request's last bytes arriving to its response written (TotalTimeMs).",
            labels=["request"],
        )
        phases = [
            HistogramMetricFamily(
                f"kafka_network_requestmetrics_{phase}_seconds",
                f"Time of a request {PHASE_HELP[phase]} (Kafka's {phase}Ms).",
                labels=["request"],
            )
            for phase in PHASES
        ]
        for name, stats in requests:
            buckets = stats.total.buckets()
            count.add_metric([name], buckets[-1][1])
            total.add_metric([name], buckets, stats.total.sum_ns / 1e9)
            for family, hist in zip(phases, stats.phases, strict=True):
                family.add_metric([name], hist.buckets(), hist.sum_ns / 1e9)
        yield count
        yield total
        yield from phases

    def _collect_topics(self) -> Iterable[Metric]:
        topics = list(self.topics.items())
        bytes_in = CounterMetricFamily(
            "kafka_server_brokertopicmetrics_bytesin",
            "Record bytes appended to the topic's partitions by producers and the "
            "coordinators (BytesInPerSec).",
            labels=["topic"],
        )
        msgs_in = CounterMetricFamily(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended to the topic (MessagesInPerSec).",
            labels=["topic"],
        )
        bytes_out = CounterMetricFamily(
            "kafka_server_brokertopicmetrics_bytesout",
            "Record bytes of the topic put in fetch responses (BytesOutPerSec).",
            labels=["topic"],
        )
        for topic, t in topics:
            bytes_in.add_metric([topic], t.bytes_in)
            msgs_in.add_metric([topic], t.records_in)
            bytes_out.add_metric([topic], t.bytes_out)
        yield bytes_in
        yield msgs_in
        yield bytes_out

    def _collect_listeners(self) -> Iterable[Metric]:
        listeners = list(self.listeners.items())
        created = CounterMetricFamily(
            "kafka_server_socket_server_metrics_connection_creation",
            "Connections accepted on the listener (connection-creation-total).",
            labels=["listener"],
        )
        closed = CounterMetricFamily(
            "kafka_server_socket_server_metrics_connection_close",
            "Connections closed on the listener (connection-close-total).",
            labels=["listener"],
        )
        count = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Connections open on the listener (connection-count).",
            labels=["listener"],
        )
        for name, s in listeners:
            created.add_metric([name], s.created)
            closed.add_metric([name], s.closed)
            count.add_metric([name], s.created - s.closed)
        yield created
        yield closed
        yield count

    def _collect_storage_work(self) -> Iterable[Metric]:
        lag = HistogramMetricFamily(
            "kbroker_event_loop_lag_seconds",
            "How late the event loop ran a timer (sampled 10 times a second): every request "
            "and every connection waits this long when the loop is busy.",
        )
        lag.add_metric([], self.loop_lag.buckets(), self.loop_lag.sum_ns / 1e9)
        yield lag
        yield GaugeMetricFamily(
            "kbroker_event_loop_lag_last_seconds",
            "The event loop's lag at its last sample.",
            value=self.last_loop_lag_s,
        )
        flush = HistogramMetricFamily(
            "kafka_log_logflushstats_logflushtime_seconds",
            "Time of a time-based (flush.ms) flush of a partition log (LogFlushRateAndTimeMs); "
            "flushes forced by flush.messages happen inside appends and count in produce "
            "local time.",
        )
        flush.add_metric([], self.flush.buckets(), self.flush.sum_ns / 1e9)
        yield flush
        c = self.cleaner
        yield CounterMetricFamily(
            "kbroker_log_cleaner_passes", "Log cleaner passes finished.", value=c.passes
        )
        yield CounterMetricFamily(
            "kbroker_log_cleaner_bytes_read",
            "Bytes the log cleaner read (cleaned segments).",
            value=c.bytes_read,
        )
        yield CounterMetricFamily(
            "kbroker_log_cleaner_bytes_written",
            "Bytes the log cleaner wrote (the compacted segments).",
            value=c.bytes_written,
        )
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Bytes written / bytes read of the last cleaner pass, in percent.",
            value=100.0 * c.last_recopy_ratio,
        )
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_max_clean_time_secs",
            "Duration of the last cleaner pass.",
            value=c.last_seconds,
        )
        yield GaugeMetricFamily(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "Dirty ratio, in percent, of the log the last cleaner pass chose (the dirtiest "
            "one due).",
            value=100.0 * c.last_dirty_ratio,
        )


class AccumulatorCollector:
    """prometheus_client collector over a `BrokerMetrics`."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.collect()

    def describe(self) -> list[Any]:
        return []  # collected at each scrape only
