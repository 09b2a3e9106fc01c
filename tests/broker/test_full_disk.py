"""A full disk: every storage failure is answered, logged once, and heals by itself.

The broker's data dir is a small tmpfs the tests fill with a filler file and
free again, with the broker running throughout: while the disk is full every
write gets KAFKA_STORAGE_ERROR (or COORDINATOR_NOT_AVAILABLE for the group
coordinator), nothing half-created is left behind, reads keep working, and
once the filler is gone produce, topic creation and consumer groups work
again without a restart.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker._kbroker import build_batch, decode_records
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    CreatePartitionsRequest,
    DeleteTopicsRequest,
)
from kbroker.protocol.messages.group import OffsetCommitRequest
from tests.broker.test_groups_wire import find, join
from tests.helpers import (
    BrokerProcess,
    Wire,
    fetch_req,
    init_producer_id,
    metadata,
    wait_for,
    wire_create_topic,
    wire_produce,
)

SETTINGS = (
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
)
DISK_BYTES = 16 << 20
# Lines a storage failure may log while it lasts (rate limited, not one per request).
MAX_ERROR_LINES = 6


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A DISK_BYTES tmpfs, unmounted at teardown whatever happened."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=30)


def fill(disk: Path, leave: int = 0, disk_bytes: int = DISK_BYTES) -> Path:
    """Fills the file system (of ``disk_bytes``) with one file, then frees ``leave`` bytes
    of it again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 4096):
            chunk = b"\xff" * size
            for _ in range(disk_bytes // size + 1):
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
            else:
                raise AssertionError(f"{disk} did not fill up")
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


def produce(w: Wire, topic: str, values: list[bytes]) -> tuple[int, int]:
    """(error code, base offset) of one batch holding ``values``."""
    batch = build_batch([(None, v, []) for v in values], 0, 0, int(time.time() * 1000))
    return wire_produce(w, topic, batch)


def fetch_all(w: Wire, topic: str) -> list[tuple[int, bytes]]:
    """Every (offset, value) of partition 0, from offset 0 to the high watermark."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    for _ in range(10_000):
        req = fetch_req(topic, offset)
        part = w.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
        assert part.error_code == ErrorCode.NONE, part.error_code
        data = bytes(part.records or b"")
        if not data:
            assert offset == part.high_watermark
            return out
        pos = 0
        while pos + 12 <= len(data):
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            for off, _ts, _key, value, _headers in decode_records(
                data[pos : pos + 12 + length], 1 << 24
            ):
                if off >= offset:
                    out.append((off, value))
                    offset = off + 1
            pos += 12 + length
    raise AssertionError("fetch never reached the high watermark")


def commit_wide(w: Wire, group: str, offset: int) -> set[int]:
    """Error codes of a standalone commit of 20 partitions of "wide", with 4000-byte metadata each.

    Big enough (80 KB) not to fit the free end of a segment's last page.
    """
    CP = OffsetCommitRequest.Topic.Partition
    resp = w.request(
        ApiKey.OFFSET_COMMIT,
        8,
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.Topic(
                    name="wide",
                    partitions=[
                        CP(
                            partition_index=i,
                            committed_offset=offset,
                            committed_leader_epoch=-1,
                            committed_metadata="m" * 4000,
                        )
                        for i in range(20)
                    ],
                )
            ],
        ),
    )
    return {int(p.error_code) for t in resp.topics for p in t.partitions}


def error_lines(broker: BrokerProcess) -> list[str]:
    return [
        line for line in broker.output().splitlines() if " ERROR " in line or " WARNING " in line
    ]


def assert_no_traceback(broker: BrokerProcess) -> None:
    assert "Traceback" not in broker.output(), broker.output()[-4000:]


def test_group_coordinator_heals_once_space_is_back(small_disk: Path, broker_factory: Any) -> None:
    data = small_disk  # the broker log goes beside it, off the small disk
    broker: BrokerProcess = broker_factory(*SETTINGS, data_dir=data)
    w = Wire(broker.bootstrap)
    consumer: Consumer | None = None
    try:
        assert wire_create_topic(w, "events", 1) == ErrorCode.NONE
        assert wire_create_topic(w, "wide", 20) == ErrorCode.NONE
        for i in range(10):
            assert produce(w, "events", [b"e%d" % i]) == (ErrorCode.NONE, i)
        filler = fill(small_disk)

        # __consumer_offsets cannot be created: the coordinator is "not available", many times over.
        for _ in range(30):
            assert find(w, 3, "g")[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert join(w, 5, "g").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "__consumer_offsets" not in {t.name for t in metadata(w, None).topics}
        assert not list(data.glob("__consumer_offsets-*")), (
            "a half-created partition was left behind"
        )
        # Everything else is still served: reads work, writes say why they fail.
        # (Larger than the free end of the segment's last page.)
        assert produce(w, "events", [b"lost" * 4096])[0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert [v for _, v in fetch_all(w, "events")] == [b"e%d" % i for i in range(10)]

        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "g",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
            }
        )
        consumer.subscribe(["events"])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert consumer.poll(0.2) is None or consumer.assignment() == []
        assert broker.proc is not None and broker.proc.poll() is None

        filler.unlink()
        got: list[bytes] = []

        def consumed(count: int) -> bool:
            msg = consumer.poll(0.5)  # type: ignore[union-attr]
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            return len(got) >= count

        wait_for(
            lambda: consumed(10), "the group to form and consume after space came back", timeout=60
        )
        assert got == [b"e%d" % i for i in range(10)]
        committed = consumer.commit(asynchronous=False)
        assert committed is not None and all(tp.error is None for tp in committed)
        assert consumer.committed([TopicPartition("events", 0)], timeout=10)[0].offset == 10

        # The disk fills up again under a working coordinator: commits fail with
        # NOT_COORDINATOR (Kafka's answer to a storage error), then work again.
        assert commit_wide(w, "standalone", 1) == {ErrorCode.NONE}
        filler = fill(small_disk)
        for _ in range(10):
            assert commit_wide(w, "standalone", 2) == {ErrorCode.NOT_COORDINATOR}
        filler.unlink()
        assert commit_wide(w, "standalone", 3) == {ErrorCode.NONE}

        # A real producer: its writes fail while the disk is full (and the group
        # keeps consuming); once space is back they go through, and the consumer
        # gets exactly those.
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000})
        reports: list[tuple[bytes, Any]] = []
        filler = fill(small_disk)
        for i in range(5):
            producer.produce(
                "events",
                b"full-%d-" % i + b"f" * 8192,
                on_delivery=lambda e, m: reports.append((m.value(), e)),
            )
        assert producer.flush(20) == 0
        assert len(reports) == 5 and all(e is not None for _, e in reports), reports
        assert not consumed(11)
        filler.unlink()
        reports.clear()
        sent = [b"back-%d-" % i + b"b" * 8192 for i in range(5)]
        for value in sent:
            producer.produce(
                "events", value, on_delivery=lambda e, m: reports.append((m.value(), e))
            )
        assert producer.flush(20) == 0
        assert [e for _, e in reports] == [None] * 5, reports
        wait_for(lambda: consumed(15), "the records written once space was back", timeout=30)
        assert got[10:] == sent
    finally:
        if consumer is not None:
            consumer.close()
        w.close()
    assert broker.stop() == 0
    assert_no_traceback(broker)
    lines = [line for line in error_lines(broker) if "__consumer_offsets" in line]
    assert 1 <= len(lines) <= MAX_ERROR_LINES, lines
    assert any("append to __consumer_offsets" in line for line in lines), lines
    broker.start()
    with contextlib.closing(
        Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    ) as again:
        assert again.committed([TopicPartition("events", 0)], timeout=20)[0].offset == 10


def test_metadata_changes_on_a_full_disk_leave_nothing_and_work_later(
    small_disk: Path, broker_factory: Any
) -> None:
    data = small_disk  # the broker log goes beside it, off the small disk
    broker: BrokerProcess = broker_factory(*SETTINGS, data_dir=data)
    with contextlib.closing(Wire(broker.bootstrap)) as w:
        assert wire_create_topic(w, "kept", 2) == ErrorCode.NONE
        assert wire_create_topic(w, "doomed", 2) == ErrorCode.NONE
        assert produce(w, "kept", [b"k"]) == (ErrorCode.NONE, 0)
        filler = fill(small_disk)
        for _ in range(5):
            assert wire_create_topic(w, "later", 4) == ErrorCode.KAFKA_STORAGE_ERROR
        assert not list(data.glob("later-*")), "a half-created partition was left behind"
        assert "later" not in {t.name for t in metadata(w, None).topics}
        # Auto-creation through Metadata fails the same way, and the connection stays up.
        (entry,) = metadata(w, ["auto"]).topics
        assert entry.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert not list(data.glob("auto-*"))
        # Growing a topic (its new logs need space) fails whole: the topic stays as it was.
        grow = CreatePartitionsRequest(
            topics=[CreatePartitionsRequest.Topic(name="kept", count=5, assignments=None)],
            timeout_ms=5000,
            validate_only=False,
        )
        grown = w.request(ApiKey.CREATE_PARTITIONS, 3, grow).results[0]
        assert grown.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert sorted(p.name for p in data.glob("kept-*")) == ["kept-0", "kept-1"]
        (kept,) = metadata(w, ["kept"]).topics
        assert kept.error_code == ErrorCode.NONE and len(kept.partitions) == 2
        assert fetch_all(w, "kept") == [(0, b"k")]
        # A deletion or a block of producer ids is a short line in the metadata
        # change log: it fits when the log's last page has room, and then it
        # succeeds; otherwise it fails whole. Either way the state is whole.
        delete = DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=5000)
        deleted = w.request(ApiKey.DELETE_TOPICS, 4, delete).responses[0]
        listed = {t.name: len(t.partitions) for t in metadata(w, None).topics}
        if deleted.error_code == ErrorCode.NONE:
            assert "doomed" not in listed
            assert not list(data.glob("doomed-*"))
        else:
            assert deleted.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert listed["doomed"] == 2
        # Idempotent producers get an id only once its block is recorded; else retriable.
        assert init_producer_id(w).error_code in (
            ErrorCode.NONE,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
        )

        filler.unlink()
        assert wire_create_topic(w, "later", 4) == ErrorCode.NONE
        assert produce(w, "later", [b"x"]) == (ErrorCode.NONE, 0)
        assert w.request(ApiKey.CREATE_PARTITIONS, 3, grow).results[0].error_code == 0
        assert init_producer_id(w).error_code == ErrorCode.NONE
    assert broker.stop() == 0
    assert_no_traceback(broker)
    broker.start()
    with contextlib.closing(Wire(broker.bootstrap)) as w:
        assert fetch_all(w, "later") == [(0, b"x")]
        topics = {t.name: len(t.partitions) for t in metadata(w, None).topics}
        assert topics == {"kept": 5, "later": 4} | (
            {} if deleted.error_code == ErrorCode.NONE else {"doomed": 2}
        )


def test_failed_appends_leave_exactly_the_acknowledged_records(
    small_disk: Path, broker_factory: Any
) -> None:
    data = small_disk  # the broker log goes beside it, off the small disk
    broker: BrokerProcess = broker_factory(*SETTINGS, data_dir=data)
    acked: list[bytes] = []
    failures = 0
    w = Wire(broker.bootstrap)

    def send(values: list[bytes]) -> int:
        nonlocal failures
        code, base = produce(w, "t", values)
        if code == ErrorCode.NONE:
            assert base == len(acked), (base, len(acked))
            acked.extend(values)
        else:
            assert code == ErrorCode.KAFKA_STORAGE_ERROR, code
            failures += 1
        return code

    try:
        # Small segments, so appends roll (seal indexes, create files) while the
        # disk is full; segment.ms, so the background roll runs into it too.
        configs = {"segment.bytes": "65536", "index.interval.bytes": "512", "segment.ms": "300"}
        assert wire_create_topic(w, "t", 1, configs) == ErrorCode.NONE
        for i in range(20):
            assert send([b"before-%d-" % i + b"a" * 1000]) == ErrorCode.NONE
        # Leave a little room: a big batch is written in part, then cut back.
        filler = fill(small_disk, leave=12 * 1024)
        for i in range(200):
            send([b"full-%d-%d-" % (i, j) + b"b" * (300 * (i % 7)) for j in range(1 + i % 30)])
        assert failures >= 150, failures
        time.sleep(1)  # a few background roll attempts
        assert fetch_all(w, "t") == list(enumerate(acked))
    finally:
        w.close()
    # A clean stop on the full disk: what cannot be saved is logged, the exit is clean.
    assert broker.stop() == 0
    filler.unlink()
    broker.start()
    w = Wire(broker.bootstrap)
    try:
        assert fetch_all(w, "t") == list(enumerate(acked))
        for i in range(50):
            assert send([b"after-%d-" % i + b"c" * 2000]) == ErrorCode.NONE
        assert fetch_all(w, "t") == list(enumerate(acked))
    finally:
        w.close()
    assert broker.stop() == 0
    assert_no_traceback(broker)
    appends = [line for line in error_lines(broker) if "append to t-0" in line]
    assert 1 <= len(appends) <= MAX_ERROR_LINES, appends
    broker.start()
    w = Wire(broker.bootstrap)
    try:
        assert fetch_all(w, "t") == list(enumerate(acked))
        assert send([b"restarted"]) == ErrorCode.NONE
        assert fetch_all(w, "t")[-1] == (len(acked) - 1, b"restarted")
    finally:
        w.close()


def test_batch_larger_than_a_segment_is_refused_not_a_closed_connection(
    broker: BrokerProcess,
) -> None:
    # max.message.bytes lets it through; the log cannot hold it in one segment.
    with contextlib.closing(Wire(broker.bootstrap)) as w:
        assert wire_create_topic(w, "small-segments", 1, {"segment.bytes": "16384"}) == 0
        code, _ = produce(w, "small-segments", [b"x" * 20_000])
        assert code == ErrorCode.RECORD_LIST_TOO_LARGE
        assert produce(w, "small-segments", [b"fits"]) == (ErrorCode.NONE, 0)
