"""Many topics at once: created together off the event loop, durable once acknowledged,
and bounded by max.broker.partitions (issue 10, items 5 and 6).

The figures (time to create 10,000 topics, a producer's latency meanwhile,
Apache Kafka's for the same) come from `python -m bench.topics`.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kbroker.log.partition_metadata import PARTITION_METADATA_FILE
from kbroker.metadata.store import METADATA_FILE, METADATA_LOG

WAIT = 120
TOPICS = 600


def _created(futures: dict[str, object]) -> int:
    ok = 0
    for f in futures.values():
        f.result(WAIT)  # type: ignore[attr-defined]
        ok += 1
    return ok


def test_topics_in_one_request_and_in_many_survive_a_crash(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("max.broker.partitions=5000")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    _created(admin.create_topics([NewTopic("probe", 1, 1)]))
    failures: list[object] = []
    delivered = [0]
    stop = threading.Event()

    def probe() -> None:
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})

        def done(err: object, _msg: object) -> None:
            if err is None:
                delivered[0] += 1
            else:
                failures.append(err)

        while not stop.is_set():
            p.produce("probe", b"x", on_delivery=done)
            p.poll(0.005)
        p.flush(30)

    t = threading.Thread(target=probe)
    t.start()
    try:
        one = admin.create_topics(
            [NewTopic(f"one.{i}", 1, 1) for i in range(TOPICS)], request_timeout=WAIT
        )
        assert _created(one) == TOPICS
        many = [
            admin.create_topics([NewTopic(f"many.{i}", 2, 1)], request_timeout=WAIT)
            for i in range(TOPICS)
        ]
        assert sum(_created(f) for f in many) == TOPICS
    finally:
        stop.set()
        t.join(60)
    assert not failures
    assert delivered[0] > 0

    # Acknowledged creations are on disk: a crash right after loses none.
    b.kill()
    b.start()
    md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=WAIT)
    names = set(md.topics)
    assert {f"one.{i}" for i in range(TOPICS)} <= names
    assert {f"many.{i}" for i in range(TOPICS)} <= names
    assert len(md.topics["many.7"].partitions) == 2


def test_partitions_beyond_the_broker_limit_are_refused_before_anything_is_made(  # type: ignore[no-untyped-def]
    broker_factory,
) -> None:
    b = broker_factory("max.broker.partitions=100")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    _created(admin.create_topics([NewTopic("small", 60, 1)]))
    big = admin.create_topics([NewTopic("big", 50_000, 1)])["big"]
    try:
        big.result(WAIT)
        raise AssertionError("50,000 partitions were accepted beyond max.broker.partitions")
    except KafkaException as exc:
        err = exc.args[0]
        assert err.code() == KafkaError.POLICY_VIOLATION
        assert "max.broker.partitions=100" in err.str()
    grow = admin.create_partitions([NewPartitions("small", 101)])["small"]
    try:
        grow.result(WAIT)
        raise AssertionError("growing past max.broker.partitions was accepted")
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.POLICY_VIOLATION
    # Nothing was made for the refused requests, and what fits still works.
    assert not any(p.name.startswith("big-") for p in b.data_dir.iterdir())
    assert sum(1 for p in b.data_dir.iterdir() if p.name.startswith("small-")) == 60
    _created(admin.create_partitions([NewPartitions("small", 100)]))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=WAIT)
        if len(md.topics["small"].partitions) == 100:
            break
        time.sleep(0.2)
    assert len(md.topics["small"].partitions) == 100


def test_a_topic_change_writes_the_same_whatever_the_number_of_topics(broker) -> None:  # type: ignore[no-untyped-def]
    """A change appends one short line to the change log; it never rewrites the whole metadata."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    change_log = broker.data_dir / METADATA_LOG
    snapshot = broker.data_dir / METADATA_FILE
    grown = []
    for batch in range(3):
        _created(admin.create_topics([NewTopic(f"bulk{batch}.{i}", 1, 1) for i in range(400)]))
        before = change_log.stat().st_size
        snapshot_before = snapshot.stat().st_mtime_ns if snapshot.exists() else None
        _created(admin.create_topics([NewTopic(f"single{batch}", 1, 1)]))
        grown.append(change_log.stat().st_size - before)
        assert (snapshot.stat().st_mtime_ns if snapshot.exists() else None) == snapshot_before
    # The same few hundred bytes with 401, 802 and 1203 topics.
    assert max(grown) < 1024, grown
    assert max(grown) - min(grown) < 16, grown


def test_a_topic_whose_directory_cannot_be_made_is_refused_and_the_burst_goes_on(  # type: ignore[no-untyped-def]
    broker,
) -> None:
    """Creations that arrive together are made together; one that fails is refused alone."""
    # A file where the partition directory of "blocked" would go.
    (broker.data_dir / "blocked-0").write_bytes(b"")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [f"burst.{i}" for i in range(100)]
    names.insert(50, "blocked")
    futures = {
        name: admin.create_topics([NewTopic(name, 2 if name != "blocked" else 1, 1)])[name]
        for name in names
    }
    for name, f in futures.items():
        if name != "blocked":
            f.result(WAIT)
    try:
        futures["blocked"].result(WAIT)
        raise AssertionError("a topic whose directory could not be made was created")
    except KafkaException as exc:
        err = exc.args[0]
        assert err.code() == KafkaError.KAFKA_STORAGE_ERROR
        assert str(broker.data_dir / "blocked-0") in err.str()
    md = admin.list_topics(timeout=WAIT)
    assert "blocked" not in md.topics
    for name in names:
        if name != "blocked":
            assert len(md.topics[name].partitions) == 2
            assert all(p.leader >= 0 for p in md.topics[name].partitions.values())
    # The broker goes on: the name can be taken once the path is free.
    (broker.data_dir / "blocked-0").unlink()
    _created(admin.create_topics([NewTopic("blocked", 1, 1)]))
    assert (broker.data_dir / "blocked-0" / PARTITION_METADATA_FILE).exists()
