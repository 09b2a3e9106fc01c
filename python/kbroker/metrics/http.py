"""The metrics listener: /metrics, /healthz and /readyz, served off the event loop.

`MetricsServer` answers from threads of its own (``http.server``), so it
answers while the event loop is saturated, and can say the loop is stuck:

- ``/metrics``: Prometheus text exposition (prometheus_client's
  ``generate_latest``) of the broker's registry;
- ``/healthz``: 200 while the process is alive and the event loop ran its
  heartbeat within ``stall_s`` (`LoopWatch`), else 503 naming how long ago;
- ``/readyz``: 200 when every readiness check passes (`Readiness`: storage
  open and serving, group coordinator loaded; cluster mode adds its
  registration with the cluster and a writable log directory), else 503
  naming the checks that fail.

`LoopWatch` runs on the loop: ten times a second it notes a heartbeat and
how late its timer fired (the event loop lag metric). `notify` speaks
systemd's sd_notify protocol (``READY=1``, ``STOPPING=1``, ``WATCHDOG=1``) when
``NOTIFY_SOCKET`` is set; with ``WatchdogSec=`` the watchdog is petted only
while the loop is healthy, so systemd restarts a broker whose loop is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kbroker.metrics.core import BrokerMetrics

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 0.1
# /healthz says unhealthy when the loop has not run its heartbeat for this long.
DEFAULT_STALL_S = 5.0


class LoopWatch:
    """The event loop's heartbeat and lag, sampled by a task on the loop."""

    def __init__(self, metrics: BrokerMetrics | None, interval_s: float = HEARTBEAT_INTERVAL_S):
        self._metrics = metrics
        self._interval_s = interval_s
        self.last_beat = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.last_beat = time.monotonic()
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        interval_ns = int(self._interval_s * 1e9)
        metrics = self._metrics
        while True:
            before = time.monotonic_ns()
            await asyncio.sleep(self._interval_s)
            now = time.monotonic_ns()
            self.last_beat = now / 1e9
            if metrics is not None:
                metrics.loop_lagged(max(now - before - interval_ns, 0))

    def since_beat(self) -> float:
        return time.monotonic() - self.last_beat


class Readiness:
    """Named checks that must all pass for /readyz (and sd_notify READY=1)."""

    def __init__(self) -> None:
        self._checks: list[tuple[str, Callable[[], bool]]] = []
        self.stopping = False

    def add_check(self, name: str, check: Callable[[], bool]) -> None:
        """Cluster mode adds "registered with the cluster" here."""
        self._checks.append((name, check))

    def failing(self) -> list[str]:
        if self.stopping:
            return ["shutting down"]
        failed = []
        for name, check in list(self._checks):
            try:
                ok = check()
            except Exception:  # a check that cannot tell is not ready
                ok = False
            if not ok:
                failed.append(name)
        return failed


class MetricsServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        watch: LoopWatch,
        readiness: Readiness,
        stall_s: float = DEFAULT_STALL_S,
    ) -> None:
        self.registry = registry
        self.watch = watch
        self.readiness = readiness
        self.stall_s = stall_s
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> tuple[str, int]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    try:
                        body = generate_latest(server.registry)
                    except Exception as exc:
                        log.exception("metrics collection failed")
                        self._reply(500, f"collection failed: {exc}\n".encode())
                        return
                    self._reply(200, body, CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    since = server.watch.since_beat()
                    if since > server.stall_s:
                        msg = f"unhealthy: event loop stalled for {since:.1f}s\n"
                        self._reply(503, msg.encode())
                    else:
                        self._reply(200, b"ok\n")
                elif path == "/readyz":
                    failing = server.readiness.failing()
                    if failing:
                        self._reply(503, ("not ready: " + ", ".join(failing) + "\n").encode())
                    else:
                        self._reply(200, b"ready\n")
                else:
                    self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

            def _reply(
                self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8"
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes every few seconds are not events worth a line

        httpd = ThreadingHTTPServer((host, port), Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        addr = httpd.server_address
        return str(addr[0]), int(addr[1])

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


# -- systemd ------------------------------------------------------------------------


def notify(state: str) -> bool:
    """Sends ``state`` to systemd's NOTIFY_SOCKET (sd_notify); False when there is none."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]  # an abstract socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(addr)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("cannot notify systemd (%s): %s", state.split("\n")[0], exc)
        return False
    return True


class SystemdNotifier:
    """READY=1 once the broker is ready; WATCHDOG=1 while the loop is healthy."""

    def __init__(self, watch: LoopWatch, readiness: Readiness, stall_s: float) -> None:
        self._watch = watch
        self._readiness = readiness
        self._stall_s = stall_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        self._watchdog_s: float | None = None
        if usec and usec.isdigit() and (pid is None or pid == str(os.getpid())):
            self._watchdog_s = int(usec) / 1e6

    def start(self) -> None:
        if not os.environ.get("NOTIFY_SOCKET"):
            return
        self._thread = threading.Thread(target=self._run, name="sd-notify", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ready = False
        tick = 0.1 if self._watchdog_s is None else min(0.1, self._watchdog_s / 4)
        last_pet = 0.0
        while not self._stop.wait(tick):
            if not ready and not self._readiness.failing():
                ready = notify("READY=1\nSTATUS=serving")
                if ready:
                    log.info("told systemd the broker is ready")
            now = time.monotonic()
            if (
                self._watchdog_s is not None
                and now - last_pet >= self._watchdog_s / 2
                and self._watch.since_beat() <= self._stall_s
            ):
                notify("WATCHDOG=1")
                last_pet = now

    def stopping(self) -> None:
        self._stop.set()
        if self._thread is not None:
            notify("STOPPING=1")
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout=1)
