"""The clients of a fault run, each on a thread of its own, recording every operation.

- ``ProducerWorker``: an idempotent producer with acks=all (by default; with acks=1
  a plain one, as librdkafka allows idempotence only with acks=all) writing unique
  values ``P-N`` at a steady rate; each send's outcome is recorded when the client
  reports it. Outcomes: ``ok`` (acknowledged, with its offset),
  ``fail`` only where the value certainly never reached a broker (it was still in
  the client's queue when purged, or the queue refused it), ``unknown`` for every
  other error (a timeout or a lost connection says nothing about whether the
  broker wrote it).
- ``ConsumerWorker``: a member of the consumer group (``subscribe``) or a reader
  assigned every partition from the start; each record it returns is recorded
  with a ``session`` that changes when it may legitimately go back (a new
  assignment). At the end it catches up with the end offsets it is given and
  records how far behind it stayed.
- ``final_read``: a fresh reader of every partition from the start to the end
  offsets, once the cluster healed: the log as it finally is.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from bench.faults.history import Recorder

log = logging.getLogger("bench.faults")

# librdkafka's own log lines (a refused connection while a broker is down, ...) go to
# a logger of ours, shown with -v, not to stderr.
_QUIET = {"logger": logging.getLogger("bench.faults.rdkafka")}
# The producers' idempotence events (producer ids and epochs, drains, epoch bumps):
# librdkafka's "eos" debug lines, which the run writes to producers.log.
PRODUCER_LOG = logging.getLogger("bench.faults.producers")


class ProducerWorker(threading.Thread):
    def __init__(
        self,
        index: int,
        bootstrap: str,
        topic: str,
        rate: float,
        recorder: Recorder,
        acks: str = "all",
        idempotent: bool = True,
    ) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index = index
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.rec = recorder
        self.acks = acks
        self.idempotent = idempotent
        self.stopping = threading.Event()
        self.sent = 0
        self.fatal: KafkaError | None = None
        self.error: BaseException | None = None

    def _producer(self) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": self.acks,
                "enable.idempotence": self.idempotent,
                "linger.ms": 5,
                # Long enough to ride out a fault, short enough that a lost send is
                # reported (unknown) within the run.
                "message.timeout.ms": 30000,
                "request.timeout.ms": 10000,
                "reconnect.backoff.max.ms": 1000,
                "error_cb": self._on_error,
                "debug": "eos",
                "logger": PRODUCER_LOG,
            }
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal = err

    def _delivered(self, value: str, t0: float, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.rec.record(
                "send",
                process=self.name,
                value=value,
                t0=t0,
                outcome="ok",
                partition=msg.partition(),
                offset=msg.offset(),
            )
            return
        # Purged while still queued in the client: never on the wire, never written.
        outcome = "fail" if err.code() == KafkaError._PURGE_QUEUE else "unknown"
        self.rec.record(
            "send", process=self.name, value=value, t0=t0, outcome=outcome, error=err.str()
        )

    def _send(self, producer: Producer, value: str) -> None:
        t0 = self.rec.now()
        try:
            producer.produce(
                self.topic,
                value=value.encode(),
                on_delivery=lambda err, msg, v=value, t=t0: self._delivered(v, t, err, msg),
            )
        except BufferError as exc:  # the client's queue is full: not sent
            self.rec.record(
                "send", process=self.name, value=value, t0=t0, outcome="fail", error=str(exc)
            )

    def _retire(self, producer: Producer, timeout: float) -> None:
        """Waits up to ``timeout`` for the outcomes still due, then purges the rest (each
        purged send still reports: queued ones fail, in-flight ones are unknown)."""
        producer.flush(timeout)
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.flush(5)

    def run(self) -> None:
        try:
            producer = self._producer()
            interval = 1.0 / self.rate
            due = time.monotonic()
            while not self.stopping.is_set():
                if self.fatal is not None:
                    log.warning("%s: fatal %s; a new producer takes over", self.name, self.fatal)
                    self._retire(producer, 0)
                    self.fatal = None
                    producer = self._producer()
                now = time.monotonic()
                if now >= due:
                    self._send(producer, f"{self.index}-{self.sent}")
                    self.sent += 1
                    due = max(due + interval, now - 1.0)  # no burst after a stall
                producer.poll(max(0.0, min(0.05, due - time.monotonic())))
            self._retire(producer, 40)
        except BaseException as exc:  # reported by the run, not lost in a thread
            self.error = exc
            log.exception("%s failed", self.name)


class ConsumerWorker(threading.Thread):
    """``group``: a consumer-group member (process ``group-N``); otherwise an assigned
    reader of ``partitions`` from the start (process ``reader-N``)."""

    def __init__(
        self,
        index: int,
        bootstrap: str,
        topic: str,
        recorder: Recorder,
        group: str | None,
        partitions: int,
        isolation: str | None = None,
    ) -> None:
        name = f"group-{index}" if group else f"reader-{index}"
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.rec = recorder
        self.group = group
        self.partitions = partitions
        # None: the client's default (librdkafka's is read_committed), not recorded.
        self.isolation = isolation
        self.session = 0
        self.read = 0
        self.stopping = threading.Event()
        # Set by the run at the end: the end offsets to catch up with, and until when.
        self.catch_up: tuple[dict[int, int], float] | None = None
        self.behind: dict[int, int] | None = None
        self.error: BaseException | None = None

    def _consumer(self) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group or f"kbf-reader-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": self.group is not None,
                "auto.commit.interval.ms": 1000,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "reconnect.backoff.max.ms": 1000,
                **({"isolation.level": self.isolation} if self.isolation else {}),
                **_QUIET,
            }
        )

    def _assigned(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self.session += 1

    def _behind(self, consumer: Consumer, ends: dict[int, int]) -> dict[int, int]:
        assigned = [tp for tp in consumer.assignment() if tp.topic == self.topic]
        if not assigned:
            return {}
        positions = consumer.position(assigned)
        behind = {}
        for tp in positions:
            end = ends.get(tp.partition, 0)
            # A position not known yet (nothing read, nothing committed) is the start.
            pos = tp.offset if tp.offset >= 0 else 0
            behind[tp.partition] = max(0, end - pos)
        return behind

    def run(self) -> None:
        try:
            consumer = self._consumer()
            if self.group:
                consumer.subscribe([self.topic], on_assign=self._assigned)
            else:
                self.session = 1
                consumer.assign(
                    [
                        TopicPartition(self.topic, p, OFFSET_BEGINNING)
                        for p in range(self.partitions)
                    ]
                )
            while not self.stopping.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.read += 1
                    self.rec.record(
                        "read",
                        process=self.name,
                        session=self.session,
                        partition=msg.partition(),
                        offset=msg.offset(),
                        value=msg.value().decode(errors="replace"),
                        **({"isolation": self.isolation} if self.isolation else {}),
                    )
                if self.catch_up is not None and self.behind is None:
                    ends, deadline = self.catch_up
                    behind = self._behind(consumer, ends)
                    if not any(behind.values()) or time.monotonic() > deadline:
                        if self.group and behind:
                            try:  # the group's committed offsets are checked too
                                consumer.commit(asynchronous=False)
                            except Exception as exc:  # shows as the group's lag
                                log.warning("%s: final commit: %s", self.name, exc)
                        self.behind = behind
                        self.rec.record("lag", process=self.name, behind=behind)
            consumer.close()
        except BaseException as exc:
            self.error = exc
            log.exception("%s failed", self.name)


def end_offsets(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> dict[int, int]:
    """Every partition's high watermark, asked until each leader answers (``timeout``).

    Asked at read_uncommitted: librdkafka's watermark query takes the client's isolation
    level, and at its default (read_committed) the answer is the last stable offset,
    which stays below the markers of a transaction whose commit was acknowledged a
    moment ago (they are written after the answer): a final read to it would stop
    short of records already acknowledged and read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kbf-ends",
            "isolation.level": "read_uncommitted",
            **_QUIET,
        }
    )
    try:
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        for p in range(partitions):
            while True:
                try:
                    _, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=5, cached=False
                    )
                    ends[p] = int(high)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        return ends
    finally:
        consumer.close()


def group_behind(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> dict[int, int]:
    """How far the group's committed offsets are from ``ends``, per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **_QUIET})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=20)
        return {tp.partition: max(0, ends[tp.partition] - max(tp.offset, 0)) for tp in committed}
    finally:
        consumer.close()


def final_read(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    recorder: Recorder,
    timeout: float = 120,
    isolation: str | None = None,
) -> dict[int, int]:
    """Reads every partition from its start up to ``ends`` and records each record as
    ``final`` (with ``isolation`` when one is given: ``read_committed`` stops at the last
    stable offset, so it reaches ``ends`` once no transaction is open below them);
    returns what could not be read within ``timeout`` (partition -> records short),
    empty when all was read."""
    recorder.record(
        "ends",
        ends={str(p): o for p, o in ends.items()},
        **({"isolation": isolation} if isolation else {}),
    )
    tag = {"isolation": isolation} if isolation else {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kbf-final-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **({"isolation.level": isolation} if isolation else {}),
            **_QUIET,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        next_offset = {p: 0 for p in ends}
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p = msg.partition()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= ends[p]:
                    done.add(p)
                continue
            if msg.offset() < ends[p]:
                recorder.record(
                    "final",
                    partition=p,
                    offset=msg.offset(),
                    value=msg.value().decode(errors="replace"),
                    **tag,
                )
            next_offset[p] = msg.offset() + 1
            if next_offset[p] >= ends[p]:
                done.add(p)
        return {p: ends[p] - next_offset[p] for p in ends if p not in done}
    finally:
        consumer.close()
