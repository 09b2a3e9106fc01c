"""The transactional producers of a fault run (``--workload txn``), each on a thread of its
own, recording every transaction's values and how it ended.

A ``TxnProducerWorker`` is a librdkafka transactional producer (``transactional.id``
``kbf-txn-N``) that runs transactions back to back: each writes a few unique values
(``N.T.K``: producer N, its transaction T, value K) to several partitions, then asks to
commit it (most) or abort it (a share drawn from the producer's own seeded random
generator). Its values are written (flushed) before the end is asked, and a share of
transactions is held open a while longer. Each transaction is written down once, as a
``txn`` event, when its end is known (``bench/faults/history.py``):

- ``intent``: ``commit`` or ``abort``, what the workload chose;
- ``outcome``: ``committed`` (commit_transaction returned), ``aborted`` (the transaction
  can not have been committed: the producer never asked to commit it, or it asked, the
  commit failed with an abortable error, and abort_transaction returned) or ``unknown``
  (a commit was asked and its end is not known: it timed out past every retry, the
  producer was fenced or failed fatally);
- ``acked``: whether the last end call (commit or abort) returned successfully;
- ``values`` (value -> partition) of every value handed to the client, ``offsets``
  (value -> offset) of those the client reported delivered, ``t0`` (begin),
  ``t_end`` (when commit or abort was asked; null if never), ``error``.

After a fatal error, a fencing or an unknown commit the producer is dropped and a new
instance with the same transactional id takes over: its InitProducerId has the
coordinator finish or abort whatever the old one left open.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from bench.faults.history import Recorder
from bench.faults.workload import PRODUCER_LOG
from kbroker.txn.log import partition_of

log = logging.getLogger("bench.faults")

# A transaction the coordinator does not hear the end of within this is aborted by it;
# short enough that an abandoned one ends within a fault run.
TRANSACTION_TIMEOUT_MS = 20000
END_TIMEOUT_S = 30.0  # each commit_transaction / abort_transaction call
COMMIT_ATTEMPTS = 3  # commit_transaction calls after a retriable error, before "unknown"
ABORT_SHARE = 0.25
HOLD_SHARE, HOLD_MAX_S = 0.2, 0.5  # transactions held open after their writes, how long


def transactional_id(index: int) -> str:
    return f"kbf-txn-{index}"


def coordinator_partitions(producers: int, state_partitions: int) -> list[int]:
    """The ``__transaction_state`` partitions whose leaders coordinate the workload's
    transactional ids."""
    return sorted({partition_of(transactional_id(i), state_partitions) for i in range(producers)})


class TxnProducerWorker(threading.Thread):
    def __init__(
        self,
        index: int,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate: float,
        recorder: Recorder,
        seed: int,
    ) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index = index
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate  # transactions per second
        self.rec = recorder
        self.rng = random.Random(f"{seed}-txn-{index}")
        self.stopping = threading.Event()
        self.transactions = 0
        self.instances = 0
        self.error: BaseException | None = None
        self._offsets: dict[str, int] = {}

    # -- the client -------------------------------------------------------------------

    def _conf(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "transactional.id": transactional_id(self.index),
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 5,
            "request.timeout.ms": 10000,
            "reconnect.backoff.max.ms": 1000,
            "debug": "eos",
            "logger": PRODUCER_LOG,
        }

    def _producer(self) -> Producer | None:
        """A new instance, initialised (retried while the coordinator is unreachable);
        None if the run stops first."""
        self.instances += 1
        producer = Producer(self._conf())
        while True:
            try:
                producer.init_transactions(END_TIMEOUT_S)
                return producer
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                log.info("%s: init_transactions: %s", self.name, error)
                if error.fatal():  # fenced by nobody else: start over with a new instance
                    self.instances += 1
                    producer = Producer(self._conf())
                if self.stopping.is_set():
                    return None
                time.sleep(1)

    def _on_delivery(self, value: str) -> Callable[[KafkaError | None, Any], None]:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self._offsets[value] = msg.offset()

        return delivered

    # -- one transaction ----------------------------------------------------------------

    def _values(self, number: int) -> dict[str, int]:
        """2 to 4 partitions (at most all), 1 or 2 values on each."""
        width = min(self.partitions, self.rng.randint(2, 4))
        chosen = self.rng.sample(range(self.partitions), width)
        values: dict[str, int] = {}
        for p in chosen:
            for _ in range(self.rng.randint(1, 2)):
                values[f"{self.index}.{number}.{len(values)}"] = p
        return values

    def _one(self, producer: Producer) -> bool:
        """Runs one transaction and records it; False if the producer is no longer usable
        (a new instance must take over)."""
        number = self.transactions
        self.transactions += 1
        intent = "abort" if self.rng.random() < ABORT_SHARE else "commit"
        planned = self._values(number)
        self._offsets = {}
        handed: dict[str, int] = {}
        event: dict[str, Any] = {
            "process": self.name,
            "txn": f"{self.index}.{number}",
            "intent": intent,
            "t0": self.rec.now(),
            "t_end": None,
            "acked": False,
            "error": None,
        }
        usable = True
        try:
            producer.begin_transaction()
            for value, p in planned.items():
                producer.produce(
                    self.topic,
                    value=value.encode(),
                    partition=p,
                    on_delivery=self._on_delivery(value),
                )
                handed[value] = p
            # Written before the end is asked (abort_transaction would drop what is still
            # queued, and an aborted transaction nobody wrote proves nothing); now and then
            # held open a while, so faults find transactions open.
            producer.flush(END_TIMEOUT_S)
            if self.rng.random() < HOLD_SHARE:
                time.sleep(self.rng.uniform(0, HOLD_MAX_S))
            event["t_end"] = self.rec.now()
            if intent == "commit":
                outcome, usable = self._commit(producer, event)
            else:
                outcome, usable = self._abort(producer, event)
        except (KafkaException, BufferError) as exc:
            # Before any end was asked: never committed, whatever happens to it now.
            error = exc.args[0] if isinstance(exc, KafkaException) else None
            event["error"] = str(exc)
            outcome = "aborted" if event["t_end"] is None else "unknown"
            usable = self._recover(producer, error, event)
        self.rec.record(
            "txn",
            **event,
            outcome=outcome,
            values=handed,
            offsets={v: o for v, o in self._offsets.items() if v in handed},
        )
        return usable

    def _commit(self, producer: Producer, event: dict[str, Any]) -> tuple[str, bool]:
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                producer.commit_transaction(END_TIMEOUT_S)
                event["acked"] = True
                return "committed", True
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                event["error"] = str(error)
                if error.retriable() and attempt + 1 < COMMIT_ATTEMPTS:
                    continue
                if error.txn_requires_abort():
                    # The coordinator refused or never got the commit: an acknowledged abort
                    # settles it as aborted.
                    try:
                        producer.abort_transaction(END_TIMEOUT_S)
                        event["acked"] = True
                        return "aborted", True
                    except KafkaException as again:
                        event["error"] = f"{error}; abort: {again.args[0]}"
                        return "unknown", False
                return "unknown", False
        return "unknown", False

    def _abort(self, producer: Producer, event: dict[str, Any]) -> tuple[str, bool]:
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                producer.abort_transaction(END_TIMEOUT_S)
                event["acked"] = True
                return "aborted", True
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                event["error"] = str(error)
                if error.retriable() and attempt + 1 < COMMIT_ATTEMPTS:
                    continue
                break
        # Never asked to commit: aborted whether or not the coordinator answered.
        return "aborted", False

    def _recover(self, producer: Producer, error: KafkaError | None, event: dict[str, Any]) -> bool:
        """After an error before the end was asked: abort if the client allows it."""
        if error is not None and error.txn_requires_abort() and not error.fatal():
            try:
                producer.abort_transaction(END_TIMEOUT_S)
                event["acked"] = True
                return True
            except KafkaException:
                return False
        return False

    def run(self) -> None:
        try:
            producer = self._producer()
            interval = 1.0 / self.rate
            due = time.monotonic()
            while producer is not None and not self.stopping.is_set():
                now = time.monotonic()
                if now < due:
                    time.sleep(min(0.05, due - now))
                    continue
                due = max(due + interval, now - 1.0)  # no burst after a stall
                if not self._one(producer):
                    log.warning("%s: a new instance takes over", self.name)
                    producer.purge(in_queue=True, in_flight=True, blocking=False)
                    producer = self._producer()
        except BaseException as exc:  # reported by the run, not lost in a thread
            self.error = exc
            log.exception("%s failed", self.name)
