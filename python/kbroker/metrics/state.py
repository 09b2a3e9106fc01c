"""Metrics read from the broker's state when Prometheus scrapes: partitions, logs, lag, disk.

Runs on the metrics HTTP thread, never on the event loop. It reads what the
loop owns without locks: each container is copied in one C-level step
(``list(d.items())``, which runs no Python code and so cannot interleave
with the loop), and each value read is a plain attribute or an atomic read
from the Rust log. A scrape is thus a consistent-enough picture, never an
exception.

The broker is seen through `BrokerView` (filled in by the daemon, which
composes the broker), so this module stays below the broker.

Label cardinality: per-partition series (log size, segments, start and end
offset, group lag per partition) are on while `partition_level()` says so
(``metrics.partition.level.enable``); the per-topic and per-group sums are
always there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class LogView(Protocol):
    @property
    def size_bytes(self) -> int: ...
    @property
    def segment_count(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...


class PartitionView(Protocol):
    @property
    def is_leader(self) -> bool: ...
    @property
    def log(self) -> LogView: ...
    @property
    def replicas(self) -> list[int]: ...
    @property
    def isr(self) -> list[int]: ...


class TopicPartitionKey(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One committed offset and how far behind the partition's end it is."""

    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int

    @property
    def lag(self) -> int:
        return max(self.end_offset - self.committed, 0)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A cluster member's part, read at a scrape (Kafka's controller and ZooKeeper
    metrics)."""

    # 1 on the broker that is the controller, 0 elsewhere (sum over brokers: 1).
    active_controller: int
    # As the controller knows them (0 on other brokers, as in Kafka).
    offline_partitions: int
    global_partitions: int
    global_topics: int
    # 1 while the ZooKeeper session is connected.
    zookeeper_connected: int
    # Leader elections (and unclean ones) by this broker's controller, summed over the
    # times it was the controller; the times it became the controller.
    leader_elections: int = 0
    unclean_leader_elections: int = 0
    controller_terms: int = 0
    # 1 while the log directory takes no writes (the broker handed off its leadership).
    offline_log_dirs: int = 0


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """A broker's replication counters, read at a scrape."""

    # ISR changes this broker's leaders made since it started.
    isr_shrinks: int = 0
    isr_expands: int = 0
    # The most records a partition it follows is behind its leader's high watermark.
    max_lag: int = 0


@dataclass
class BrokerView:
    broker_id: int
    version: str
    data_dirs: Callable[[], list[str]]
    partitions: Callable[[], Iterable[tuple[TopicPartitionKey, PartitionView]]]
    consumer_lag: Callable[[], Iterable[GroupLag]]
    partition_level: Callable[[], bool]
    # A cluster member's state; None on a single node.
    cluster: Callable[[], ClusterState | None] = lambda: None
    replication: Callable[[], ReplicationState] = ReplicationState
    # A topic's min.insync.replicas.
    min_insync: Callable[[str], int] = lambda _topic: 1


class StateCollector:
    """prometheus_client collector of the broker's state."""

    def __init__(self, view: BrokerView) -> None:
        self._view = view

    def describe(self) -> list[Any]:
        return []  # collected at each scrape only

    def collect(self) -> Iterator[Metric]:
        view = self._view
        per_partition = view.partition_level()
        info = GaugeMetricFamily(
            "kbroker_broker_info", "This broker (value 1).", labels=["broker_id", "version"]
        )
        info.add_metric([str(view.broker_id), view.version], 1)
        yield info
        yield from self._partitions(per_partition)
        yield from self._lag(per_partition)
        yield from self._disks()
        yield from self._cluster()

    def _cluster(self) -> Iterable[Metric]:
        state = self._view.cluster()
        if state is None:
            return
        for name, doc, value in (
            (
                "kafka_controller_kafkacontroller_activecontrollercount",
                "1 on the broker that is the controller (ActiveControllerCount).",
                state.active_controller,
            ),
            (
                "kafka_controller_kafkacontroller_offlinepartitionscount",
                "Partitions without a live leader, as the controller knows them "
                "(OfflinePartitionsCount; 0 on other brokers).",
                state.offline_partitions,
            ),
            (
                "kafka_controller_kafkacontroller_globalpartitioncount",
                "Partitions of the cluster, as the controller knows them (GlobalPartitionCount).",
                state.global_partitions,
            ),
            (
                "kafka_controller_kafkacontroller_globaltopiccount",
                "Topics of the cluster, as the controller knows them (GlobalTopicCount).",
                state.global_topics,
            ),
            (
                "kbroker_zookeeper_connected",
                "1 while this broker's ZooKeeper session is connected.",
                state.zookeeper_connected,
            ),
            (
                "kafka_log_logmanager_offlinelogdirectorycount",
                "Log directories that failed a write and take none until they can again "
                "(OfflineLogDirectoryCount); meanwhile the broker leads nothing it can hand off.",
                state.offline_log_dirs,
            ),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        for name, doc, count in (
            (
                "kbroker_controller_leader_elections",
                "Leaders elected by this broker's controller (a partition's leader set to "
                "another broker, new partitions included).",
                state.leader_elections,
            ),
            (
                "kbroker_controller_unclean_leader_elections",
                "Of those, leaders elected from outside the ISR (records may be lost).",
                state.unclean_leader_elections,
            ),
            (
                "kbroker_controller_changes",
                "Times this broker became the controller.",
                state.controller_terms,
            ),
        ):
            yield CounterMetricFamily(name, doc, value=count)

    def _partitions(self, per_partition: bool) -> Iterable[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of the partition's log on disk (Log.Size).", labels=labels
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments",
            "Segments of the partition's log (Log.NumLogSegments).",
            labels=labels,
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset",
            "First offset of the partition's log (Log.LogStartOffset).",
            labels=labels,
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset",
            "Offset after the last record of the partition's log (Log.LogEndOffset).",
            labels=labels,
        )
        topic_size: dict[str, int] = {}
        leaders = under_replicated = under_min_isr = at_min_isr = 0
        count = 0
        for tp, partition in list(view_items(self._view.partitions())):
            count += 1
            if partition.is_leader:
                leaders += 1
                isr = len(partition.isr)
                if isr < len(partition.replicas):
                    under_replicated += 1
                min_isr = self._view.min_insync(tp.topic)
                if isr < min_isr:
                    under_min_isr += 1
                elif isr == min_isr:
                    at_min_isr += 1
            lg = partition.log
            try:
                nbytes = lg.size_bytes
                if per_partition:
                    key = [tp.topic, str(tp.partition)]
                    size.add_metric(key, nbytes)
                    segments.add_metric(key, lg.segment_count)
                    start.add_metric(key, lg.log_start_offset)
                    end.add_metric(key, lg.log_end_offset)
            except (ValueError, OSError):
                continue  # closed (deleted) while we looked
            topic_size[tp.topic] = topic_size.get(tp.topic, 0) + nbytes
        yield size
        yield segments
        yield start
        yield end
        by_topic = GaugeMetricFamily(
            "kbroker_log_topic_size_bytes",
            "Bytes of the topic's partition logs on this broker.",
            labels=["topic"],
        )
        for topic, nbytes in sorted(topic_size.items()):
            by_topic.add_metric([topic], nbytes)
        yield by_topic
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partitions this broker holds (PartitionCount).",
            value=count,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads (LeaderCount).",
            value=leaders,
        )
        for name, doc, value in (
            (
                "kafka_server_replicamanager_underreplicatedpartitions",
                "Partitions this broker leads whose ISR lacks a replica "
                "(UnderReplicatedPartitions).",
                under_replicated,
            ),
            (
                "kafka_server_replicamanager_underminisrpartitioncount",
                "Partitions this broker leads whose ISR is below min.insync.replicas: acks=all "
                "writes are refused (UnderMinIsrPartitionCount).",
                under_min_isr,
            ),
            (
                "kafka_server_replicamanager_atminisrpartitioncount",
                "Partitions this broker leads whose ISR is at min.insync.replicas: one more "
                "failure stops acks=all writes (AtMinIsrPartitionCount).",
                at_min_isr,
            ),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        replication = self._view.replication()
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "Followers this broker's leaders dropped from an ISR (IsrShrinksPerSec's count).",
            value=replication.isr_shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "Followers this broker's leaders added to an ISR (IsrExpandsPerSec's count).",
            value=replication.isr_expands,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "Records the partition this broker follows furthest behind lacks of its leader's "
            "high watermark (ReplicaFetcherManager MaxLag).",
            value=replication.max_lag,
        )

    def _lag(self, per_partition: bool) -> Iterable[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "The group's committed offset of the partition (kafka_exporter's name).",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Records of the partition after the group's committed offset: high watermark - "
            "committed offset, computed by the group coordinator (kafka_exporter's name).",
            labels=labels,
        )
        sums: dict[tuple[str, str], int] = {}
        for entry in self._view.consumer_lag():
            if per_partition:
                key = [entry.group, entry.topic, str(entry.partition)]
                current.add_metric(key, entry.committed)
                lag.add_metric(key, entry.lag)
            sums[entry.group, entry.topic] = sums.get((entry.group, entry.topic), 0) + entry.lag
        yield current
        yield lag
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "The group's lag summed over the topic's partitions (kafka_exporter's name).",
            labels=["consumergroup", "topic"],
        )
        for (group, topic), total in sorted(sums.items()):
            lag_sum.add_metric([group, topic], total)
        yield lag_sum

    def _disks(self) -> Iterable[Metric]:
        total = GaugeMetricFamily(
            "kbroker_log_dir_total_bytes",
            "Size of the file system holding the log directory.",
            labels=["dir"],
        )
        usable = GaugeMetricFamily(
            "kbroker_log_dir_usable_bytes",
            "Bytes the broker can still write in the log directory's file system.",
            labels=["dir"],
        )
        for path in self._view.data_dirs():
            try:
                st = os.statvfs(path)
            except OSError:
                continue
            total.add_metric([path], st.f_blocks * st.f_frsize)
            usable.add_metric([path], st.f_bavail * st.f_frsize)
        yield total
        yield usable


def view_items(
    items: Iterable[tuple[TopicPartitionKey, PartitionView]],
) -> list[tuple[TopicPartitionKey, PartitionView]]:
    """A copy of ``items`` taken at once (a dict's items() are copied without running
    Python code, so the event loop cannot change the dict half way)."""
    for _ in range(3):
        try:
            return list(items)
        except RuntimeError:  # changed size during iteration: a generator view
            continue
    return []
