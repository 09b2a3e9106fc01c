"""The transactional rows' own pieces: three brokers seen as one, the warm-up, the check.

``python -m bench --transactions`` (bench/harness.py runs it) measures
transactional produce on kbroker and Apache Kafka 3.9.1: transactions of 1,
100 and 10,000 records (bench/workloads.py ``transactions_session``) on a
single node (``systems.kafka_node`` in KRaft mode for Kafka) and on three
brokers with replication factor 3 (``cluster.three_brokers``: a ZooKeeper of
their own, Kafka in ZooKeeper mode), each session on fresh brokers.

- `ThreeBrokers`: a running three-broker cluster behind the harness's
  `systems.Broker` interface: CPU seconds summed over the three brokers,
  the largest peak RSS (each in ``peak_rss_each``), and `settle`, which
  waits until every replica of a topic holds the leader's bytes, so the
  brokers' CPU counts the replication of every record and marker.
- `warm_up`: untimed transactions of every size first (JIT compilation,
  the transaction state topic and its coordinators, connections).
- `committed_visible`: after a row, a read_committed kcat counts the
  records it sees: every committed record, no more.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import cluster, loadgen, systems
from .workloads import TRANSACTION_PARTITIONS, TRANSACTION_SIZES

# The Kafka version the transactional rows compare with: the one kbroker's transactions are
# checked against (its ZooKeeper mode runs the three-broker rows).
KAFKA_VERSION = cluster.KAFKA_ZK_VERSION
# Topic settings of the replicated rows, as bench/replicated.py's.
REPLICATED_TOPIC_CONFIG = {"min.insync.replicas": "2"}


class ThreeBrokers(systems.Broker):
    """Three brokers of one system as one `systems.Broker` (``proc`` is broker 1's)."""

    def __init__(self, c: cluster.Cluster, version: str) -> None:
        super().__init__(c.system, version, c.bootstrap, c.procs[1], c.root, {})
        self.cluster = c

    def usage(self) -> dict[str, float]:
        each = [systems.proc_usage(p.pid) for _, p in sorted(self.cluster.procs.items())]
        return {
            "cpu_s": sum(u.get("cpu_s", 0) for u in each),
            "peak_rss_mb": max((u.get("peak_rss_mb", 0) for u in each), default=0),
            "rss_mb": sum(u.get("rss_mb", 0) for u in each),
        }

    def peak_rss_each(self) -> list[float]:
        return [
            round(systems.proc_usage(p.pid).get("peak_rss_mb", 0), 1)
            for _, p in sorted(self.cluster.procs.items())
        ]

    def reset_peak_rss(self) -> None:
        for p in self.cluster.procs.values():
            systems.reset_peak_rss(p.pid)

    def settle(self, topic: str, partitions: int, timeout: float = 60) -> float | None:
        """Seconds until every replica of every partition of ``topic`` holds the same bytes
        on disk (followers copy the leader's batches byte for byte); None after ``timeout``."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            sizes = [self._replica_bytes(topic, p) for p in range(partitions)]
            if all(len(set(s)) == 1 for s in sizes):
                return round(time.monotonic() - start, 2)
            time.sleep(0.05)
        return None

    def _replica_bytes(self, topic: str, partition: int) -> list[int]:
        out = []
        for b in sorted(self.cluster.procs):
            total = 0
            try:
                with os.scandir(self.cluster.data_dir(b) / f"{topic}-{partition}") as it:
                    total = sum(e.stat().st_size for e in it if e.name.endswith(".log"))
            except OSError:
                pass
            out.append(total)
        return out


@contextmanager
def three_brokers(
    system: str, data_root: Path, cpus: set[int] | None, log_dir: Path
) -> Iterator[ThreeBrokers]:
    """A fresh three-broker cluster of ``system`` (bench/cluster.py) on its own ZooKeeper, all
    three brokers pinned to ``cpus``; data removed afterwards."""
    import shutil
    import tempfile

    data_root.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"txn-{system}-", dir=data_root))
    try:
        with cluster.three_brokers(system, root, cpus=cpus, log_dir=log_dir, stop_timeout=15) as c:
            version = systems.kbroker_version() if system == "kbroker" else KAFKA_VERSION
            yield ThreeBrokers(c, version)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def settle(b: systems.Broker, topic: str, partitions: int) -> float | None:
    """Waits for the followers of ``topic`` on a cluster (`ThreeBrokers.settle`); 0 on one
    node."""
    return b.settle(topic, partitions) if isinstance(b, ThreeBrokers) else 0.0


def topic_config(replicas: int) -> dict[str, str]:
    return REPLICATED_TOPIC_CONFIG if replicas > 1 else {}


def warm_up(b: systems.Broker, replicas: int, records: int, producers: int, seconds: float) -> None:
    """Untimed transactions of every size, ``records`` (at least one transaction per producer)
    for ``seconds`` at most each, read back by a read_committed consumer."""
    topic = f"warmup-txn-{uuid.uuid4().hex[:6]}"
    loadgen.create_topic(
        b.bootstrap, topic, TRANSACTION_PARTITIONS, replicas, topic_config(replicas), 60
    )
    total = 0
    for n in TRANSACTION_SIZES:
        r = loadgen.produce_transactions(
            b.bootstrap,
            topic,
            TRANSACTION_PARTITIONS,
            max(records, n * producers),
            n,
            1024,
            producers,
            max_seconds=seconds,
        )
        total += r.records
    committed_visible(b.bootstrap, topic, total, timeout=60)


def committed_visible(bootstrap: str, topic: str, records: int, timeout: float = 120) -> int:
    """How many records a read_committed consumer (kcat, to the end of every partition) reads
    from ``topic`` from offset 0, read again until it sees ``records`` or more (the last
    markers may still be on their way to a partition, holding back its last stable offset) or
    ``timeout`` passes: ``records`` when every committed record is visible and nothing else."""
    read_committed = {"isolation.level": "read_committed"}
    deadline = time.monotonic() + timeout
    while True:
        seen = loadgen.consume(bootstrap, topic, 1, timeout, client=read_committed).records
        if seen >= records or time.monotonic() > deadline:
            return seen
        time.sleep(0.5)
