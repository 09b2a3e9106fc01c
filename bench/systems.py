"""Broker launchers: a kbroker node and an Apache Kafka KRaft node, run the same way.

Each launcher is a context manager that starts one broker on a fresh data
directory under the data root, on a free loopback port, pinned to the broker
CPUs, and always stops it (SIGTERM, then SIGKILL) and removes its data, also
on errors and Ctrl-C. ``usage()`` reads the broker's CPU time and peak RSS
from /proc; ``reset_peak_rss()`` starts a new peak for the next run.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .ports import free_port
from .security import PROTOCOLS, Security

KAFKA_VERSION = "4.1.1"  # keep in step with bench/kafka/pom.xml
REPO = Path(__file__).resolve().parent.parent

# As Kafka's own start script (kafka-server-start.sh / kafka-run-class.sh) runs the broker.
KAFKA_JVM_OPTS = [
    "-Xmx1G",
    "-Xms1G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]


def kafka_lib(version: str = KAFKA_VERSION) -> Path:
    """Where bench/kafka/fetch.sh puts Kafka's jars (KBROKER_BENCH_KAFKA_LIB overrides)."""
    env = os.environ.get("KBROKER_BENCH_KAFKA_LIB")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "kbroker-bench" / f"kafka-{version}" / "lib"


def kafka_available(version: str = KAFKA_VERSION) -> bool:
    lib = kafka_lib(version)
    return shutil.which("java") is not None and any(lib.glob("kafka_2.13-*.jar"))


def fetch_kafka(version: str = KAFKA_VERSION) -> None:
    """Runs bench/kafka/fetch.sh (Maven; cached, a no-op when the jars are there)."""
    subprocess.run(["bash", str(REPO / "bench" / "kafka" / "fetch.sh"), version], check=True)


def pin(cpus: set[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that pins the child to ``cpus`` (None: no pinning)."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{what} exited with {proc.returncode} before listening"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what} did not listen on {port} within {timeout:.0f} s"
                ) from None
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def proc_usage(pid: int) -> dict[str, float]:
    """A process's CPU seconds (user+system, all threads), peak and current RSS in MiB, from
    /proc; {} once it has gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        return {
            "cpu_s": cpu,
            "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
            "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
        }
    except (OSError, KeyError, IndexError, ValueError):
        return {}


def reset_peak_rss(pid: int) -> None:
    """Makes a process's VmHWM start again from its current RSS (Linux clear_refs 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


class Broker:
    """A running broker process: its address, pid and resource use."""

    def __init__(
        self,
        system: str,
        version: str,
        bootstrap: str,
        proc: subprocess.Popen[bytes],
        data_dir: Path,
        settings: dict[str, str],
        endpoints: dict[str, str] | None = None,
        launch: Callable[[], subprocess.Popen[bytes]] | None = None,
    ) -> None:
        self.system = system
        self.version = version
        self.bootstrap = bootstrap  # the PLAINTEXT listener
        self.proc = proc
        self.data_dir = data_dir
        self.settings = settings
        # Security protocol -> HOST:PORT of its listener (only PLAINTEXT when not secured).
        self.endpoints = endpoints or {"PLAINTEXT": bootstrap}
        self._launch = launch  # starts the process again on the same data and ports

    def kill_and_restart(self, clean: bool = False) -> float:
        """kill -9 of the broker (with ``clean``, SIGTERM and a wait for it to stop), then the
        same command started again on the same data directory and ports; the monotonic time
        of the new start (the caller waits for it to serve)."""
        if self._launch is None:
            raise RuntimeError(f"{self.system}: this broker cannot be restarted")
        if clean:
            _stop(self.proc, timeout=120)
        else:
            self.proc.kill()
            self.proc.wait(30)
        started = time.monotonic()
        self.proc = self._launch()
        return started

    def endpoint(self, protocol: str) -> str:
        return self.endpoints[protocol]

    def usage(self) -> dict[str, float]:
        """CPU seconds (user+system, all threads) and peak RSS in MiB so far."""
        return proc_usage(self.proc.pid)

    def reset_peak_rss(self) -> None:
        """Makes VmHWM start again from the current RSS (Linux clear_refs 5)."""
        reset_peak_rss(self.proc.pid)

    def data_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data_dir.rglob("*") if p.is_file())


def _listener_ports(security: Security | None) -> dict[str, int]:
    """A free loopback port for each listener: PLAINTEXT alone, or every protocol secured."""
    return {p: free_port() for p in (PROTOCOLS if security is not None else ("PLAINTEXT",))}


def _private_properties(path: Path, props: dict[str, str]) -> None:
    """A properties file only this user can read (it may hold the SASL users' passwords)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())


def _fresh_dir(root: Path, system: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{system}-", dir=root))


def kbroker_python() -> str:
    """The Python that runs the broker (KBROKER_BENCH_PYTHON: e.g. a venv built from a fixed
    commit)."""
    return os.environ.get("KBROKER_BENCH_PYTHON") or sys.executable


@functools.cache
def kbroker_version() -> str:
    """kbroker's version and the commit it was built from (KBROKER_BENCH_VERSION overrides)."""
    if os.environ.get("KBROKER_BENCH_VERSION"):
        return os.environ["KBROKER_BENCH_VERSION"]
    version = (
        subprocess.run(
            [kbroker_python(), "-c", "import kbroker; print(kbroker.__version__)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        or "?"
    )
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if not commit or kbroker_python() != sys.executable:
        return version
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no", "--", "python", "rust"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{version} ({commit}{'+dirty' if dirty else ''})"


@contextmanager
def kbroker_node(
    data_root: Path,
    settings: dict[str, str],
    cpus: set[int] | None,
    log_path: Path | None = None,
    security: Security | None = None,
) -> Iterator[Broker]:
    """A kbroker node; with ``security``, listeners of every protocol in bench/security.py
    (their settings in a properties file, ``--config``)."""
    data = _fresh_dir(data_root, "kbroker")
    ports = _listener_ports(security)
    endpoints = {p: f"127.0.0.1:{port}" for p, port in ports.items()}
    bootstrap = endpoints["PLAINTEXT"]
    cmd = [kbroker_python(), "-m", "kbroker.cli", "serve", "--data-dir", str(data / "log")]
    if security is None:
        cmd += ["--listen", bootstrap]
    else:
        conf = data / "server.properties"
        _private_properties(
            conf,
            {
                "listeners": ",".join(f"{p}://{a}" for p, a in endpoints.items()),
                **security.broker_settings(),
            },
        )
        cmd += ["--config", str(conf)]
    cmd += ["--log-level", "WARNING"]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    # KBROKER_BENCH_METRICS=SECONDS: metrics on, scraped every SECONDS (to measure their cost).
    scrape_s = float(os.environ.get("KBROKER_BENCH_METRICS") or 0)
    metrics_url = None
    if scrape_s > 0:
        metrics_port = free_port()
        cmd += ["--metrics", f"127.0.0.1:{metrics_port}"]
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - closed in finally

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=pin(cpus),
        )

    broker = Broker(
        "kbroker", kbroker_version(), bootstrap, launch(), data, settings, endpoints, launch
    )
    stop_scraping = threading.Event()
    try:
        for port in ports.values():
            wait_for_port(port, broker.proc, "kbroker")
        if metrics_url is not None:
            threading.Thread(
                target=_scrape, args=(metrics_url, scrape_s, stop_scraping), daemon=True
            ).start()
        yield broker
    finally:
        stop_scraping.set()
        _stop(broker.proc)
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def _scrape(url: str, every_s: float, stop: threading.Event) -> None:
    """Reads ``url`` every ``every_s`` seconds until ``stop``, as Prometheus would."""
    while not stop.wait(every_s):
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                resp.read()
        except OSError:
            pass


def kafka_properties(
    data: Path,
    ports: dict[str, int],
    controller_port: int,
    settings: dict[str, str],
    security: Security | None = None,
) -> dict[str, str]:
    """A single KRaft node (broker + controller), internal topics with one replica; a listener
    per entry of ``ports`` (security protocol -> port), the controller's PLAINTEXT."""
    advertised = ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"{advertised},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": advertised,
        "listener.security.protocol.map": ",".join(
            [f"{p}:{p}" for p in ports] + ["CONTROLLER:PLAINTEXT"]
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data / "log"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    if security is not None:
        props.update(security.broker_settings())
    props.update(settings)
    return props


@contextmanager
def kafka_node(
    data_root: Path,
    settings: dict[str, str],
    cpus: set[int] | None,
    log_path: Path | None = None,
    security: Security | None = None,
    version: str = KAFKA_VERSION,
) -> Iterator[Broker]:
    """An Apache Kafka KRaft node; with ``security``, listeners as kbroker_node's."""
    lib = kafka_lib(version)
    classpath = f"{lib}/*"
    data = _fresh_dir(data_root, "kafka")
    ports, controller_port = _listener_ports(security), free_port()
    endpoints = {p: f"127.0.0.1:{port}" for p, port in ports.items()}
    props = kafka_properties(data, ports, controller_port, settings, security)
    conf = data / "server.properties"
    _private_properties(conf, props)
    log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - closed in finally
    broker: Broker | None = None
    try:
        java = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath]
        cluster_id = (
            subprocess.run(
                [*java, "kafka.tools.StorageTool", "random-uuid"],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        subprocess.run(
            [
                *java,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(conf),
                "--standalone",
            ],
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def launch() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                ["java", *KAFKA_JVM_OPTS, "-cp", classpath, "kafka.Kafka", str(conf)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=pin(cpus),
            )

        broker = Broker(
            "kafka", version, endpoints["PLAINTEXT"], launch(), data, settings, endpoints, launch
        )
        for port in ports.values():
            wait_for_port(port, broker.proc, "kafka")
        yield broker
    finally:
        if broker is not None:
            _stop(broker.proc)
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def launcher(system: str) -> Any:
    return {"kbroker": kbroker_node, "kafka": kafka_node}[system]
