"""One fault run, start to end: network, disks, cluster, workload, faults, healing, the
final read, the check, the results folder. Everything it starts is stopped and removed
on the way out, also when it fails or is interrupted."""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.faults import clock as clock_mod
from bench.faults import disk as disk_mod
from bench.faults import net as net_mod
from bench.faults.checker import Report, check
from bench.faults.cluster import FaultCluster, wait
from bench.faults.disk import SmallDisk
from bench.faults.history import Recorder, read_history
from bench.faults.nemesis import KINDS, Nemesis
from bench.faults.net import Network, SubnetInUse
from bench.faults.postmortem import KeptData, explain_duplicates
from bench.faults.report import write_results
from bench.faults.txn_checker import COMMITTED, UNCOMMITTED, TxnReport, check_txn
from bench.faults.txn_workload import TxnProducerWorker, coordinator_partitions
from bench.faults.workload import (
    PRODUCER_LOG,
    ConsumerWorker,
    ProducerWorker,
    end_offsets,
    final_read,
    group_behind,
)

log = logging.getLogger("bench.faults")

GROUP = "kbf-group"
TOPIC = "kbf"


@dataclass
class RunConfig:
    system: str = "kbroker"
    seconds: float = 1800
    seed: int = 0
    brokers: int = 3
    partitions: int = 6
    producers: int = 3
    rate: float = 100.0  # sends per second, per producer
    group_members: int = 2
    readers: int = 1
    acks: str = "all"
    unclean: bool = False
    # "idempotent" (bench/faults/workload.py) or "txn" (bench/faults/txn_workload.py:
    # ``rate`` is then transactions per second, per producer).
    workload: str = "idempotent"
    faults: list[str] = field(default_factory=lambda: list(KINDS))
    # Every kind once, in a seeded order, rather than at random until ``seconds`` pass.
    each_once: bool = False
    hold_s: tuple[float, float] = (5.0, 20.0)  # how long a fault lasts
    gap_s: tuple[float, float] = (5.0, 15.0)  # healthy time between faults
    disk_mb: int = 256
    out: Path = Path("bench/out/faults")
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def strict(self) -> bool:
        """The default settings: any anomaly fails the run. Otherwise it is reported."""
        return self.acks == "all" and not self.unclean

    @property
    def txn(self) -> bool:
        return self.workload == "txn"

    def label(self) -> str:
        extra = "" if self.strict else f" acks={self.acks}" + (" unclean" if self.unclean else "")
        return f"{self.system} seed={self.seed}{' txn' if self.txn else ''}{extra}"


@dataclass
class Outcome:
    report: Report | TxnReport
    folder: Path
    problems: list[str]  # harness-level trouble: the cluster did not heal, a client died

    @property
    def passed(self) -> bool:
        return not self.problems and self.report.ok()


def _sigterm_to_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


def results_folder(cfg: RunConfig, run_id: str) -> Path:
    """A new folder for one run's results; runs side by side (the same seed, started in the
    same second) each get their own."""
    variant = "" if cfg.acks == "all" else f"-acks{cfg.acks}"
    variant += "-unclean" if cfg.unclean else ""
    variant += "-txn" if cfg.txn else ""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = cfg.out / f"{cfg.system}-seed{cfg.seed}{variant}-{stamp}-{run_id}"
    cfg.out.mkdir(parents=True, exist_ok=True)
    folder.mkdir()
    return folder


def new_run_id() -> str:
    """Names a run's folder (its last part), namespaces and links (``kbf<id>-...``)."""
    return uuid.uuid4().hex[:4]


def run(cfg: RunConfig, run_id: str | None = None) -> Outcome:
    rng = random.Random(cfg.seed)
    run_id = run_id or new_run_id()
    folder = results_folder(cfg, run_id)
    (folder / "config.json").write_text(
        __import__("json").dumps(asdict(cfg), default=str, indent=2) + "\n"
    )
    print(f"fault run {cfg.label()}: results in {folder}", flush=True)
    previous = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    problems: list[str] = []
    try:
        with ExitStack() as stack:
            brokers = [f"b{i}" for i in range(1, cfg.brokers + 1)]
            zks = ["zk1", "zk2", "zk3"]
            net = stack.enter_context(free_network(f"kbf{run_id}", [*zks, *brokers]))
            disks = {
                b: stack.enter_context(
                    SmallDisk(folder / "disks" / f"{b}.img", folder / "disks" / b, cfg.disk_mb)
                )
                for b in brokers
            }
            # Once the brokers stopped, before the disks go: their copies of the topic.
            stack.callback(keep_topic_data, disks, folder / "nodes")
            c = FaultCluster(cfg.system, folder / "nodes", net, disks)
            if "clock" in cfg.faults:
                c.clock_shim = clock_mod.library()
            (folder / "nodes").mkdir(exist_ok=True)
            for z in zks:
                c.add_zookeeper(z)
            settings = dict(cfg.settings)
            if cfg.unclean:
                settings["unclean.leader.election.enable"] = "true"
            for b in brokers:
                c.add_broker(b, settings)
            stack.callback(c.stop)
            c.start_zookeepers()
            c.start_brokers()
            create_topic(c.bootstrap, cfg.partitions, cfg.brokers)
            wait(lambda: healthy(c, cfg), "the topic's replicas in sync", 60, 0.5)
            rec = stack.enter_context(Recorder(folder / "history.jsonl"))
            stack.enter_context(producer_log(folder / "producers.log"))
            if cfg.txn:
                problems += txn_workload_under_faults(cfg, c, rec, rng)
            else:
                problems += workload_under_faults(cfg, c, rec, rng)
        report: Report | TxnReport
        if cfg.txn:
            report = check_txn(read_history(folder / "history.jsonl"))
        else:
            report = check(read_history(folder / "history.jsonl"))
        if isinstance(report, Report) and report.duplicates:
            explained = explain_duplicates(report.duplicates, KeptData(folder / "nodes", TOPIC))
            report.duplicates_explained = explained
            report.client_resent = explained["counts"]["new_epoch"]
        write_results(folder, report, folder / "history.jsonl", cfg.label())
        line = report.summary_line(cfg.label())
        if problems:
            line += " | problems: " + "; ".join(problems)
        (folder / "summary.txt").write_text(line + "\n")
        print(line, flush=True)
        return Outcome(report, folder, problems)
    finally:
        signal.signal(signal.SIGTERM, previous)
        # What an interrupted teardown may have left.
        net_mod.sweep(f"kbf{run_id}")
        disk_mod.sweep_mounts(folder / "disks")


def in_child(work: Callable[[], int], cfg: RunConfig, run_id: str) -> int:
    """Runs ``work`` (one fault run, ``run_id``) in a forked child and returns its exit
    status. The clients run inside that process, and a client library can abort it
    (librdkafka asserts on some malformed input): then no ``finally`` of the run ran, so
    its namespaces, their processes and its mounts are removed here, and its folder's
    summary says how it ended (exit status 1: a finding, not a harness failure).
    SIGTERM sent to this process goes to the child, which cleans up itself; SIGINT (^C)
    reaches the child from the terminal and is ignored here."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = work()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def forward(signum: int, _frame: Any) -> None:
        os.kill(pid, signum)

    previous = signal.signal(signal.SIGTERM, forward), signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status)
    name = signal.Signals(os.WTERMSIG(status)).name
    folder = next(cfg.out.glob(f"*-{run_id}"), None)
    removed = net_mod.sweep(f"kbf{run_id}")
    if folder is not None:
        removed += disk_mod.sweep_mounts(folder / "disks")
        line = f"{cfg.label()}: the run's process died of {name}; see its stderr"
        (folder / "summary.txt").write_text(line + "\n")
    print(
        f"bench.faults: the run's process died of {name} (a client library's abort?); "
        f"removed what it left: {len(removed)} namespaces, links, processes and mounts",
        file=sys.stderr,
    )
    return 1


def keep_topic_data(disks: dict[str, SmallDisk], into: Path) -> None:
    """Copies each broker's partitions of the topic (``bN-data/kbf-P``) for a post-mortem
    (``kbroker dump-log``): the disks are removed at the end of the run."""
    for name, disk in disks.items():
        for part in sorted((disk.mountpoint / "data").glob(f"{TOPIC}-*")):
            try:
                shutil.copytree(part, into / f"{name}-data" / part.name)
            except OSError as exc:
                log.warning("could not keep %s: %s", part, exc)


@contextmanager
def producer_log(path: Path) -> Iterator[None]:
    """The producers' librdkafka idempotence lines (PRODUCER_LOG) go to ``path``."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    PRODUCER_LOG.addHandler(handler)
    PRODUCER_LOG.setLevel(logging.DEBUG)
    PRODUCER_LOG.propagate = False
    try:
        yield
    finally:
        PRODUCER_LOG.removeHandler(handler)
        handler.close()


def free_network(name: str, nodes: list[str]) -> Network:
    """A network on the first subnet no other run uses (runs may go on side by side)."""
    for subnet in range(100):  # tests/faults take 100 and up
        net = Network(name, nodes, subnet)
        try:
            net.__enter__()
        except SubnetInUse:
            continue
        return net
    raise RuntimeError("every subnet of 10.213.0-99 is in use: bench.faults.net.sweep() old runs")


def create_topic(bootstrap: str, partitions: int, replicas: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    rf = min(3, replicas)
    new = NewTopic(TOPIC, partitions, rf, config={"min.insync.replicas": "2"})
    admin.create_topics([new], operation_timeout=60, request_timeout=60)[TOPIC].result(90)


def heal(c: FaultCluster) -> None:
    """Every link up, every disk freed, every clock true, every stopped or paused process
    running."""
    c.net.heal()
    for d in c.disks.values():
        d.free()
    for clock in c.clocks.values():
        clock.set(0)
    c.restart_dead()


def healthy(c: FaultCluster, cfg: RunConfig) -> bool:
    """Every broker registered, every partition led with its whole replica set in sync."""
    if c.registered() != sorted(c.broker_id(b) for b in c.brokers):
        return False
    for p in range(cfg.partitions):
        state = c.partition_state(TOPIC, p)
        if state is None or state["leader"] < 0 or len(state["isr"]) < min(3, cfg.brokers):
            return False
    return True


def drive_faults(cfg: RunConfig, c: FaultCluster, nemesis: Nemesis, rng: random.Random) -> None:
    """The faults one after the other, for ``cfg.seconds`` (or each kind once), then the
    cluster healed."""
    try:
        started = time.monotonic()
        kinds = list(cfg.faults)
        if cfg.each_once:
            rng.shuffle(kinds)
        while True:
            if cfg.each_once:
                if not kinds:
                    break
                kind = kinds.pop(0)
            else:
                if time.monotonic() - started > cfg.seconds:
                    break
                kind = rng.choice(kinds)
            fault = nemesis.start(kind)
            time.sleep(rng.uniform(*cfg.hold_s))
            nemesis.end(fault)
            restarted = c.restart_dead()
            if restarted:
                log.info("started again after %s: %s", kind, restarted)
            time.sleep(rng.uniform(*cfg.gap_s))
    except KeyboardInterrupt:
        raise  # the run's teardown removes everything; nothing to heal
    except BaseException:
        heal(c)
        raise
    heal(c)


def workload_under_faults(
    cfg: RunConfig, c: FaultCluster, rec: Recorder, rng: random.Random
) -> list[str]:
    consumers = [
        ConsumerWorker(i, c.bootstrap, TOPIC, rec, GROUP, cfg.partitions)
        for i in range(cfg.group_members)
    ] + [
        ConsumerWorker(i, c.bootstrap, TOPIC, rec, None, cfg.partitions) for i in range(cfg.readers)
    ]
    # An idempotent producer needs acks=all (librdkafka refuses one with acks=1).
    producers = [
        ProducerWorker(i, c.bootstrap, TOPIC, cfg.rate, rec, cfg.acks, cfg.acks == "all")
        for i in range(cfg.producers)
    ]
    for w in [*consumers, *producers]:
        w.start()
    time.sleep(5)  # the clients settle in
    drive_faults(cfg, c, Nemesis(c, rng, rec, TOPIC, cfg.partitions), rng)
    return wind_down(cfg, c, rec, producers, consumers, join_s=60, catch_up_s=60)


def wind_down(
    cfg: RunConfig,
    c: FaultCluster,
    rec: Recorder,
    producers: list[ProducerWorker] | list[TxnProducerWorker],
    consumers: list[ConsumerWorker],
    join_s: float,
    catch_up_s: float,
    isolations: tuple[str | None, ...] = (None,),
) -> list[str]:
    """After the faults: the cluster healthy again, a few seconds of writes on it, the
    producers stopped (``join_s`` each), the consumers caught up with the end offsets
    (``catch_up_s``) and their lag recorded, then a final read at each of
    ``isolations`` (None: the client's default). The problems met on the way."""
    problems: list[str] = []
    try:
        wait(lambda: healthy(c, cfg), "the cluster to heal", 120, 1)
    except TimeoutError as exc:
        problems.append(str(exc))
    time.sleep(5)  # writes on the healed cluster
    for producer in producers:
        producer.stopping.set()
    for producer in producers:
        producer.join(join_s)
        if producer.is_alive() or producer.error is not None:
            problems.append(f"{producer.name} did not end cleanly: {producer.error}")
    ends = end_offsets(c.bootstrap, TOPIC, cfg.partitions)
    deadline = time.monotonic() + catch_up_s
    for w in consumers:
        w.catch_up = (ends, deadline)
    wait(
        lambda: all(w.behind is not None for w in consumers),
        "consumers to catch up",
        catch_up_s + 30,
        0.5,
    )
    behind = group_behind(c.bootstrap, GROUP, TOPIC, ends)
    rec.record("lag", process="group", behind={str(p): n for p, n in behind.items()})
    for w in consumers:
        w.stopping.set()
    for w in consumers:
        w.join(30)
        if w.error is not None:
            problems.append(f"{w.name} failed: {w.error}")
    for isolation in isolations:
        missing = final_read(c.bootstrap, TOPIC, ends, rec, isolation=isolation)
        if missing:
            what = f"final {isolation} read" if isolation else "final read"
            problems.append(f"the {what} could not read {missing} (partition: records)")
    rec.flush()
    return problems


def txn_workload_under_faults(
    cfg: RunConfig, c: FaultCluster, rec: Recorder, rng: random.Random
) -> list[str]:
    """The transactional workload: transactional producers, read_committed consumers (the
    group's members and an assigned reader), the nemesis aiming at the workload's
    transaction coordinators half of the time, then a final read at read_uncommitted and
    one at read_committed."""
    consumers = [
        ConsumerWorker(i, c.bootstrap, TOPIC, rec, GROUP, cfg.partitions, COMMITTED)
        for i in range(cfg.group_members)
    ] + [
        ConsumerWorker(i, c.bootstrap, TOPIC, rec, None, cfg.partitions, COMMITTED)
        for i in range(cfg.readers)
    ]
    producers = [
        TxnProducerWorker(i, c.bootstrap, TOPIC, cfg.partitions, cfg.rate, rec, cfg.seed)
        for i in range(cfg.producers)
    ]
    for w in [*consumers, *producers]:
        w.start()
    # Faults begin once every producer has its transactional id's coordinator (the
    # __transaction_state topic exists: the nemesis can find the coordinators).
    wait(lambda: all(w.transactions > 0 for w in producers), "the first transactions", 120, 0.5)
    time.sleep(2)
    state_partitions = int(cfg.settings.get("transaction.state.log.num.partitions", "50"))
    coordinators = coordinator_partitions(cfg.producers, state_partitions)
    drive_faults(cfg, c, Nemesis(c, rng, rec, TOPIC, cfg.partitions, coordinators), rng)
    # An end call may take its timeout a few times over; a transaction a dropped producer
    # left open holds read_committed readers below the ends until the coordinator aborts
    # it (its timeout, then the abort's markers).
    return wind_down(
        cfg,
        c,
        rec,
        producers,
        consumers,
        join_s=150,
        catch_up_s=90,
        isolations=(UNCOMMITTED, COMMITTED),
    )
