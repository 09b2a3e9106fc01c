"""Cluster figures: a three-broker cluster on one ZooKeeper, kbroker's and Apache Kafka's.

    python -m bench.cluster [--systems kbroker,kafka] [--partitions 1000] [--total 10000]

For each system, on a fresh ZooKeeper and fresh data directories:

- ``create_s``: one CreateTopics of ``--partitions`` partitions (replication
  factor 1), until every partition has a leader in Metadata;
- ``rss_mb``: the brokers' resident memory (each, and their sum) once topics
  with ``--total`` partitions in all exist and have leaders;
- ``controller_elected_s`` / ``controller_usable_s``: kill -9 of the
  controller, until another broker holds /controller, and until a topic
  created afterwards takes an acks=all write (ZooKeeper session timeout
  ``--session-timeout-ms``); ``survivors_cpu_s``: the CPU seconds each surviving
  broker spent meanwhile.

Kafka is 3.9.1 in ZooKeeper mode (bench/kafka/fetch.sh 3.9.1) with the JVM
options of its start script. Results print as a table and append as JSON lines
to bench/results/cluster.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.systems import (
    KAFKA_JVM_OPTS,
    REPO,
    free_port,
    kafka_lib,
    kbroker_python,
    pin,
    wait_for_port,
)

KAFKA_ZK_VERSION = "3.9.1"
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF = Path("/etc/zookeeper/conf_example")
RESULTS = REPO / "bench" / "results" / "cluster.jsonl"


def _wait(check, what: str, timeout: float, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def zookeeper(root: Path) -> Iterator[str]:
    port = free_port()
    (root / "zk").mkdir(parents=True)
    cfg = root / "zk" / "zoo.cfg"
    cfg.write_text(
        f"tickTime=500\ndataDir={root / 'zk' / 'data'}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n"
    )
    with open(root / "zk" / "zookeeper.log", "ab") as out:
        proc = subprocess.Popen(
            [
                "java",
                "-Xmx512m",
                "-cp",
                f"{ZOOKEEPER_CONF}:{ZOOKEEPER_JAR}",
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        from kazoo.client import KazooClient

        def up() -> bool:
            zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=2)
            try:
                zk.start(timeout=2)
                return True
            except Exception:
                return False
            finally:
                zk.stop()
                zk.close()

        _wait(up, "ZooKeeper", 30, 0.3)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


def start_broker(
    system: str,
    broker_id: int,
    zk: str,
    root: Path,
    session_timeout_ms: int,
    settings: dict[str, str] | None = None,
    cpus: set[int] | None = None,
    log_path: Path | None = None,
    port: int | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Starts broker ``broker_id`` of ``system`` on ZooKeeper ``zk`` (with its chroot), data in
    ``root/SYSTEM-ID/data``; ``settings`` are added to (or override) the defaults below. Its
    output goes to ``log_path`` [``root/SYSTEM-ID/broker.log``]; ``cpus`` pins it. ``port``:
    the one it listens on [a free one]; given with the ``root`` of a broker that ran, it
    starts that broker again on its data."""
    port = free_port() if port is None else port
    home = root / f"{system}-{broker_id}"
    home.mkdir(parents=True, exist_ok=True)
    if system == "kbroker":
        defaults = {
            "zookeeper.session.timeout.ms": str(session_timeout_ms),
            "offsets.topic.replication.factor": "1",
            "max.broker.partitions": "1000000",
        }
        cmd = [
            kbroker_python(),
            "-m",
            "kbroker.cli",
            "serve",
            "--broker-id",
            str(broker_id),
            "--zookeeper",
            zk,
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(home / "data"),
        ]
        for key, value in (defaults | (settings or {})).items():
            cmd += ["--set", f"{key}={value}"]
    else:
        props = {
            "broker.id": str(broker_id),
            "zookeeper.connect": zk,
            "zookeeper.session.timeout.ms": str(session_timeout_ms),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(home / "data"),
            "offsets.topic.replication.factor": "1",
            "auto.create.topics.enable": "false",
        } | (settings or {})
        (home / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (home / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, out\nlog4j.appender.out=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka.server.KafkaServer=INFO\n"
            # ISR shrinks and expansions, as kbroker logs them at INFO
            "log4j.logger.kafka.cluster.Partition=INFO\n"
        )
        cmd = [
            "java",
            *KAFKA_JVM_OPTS,
            f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
            "-cp",
            f"{kafka_lib(KAFKA_ZK_VERSION)}/*",
            "kafka.Kafka",
            str(home / "server.properties"),
        ]
    with open(log_path or home / "broker.log", "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=pin(cpus),
        )
    return proc, f"127.0.0.1:{port}"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def controller_id(zk: str) -> int | None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk, timeout=5)
    client.start(timeout=5)
    try:
        data, _ = client.get("/controller")
        return int(json.loads(data)["brokerid"])
    except Exception:
        return None
    finally:
        client.stop()
        client.close()


def leaders_ready(bootstrap: str, topics: list[str]) -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    except Exception:
        return False
    for t in topics:
        topic = md.topics.get(t)
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        if any(p.leader < 0 for p in topic.partitions.values()):
            return False
    return True


def create(bootstrap: str, name: str, partitions: int, timeout: float = 300) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1)], operation_timeout=timeout, request_timeout=timeout
    )
    futures[name].result(timeout * 2)


@dataclass
class Cluster:
    """Three running brokers of one system on one ZooKeeper chroot."""

    system: str
    zk: str  # host:port/chroot, as the brokers have it
    procs: dict[int, subprocess.Popen[bytes]]
    addresses: dict[int, str]
    root: Path
    # Filled in on the way out: seconds each broker took to stop, and those killed after the
    # timeout.
    stop_s: dict[int, float] = field(default_factory=dict)
    killed: list[int] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses.values())

    def data_dir(self, broker_id: int) -> Path:
        return self.root / f"{self.system}-{broker_id}" / "data"

    def stop(self, broker_id: int, timeout: float) -> None:
        proc = self.procs[broker_id]
        start = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.killed.append(broker_id)
        self.stop_s[broker_id] = round(time.monotonic() - start, 2)


@contextmanager
def three_brokers(
    system: str,
    root: Path,
    session_timeout_ms: int = 6000,
    settings: dict[str, str] | None = None,
    cpus: set[int] | None = None,
    log_dir: Path | None = None,
    stop_timeout: float = 30,
    count: int = 3,
) -> Iterator[Cluster]:
    """A fresh ZooKeeper under ``root/system`` and brokers 1-3 (1-``count``) of ``system`` on its
    ``/bench`` chroot, until all are registered and one is the controller; stops the brokers, then
    ZooKeeper, on the way out (also on errors and Ctrl-C). ``log_dir``: keep each broker's output
    in ``log_dir/SYSTEM-ID.log`` (appended) rather than in ``root``. Brokers stop one at a time,
    3 first, each SIGTERM then SIGKILL after ``stop_timeout`` seconds (``Cluster.stop_s``)."""
    from kazoo.client import KazooClient

    # Brokers stop (their callbacks) before ZooKeeper does.
    with zookeeper(root / system) as zk_hosts, ExitStack() as stack:
        zk = zk_hosts + "/bench"
        client = KazooClient(hosts=zk_hosts, timeout=5)
        client.start(timeout=5)
        client.ensure_path("/bench")
        client.stop()
        client.close()
        procs: dict[int, subprocess.Popen[bytes]] = {}
        addresses: dict[int, str] = {}
        cluster = Cluster(system, zk, procs, addresses, root / system)
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        ids = list(range(1, count + 1))
        for i in ids:
            log = log_dir / f"{system}-{i}.log" if log_dir is not None else None
            proc, address = start_broker(
                system, i, zk, root / system, session_timeout_ms, settings, cpus, log
            )
            procs[i], addresses[i] = proc, address
            stack.callback(cluster.stop, i, stop_timeout)

        def registered() -> bool:
            if any(p.poll() is not None for p in procs.values()):
                codes = {i: p.returncode for i, p in procs.items()}
                raise RuntimeError(f"a {system} broker exited while starting: {codes}")
            c = KazooClient(hosts=zk, timeout=5)
            c.start(timeout=5)
            try:
                return (
                    c.exists("/brokers/ids") is not None
                    and sorted(int(i) for i in c.get_children("/brokers/ids")) == ids
                )
            finally:
                c.stop()
                c.close()

        _wait(registered, f"{count} brokers registered", 120, 0.5)
        # Kafka registers in ZooKeeper before its listener takes connections.
        for i, address in addresses.items():
            wait_for_port(int(address.rsplit(":", 1)[1]), procs[i], f"{system} broker {i}", 120)
        _wait(lambda: controller_id(zk) is not None, "a controller", 60)
        time.sleep(2)  # the controller's first round of requests
        yield cluster


def run_system(system: str, args: argparse.Namespace, root: Path) -> dict[str, object]:
    from confluent_kafka import Producer

    out: dict[str, object] = {"system": system, "partitions": args.partitions}
    with three_brokers(system, root, args.session_timeout_ms, log_dir=args.log_dir) as cluster:
        zk, procs, addresses, bootstrap = (
            cluster.zk,
            cluster.procs,
            cluster.addresses,
            cluster.bootstrap,
        )
        idle = [rss_mb(p.pid) for p in procs.values()]
        out["idle_rss_mb"] = [round(x, 1) for x in idle]

        start = time.monotonic()
        create(bootstrap, "big-0", args.partitions)
        _wait(lambda: leaders_ready(bootstrap, ["big-0"]), "leaders", 600, 0.2)
        out["create_s"] = round(time.monotonic() - start, 2)
        print(f"[{system}] {args.partitions} partitions created in {out['create_s']} s")

        topics = ["big-0"]
        created = args.partitions
        while created < args.total:
            n = min(args.partitions, args.total - created)
            name = f"big-{len(topics)}"
            create(bootstrap, name, n)
            topics.append(name)
            created += n
        start = time.monotonic()
        _wait(lambda: leaders_ready(bootstrap, topics), "leaders of every topic", 900, 1)
        time.sleep(2)
        per = [rss_mb(p.pid) for p in procs.values()]
        out["total_partitions"] = created
        out["rss_mb"] = [round(x, 1) for x in per]
        out["rss_mb_sum"] = round(sum(per), 1)
        print(f"[{system}] {created} partitions: broker RSS {out['rss_mb']} MiB")

        old = controller_id(zk)
        assert old is not None
        survivors = [i for i in procs if i != old]
        cpu_before = {i: cpu_s(procs[i].pid) for i in survivors}
        procs[old].kill()
        procs[old].wait()
        start = time.monotonic()
        _wait(
            lambda: controller_id(zk) not in (None, old),
            "another controller",
            args.session_timeout_ms / 1000 + 60,
            0.05,
        )
        out["controller_elected_s"] = round(time.monotonic() - start, 2)
        live = ",".join(a for i, a in addresses.items() if i != old)

        def produced() -> bool:
            try:
                # Short attempts: a client still waiting on the dead controller retries.
                create(live, "after-failover", 3, timeout=3)
            except Exception as exc:
                if "already exists" not in str(exc):
                    print(f"  {time.monotonic() - start:.2f}s: create: {exc}")
                    return False
            p = Producer({"bootstrap.servers": live, "acks": "all", "message.timeout.ms": 5000})
            errors: list[object] = []
            p.produce(
                "after-failover", b"x", partition=0, on_delivery=lambda e, m: errors.append(e)
            )
            p.flush(10)
            if not errors or errors[0] is not None:
                print(f"  {time.monotonic() - start:.2f}s: produce: {errors}")
                return False
            return True

        _wait(produced, "a write to a topic created after the failover", 120, 0.1)
        out["controller_usable_s"] = round(time.monotonic() - start, 2)
        # CPU time the surviving brokers spent from the kill until then (less affected by
        # a busy machine than the wall time).
        out["survivors_cpu_s"] = {
            str(i): round(cpu_s(procs[i].pid) - cpu_before[i], 2) for i in survivors
        }
        out["session_timeout_ms"] = args.session_timeout_ms
        print(
            f"[{system}] controller {old} killed: another elected after "
            f"{out['controller_elected_s']} s, a new topic took writes after "
            f"{out['controller_usable_s']} s; CPU seconds of the survivors meanwhile: "
            f"{out['survivors_cpu_s']}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--systems", default="kbroker,kafka")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--total", type=int, default=10000)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--dir", type=Path, default=None, help="where data goes [a temp dir]")
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="keep each broker's output in LOG_DIR/SYSTEM-ID.log [dropped with the data]",
    )
    args = parser.parse_args()
    if not ZOOKEEPER_JAR.exists():
        sys.exit("bench.cluster: needs ZooKeeper (deploy/setup.sh cluster)")
    rows = []
    root = Path(tempfile.mkdtemp(prefix="kbroker-cluster-bench-", dir=args.dir))
    try:
        for system in args.systems.split(","):
            row = run_system(system, args, root)
            row["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            rows.append(row)
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            with open(RESULTS, "a") as f:
                f.write(json.dumps(row) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        "| system | create N partitions (s) | RSS idle (MiB) | RSS with total (MiB, sum) |"
        " controller elected (s) | new topic usable (s) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['system']} | {r['create_s']} ({r['partitions']}) | {r['idle_rss_mb']} | "
            f"{r['rss_mb']} ({r['rss_mb_sum']}, {r['total_partitions']} partitions) | "
            f"{r['controller_elected_s']} | {r['controller_usable_s']} |"
        )


if __name__ == "__main__":
    main()
