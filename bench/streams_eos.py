"""Kafka Streams' word count with exactly_once_v2 on a 3-broker cluster, one broker killed
(kill -9) and restarted mid-run: are the final counts exact?

    python -m bench.streams_eos [--systems kafka,kbroker] [--lines 6000] [--rate 300]
                                [--instances 2] [--kill-instance-at 0.8]

For each system, on a fresh ZooKeeper and three fresh brokers (Kafka 3.9.1 in ZooKeeper mode
or ``kbroker serve``, the same settings): Kafka Streams 3.9.1 (bench/kafka/fetch-streams.sh;
bench/java/StreamsWordCount.java; two instances of one thread by default, no record cache,
so every count goes out) counts the words of lines an idempotent producer writes at a
steady rate. A third of the way through, the broker that coordinates the application's
transactions is killed; it is restarted a third later, while lines keep coming; at 80% the
first instance of the application is killed (kill -9) and started again on its state. Once
every line is written and the output's counts read with read_committed stop moving, the
application is stopped and the output read again from the start: each word's last count
must be its number in the input, and at read_committed no count may exceed it or fail to
rise above the word's count before (a result applied twice or lost); without a cache there
must be one committed record per word of the input (each word's counts are 1, 2, 3, ...).
Also reported: the output records committed while the victim was down, records of aborted
transactions (what read_uncommitted readers see more), the stream threads that died, the
time to exact counts and the victim's restart. Results print one line per system and
append as JSON lines to bench/results/streams_eos.jsonl.

`run_word_count` is the run itself, on any cluster the caller can kill and restart a broker
of; tests/cluster/test_streams_eos.py runs a short one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.java import java_command
from bench.systems import REPO

STREAMS_VERSION = "3.9.1"
SOURCE = REPO / "bench" / "java" / "StreamsWordCount.java"
RESULTS = REPO / "bench" / "results" / "streams_eos.jsonl"
PARTITIONS = 3
# The JVM of the application: Kafka Streams with RocksDB wants a little more than a client.
STREAMS_JVM_OPTS = [
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]


def streams_lib(version: str = STREAMS_VERSION) -> Path:
    """Where bench/kafka/fetch-streams.sh puts Kafka Streams' jars."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "kbroker-bench" / f"kafka-streams-{version}" / "lib"


def streams_available(version: str = STREAMS_VERSION) -> bool:
    return any(streams_lib(version).glob(f"kafka-streams-{version}.jar"))


@dataclass(frozen=True)
class Plan:
    """The input and when the fault comes: ``lines`` lines of ``words`` words (of a
    vocabulary of ``vocabulary``) at ``rate`` lines/s, counted by ``instances`` instances
    of the application (a group of as many members, the input's partitions shared among
    them); the victim is killed after ``kill_at`` of the lines and restarted after
    ``restart_at``; after ``instance_kill_at`` of them (when not negative) the first
    instance is killed (kill -9) and started again at once on its state folder."""

    lines: int = 6000
    rate: float = 300.0
    words: int = 5
    vocabulary: int = 60
    kill_at: float = 1 / 3
    restart_at: float = 2 / 3
    settle_timeout: float = 120.0
    seed: int = 1
    instances: int = 1
    instance_kill_at: float = -1.0
    # The application's statestore.cache.max.bytes: 0 sends every count on at once, so a
    # word's committed counts must be exactly 1, 2, ... its number in the input.
    cache_bytes: int = 0


def corpus(plan: Plan) -> list[str]:
    rng = random.Random(plan.seed)
    return [
        " ".join(f"w{rng.randrange(plan.vocabulary)}" for _ in range(plan.words))
        for _ in range(plan.lines)
    ]


@dataclass
class Outcome:
    system: str
    application_id: str  # its transactional ids start with it
    source: str
    sink: str
    exact: bool
    lines: int
    words: int
    wrong: dict[str, tuple[int, int | None]]  # word -> (expected, last count read)
    over_counts: int  # words whose committed count went above their number in the input
    regressions: int  # committed counts not above the word's previous one
    committed_records: int
    aborted_records: int  # records read_uncommitted sees more
    thread_errors: list[str]
    victim: int
    committed_while_down: int  # output records committed while the victim was down
    exact_after_s: float | None  # from the first line written
    restart_s: float  # how long the victim took to start again
    total_s: float
    states: list[str] = field(default_factory=list)

    def summary(self) -> str:
        verdict = "exact" if self.exact else f"WRONG ({len(self.wrong)} words)"
        return (
            f"{self.system}: {verdict}; {self.lines} lines, {self.words} words; "
            f"over-counts {self.over_counts}, regressions {self.regressions}; "
            f"committed records {self.committed_records} ({self.committed_while_down} while "
            f"broker {self.victim} was down), aborted {self.aborted_records}; "
            f"thread errors {len(self.thread_errors)}; exact after {self.exact_after_s}s; "
            f"restart {self.restart_s}s; total {self.total_s:.1f}s"
        )


class StreamsApp:
    """The word-count application's JVM, its stdout read by a thread."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        source: str,
        sink: str,
        work: Path,
        cache_bytes: int,
        *,
        replicas: int = 3,
        guarantee: str = "exactly_once_v2",
    ) -> None:
        """``replicas``: of the application's internal topics; ``guarantee``: its
        processing.guarantee (exactly_once_v2 or at_least_once)."""
        work.mkdir(parents=True, exist_ok=True)
        cmd = java_command(
            SOURCE,
            [streams_lib()],
            bootstrap,
            app_id,
            source,
            sink,
            str(work / "state"),
            str(replicas),
            str(cache_bytes),
            guarantee,
            jvm_opts=STREAMS_JVM_OPTS,
        )
        self.log = work / "streams.log"
        self.states: list[str] = []
        self.errors: list[str] = []
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            name, _, value = line.strip().partition("=")
            if name == "state":
                self.states.append(value)
            elif name == "thread.error":
                self.errors.append(value)

    def wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while "RUNNING" not in self.states:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the application exited:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the application is not RUNNING: {self.states}\n{self.tail()}")
            time.sleep(0.1)

    def kill(self) -> None:
        """kill -9 (its open transaction is left to the coordinator and its successor)."""
        self.proc.kill()
        self.proc.wait(30)
        self._reader.join(5)

    def stop(self, timeout: float = 40) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _create_topics(client: Mapping[str, Any], names: list[str]) -> None:
    """Topics of PARTITIONS partitions, 3 replicas and min.insync.replicas 2, every ISR
    whole."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(client))
    futures = admin.create_topics(
        [NewTopic(n, PARTITIONS, 3, config={"min.insync.replicas": "2"}) for n in names],
        operation_timeout=30,
        request_timeout=30,
    )
    for f in futures.values():
        f.result(60)

    def whole() -> bool:
        md = admin.list_topics(timeout=5)
        return all(
            (t := md.topics.get(n)) is not None
            and len(t.partitions) == PARTITIONS
            and all(p.leader > 0 and len(p.isrs) == 3 for p in t.partitions.values())
            for n in names
        )

    _wait(whole, "every ISR whole", 60)


def _wait(check: Callable[[], Any], what: str, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def transaction_coordinator(addresses: Mapping[int, str], prefix: str) -> int | None:
    """The broker that coordinates a transactional id starting with ``prefix`` (each broker
    lists the ids it coordinates), or None while there is none."""
    from kbroker.protocol import ApiKey
    from kbroker.protocol.messages.txn import ListTransactionsRequest
    from kbroker.tools.client import BrokerClient, ClientError

    request = ListTransactionsRequest(state_filters=[], producer_id_filters=[])
    for broker_id, address in addresses.items():
        try:
            with BrokerClient(address, timeout=5) as client:
                found = client.request(ApiKey.LIST_TRANSACTIONS, 0, request)
        except ClientError:
            continue
        if any(t.transactional_id.startswith(prefix) for t in found.transaction_states):
            return broker_id
    return None


@dataclass
class Counts:
    """What a reader of the output saw: each word's last count, its highest, the records
    read, and how many times a word's count was not above the one before (a count
    repeated or going back: a result applied twice or lost)."""

    last: dict[str, int] = field(default_factory=dict)
    highest: dict[str, int] = field(default_factory=dict)
    records: int = 0
    regressions: int = 0

    def add(self, word: str, count: int) -> None:
        if word in self.last and count <= self.last[word]:
            self.regressions += 1
        self.last[word] = count
        self.highest[word] = max(count, self.highest.get(word, count))
        self.records += 1


def read_counts(
    client: Mapping[str, Any], sink: str, committed: bool, timeout: float = 60
) -> Counts:
    """The output from its start to each partition's end (for read_committed: the last
    stable offset)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **client,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(sink, p, 0) for p in range(PARTITIONS)])
    counts = Counts()
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise TimeoutError(f"did not reach the end of {sink}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {sink}: {error}")
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            counts.add(msg.key().decode(), int.from_bytes(msg.value(), "big", signed=True))
    finally:
        consumer.close()
    return counts


class Watcher:
    """A read_committed reader of the output for the whole run, in a thread: when each
    committed record came, to tell how many came while the victim was down."""

    def __init__(self, client: Mapping[str, Any], sink: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer(
            {
                **client,
                "group.id": "unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self.consumer.assign([TopicPartition(sink, p, 0) for p in range(PARTITIONS)])
        self.arrivals: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.arrivals.append(time.monotonic())

    def between(self, start: float, end: float) -> int:
        return sum(1 for t in self.arrivals if start <= t < end)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def run_word_count(
    system: str,
    client: Mapping[str, Any],
    addresses: Mapping[int, str],
    kill: Callable[[int], None],
    restart: Callable[[int], None],
    work: Path,
    plan: Plan,
    say: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """One run on a running 3-broker cluster (``client``: librdkafka settings to reach it;
    ``addresses``: each broker's host:port; ``kill``/``restart`` a broker by id; the restart
    returns once the broker is back)."""
    from confluent_kafka import Producer

    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    source, sink, app_id = f"wc-in-{tag}", f"wc-out-{tag}", f"wc-{tag}"
    _create_topics(client, [source, sink])
    lines = corpus(plan)
    expected = Counter(w for line in lines for w in line.split())
    work.mkdir(parents=True, exist_ok=True)
    apps: list[StreamsApp] = []  # the running instances
    every_app: list[StreamsApp] = []  # and those killed
    watcher = Watcher(client, sink)
    fault_errors: list[BaseException] = []
    victim = -1
    # When the victim was killed, started again, and was back (monotonic clock).
    fault_times: dict[str, float] = {}
    exact_after_s: float | None = None

    def down_and_up(broker_id: int, down_s: float) -> None:
        try:
            kill(broker_id)
            fault_times["killed"] = time.monotonic()
            time.sleep(down_s)
            fault_times["restarting"] = time.monotonic()
            restart(broker_id)
            fault_times["back"] = time.monotonic()
        except BaseException as exc:  # reported by the run, not lost in the thread
            fault_errors.append(exc)

    try:

        def start(i: int) -> StreamsApp:
            app = StreamsApp(
                ",".join(addresses.values()),
                app_id,
                source,
                sink,
                work / f"app{i}",
                plan.cache_bytes,
            )
            every_app.append(app)
            return app

        apps.extend(start(i) for i in range(plan.instances))
        for app in apps:
            app.wait_running(90)
        say(f"{system}: the application is running after {time.monotonic() - started:.1f}s")
        producer = Producer({**client, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
        begin = time.monotonic()
        fault: threading.Thread | None = None
        for i, line in enumerate(lines):
            if (pause := begin + i / plan.rate - time.monotonic()) > 0:
                time.sleep(pause)
            producer.produce(source, value=line.encode(), partition=i % PARTITIONS)
            producer.poll(0)
            if plan.instance_kill_at >= 0 and i == int(plan.instance_kill_at * plan.lines):
                say(f"{system}: kill -9 of the application's first instance, started again")
                apps[0].kill()
                apps[0] = start(0)
            if fault is None and i >= plan.kill_at * plan.lines:
                victim = _wait(
                    lambda: transaction_coordinator(addresses, app_id),
                    "the application's transaction coordinator",
                    30,
                )
                say(f"{system}: kill -9 of broker {victim} (its transaction coordinator)")
                down_s = (plan.restart_at - plan.kill_at) * plan.lines / plan.rate
                fault = threading.Thread(target=down_and_up, args=(victim, down_s), daemon=True)
                fault.start()
        if producer.flush(120) != 0:
            raise RuntimeError("the input producer could not deliver every line")
        say(f"{system}: every line written after {time.monotonic() - begin:.1f}s")
        if fault is not None:
            fault.join(180)
        if fault_errors or "back" not in fault_times:
            raise RuntimeError(f"the fault did not complete: {fault_errors}")
        down_s = fault_times["back"] - fault_times["killed"]
        say(f"{system}: broker {victim} back after {down_s:.1f}s down")
        deadline = time.monotonic() + plan.settle_timeout
        while time.monotonic() < deadline:
            if read_counts(client, sink, committed=True).last == dict(expected):
                exact_after_s = round(time.monotonic() - begin, 1)
                break
            time.sleep(1)
    finally:
        for app in apps:
            app.stop()
        watcher.stop()
    committed = read_counts(client, sink, committed=True)
    everything = read_counts(client, sink, committed=False)
    wrong = {w: (n, committed.last.get(w)) for w, n in expected.items()}
    wrong = {w: seen for w, seen in wrong.items() if seen[0] != seen[1]}
    wrong |= {w: (0, n) for w, n in committed.last.items() if w not in expected}
    over = sum(1 for w, n in committed.highest.items() if n > expected.get(w, 0))
    return Outcome(
        system=system,
        application_id=app_id,
        source=source,
        sink=sink,
        exact=not wrong
        and over == 0
        and committed.regressions == 0
        # Without a cache every count is sent: one committed record per word of the input.
        and (plan.cache_bytes > 0 or committed.records == sum(expected.values())),
        lines=len(lines),
        words=sum(expected.values()),
        wrong=dict(sorted(wrong.items())[:20]),
        over_counts=over,
        regressions=committed.regressions,
        committed_records=committed.records,
        aborted_records=everything.records - committed.records,
        thread_errors=[e for app in every_app for e in app.errors],
        victim=victim,
        committed_while_down=watcher.between(fault_times["killed"], fault_times["back"]),
        exact_after_s=exact_after_s,
        restart_s=round(fault_times["back"] - fault_times["restarting"], 1),
        total_s=round(time.monotonic() - started, 1),
        states=[s for app in every_app for s in app.states],
    )


# -- the command line: a fresh cluster of each system -----------------------------------

SETTINGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.replication.factor": "3",
    "replica.lag.time.max.ms": "5000",
    "unclean.leader.election.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}


def run_system(system: str, root: Path, plan: Plan, say: Callable[[str], None]) -> Outcome:
    from bench.cluster import start_broker, three_brokers

    with three_brokers(system, root, settings=SETTINGS) as c:
        ports = {i: int(a.rsplit(":", 1)[1]) for i, a in c.addresses.items()}

        def kill(broker_id: int) -> None:
            proc = c.procs[broker_id]
            proc.kill()
            proc.wait(30)

        def restart(broker_id: int) -> None:
            proc, _ = start_broker(
                system, broker_id, c.zk, c.root, 6000, SETTINGS, port=ports[broker_id]
            )
            c.procs[broker_id] = proc
            from bench.systems import wait_for_port

            wait_for_port(ports[broker_id], proc, f"{system} broker {broker_id}", 120)

        return run_word_count(
            system,
            {"bootstrap.servers": c.bootstrap},
            c.addresses,
            kill,
            restart,
            root / f"{system}-streams",
            plan,
            say,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streams_eos", description=__doc__)
    parser.add_argument("--systems", default="kafka,kbroker")
    parser.add_argument("--lines", type=int, default=Plan.lines)
    parser.add_argument("--rate", type=float, default=Plan.rate)
    parser.add_argument("--seed", type=int, default=Plan.seed)
    parser.add_argument("--instances", type=int, default=2, help="of the application [2]")
    parser.add_argument(
        "--kill-instance-at",
        type=float,
        default=0.8,
        help="kill -9 the first instance after this fraction of the lines (<0: never) [0.8]",
    )
    args = parser.parse_args(argv)
    if not streams_available():
        subprocess.run([str(REPO / "bench" / "kafka" / "fetch-streams.sh")], check=True)
    plan = Plan(
        lines=args.lines,
        rate=args.rate,
        seed=args.seed,
        instances=args.instances,
        instance_kill_at=args.kill_instance_at,
    )

    def say(text: str) -> None:
        print(f"[streams_eos] {text}", file=sys.stderr, flush=True)

    outcomes = []
    for system in args.systems.split(","):
        with tempfile.TemporaryDirectory(prefix=f"streams-eos-{system}-") as tmp:
            outcome = run_system(system, Path(tmp), plan, say)
        say(outcome.summary())
        outcomes.append(outcome)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with open(RESULTS, "a") as f:
            f.write(json.dumps({"time": time.time(), **asdict(outcome), "plan": asdict(plan)}))
            f.write("\n")
    for outcome in outcomes:
        print(outcome.summary())
    return 0 if all(o.exact for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
