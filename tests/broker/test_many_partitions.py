"""Partitions are limited by disk, not descriptors: a broker whose RLIMIT_NOFILE is 1024
takes a topic of 10,000 partitions (about 3 descriptors each before the file cache),
serves produce and fetch on it, and restarts on that data, cleanly and after a crash,
with its open segment files under log.max.open.files."""

from __future__ import annotations

import os
import re
import resource
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers import BrokerProcess, consume_all, produce

PARTITIONS = 10_000
NOFILE = 1024
MAX_OPEN_FILES = 256
TOPIC = "wide"
SAMPLE = [0, 1, 2, 777, 4_999, 5_000, 9_998, PARTITIONS - 1]
PER_PARTITION = 5


def limit_descriptors() -> None:
    # Soft and hard: the broker cannot raise it back.
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


SEGMENT_FILE = re.compile(r"^\d{20}\.(log|index|timeindex)$")


def descriptors(pid: int, data_dir: Path) -> dict[str, int]:
    """Open descriptors of the process: segment and index files under data_dir, and all."""
    counts = {"log": 0, "index": 0, "total": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        counts["total"] += 1
        if not target.startswith(f"{data_dir}/"):
            continue
        if not SEGMENT_FILE.match(os.path.basename(target)):
            continue  # the metadata change log, the directory lock
        if target.endswith(".log"):
            counts["log"] += 1
        else:
            counts["index"] += 1
    return counts


def check_descriptors(b: BrokerProcess) -> None:
    assert b.proc is not None
    fds = descriptors(b.proc.pid, b.data_dir)
    assert fds["log"] <= MAX_OPEN_FILES, fds
    assert fds["index"] == 0, fds
    assert fds["total"] < NOFILE, fds


def produce_sample(bootstrap: str) -> None:
    records = [
        (None, f"{part}:{i}".encode(), None, part) for part in SAMPLE for i in range(PER_PARTITION)
    ]
    produce(bootstrap, TOPIC, records, flush_timeout=60)


def fetch_all(bootstrap: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {part: [] for part in SAMPLE}
    for msg in consume_all(bootstrap, TOPIC, SAMPLE, len(SAMPLE) * PER_PARTITION, timeout=60):
        got[msg.partition()].append(msg.value())
    return got


def test_ten_thousand_partitions_under_a_1024_descriptor_limit(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", preexec=limit_descriptors)
    settings = (f"log.max.open.files={MAX_OPEN_FILES}",)
    try:
        b.start(*settings)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        futures = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=300, operation_timeout=300
        )
        futures[TOPIC].result(300)
        assert len(list((tmp_path / "data").glob(f"{TOPIC}-*"))) == PARTITIONS
        check_descriptors(b)
        produce_sample(b.bootstrap)
        expected = {part: [f"{part}:{i}".encode() for i in range(PER_PARTITION)] for part in SAMPLE}
        assert fetch_all(b.bootstrap) == expected
        check_descriptors(b)

        assert b.stop(timeout=300) == 0
        b.start(*settings, timeout=300)
        check_descriptors(b)
        assert fetch_all(b.bootstrap) == expected
        meta = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(TOPIC, timeout=60)
        assert len(meta.topics[TOPIC].partitions) == PARTITIONS

        b.kill()  # a crash: every partition is recovered on the next start
        b.start(*settings, timeout=300)
        check_descriptors(b)
        assert fetch_all(b.bootstrap) == expected
        assert "Traceback" not in b.output()
    finally:
        b.kill()
