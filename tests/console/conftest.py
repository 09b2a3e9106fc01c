"""One broker and two `kbroker console` processes on it (read-only, and with
--allow-writes) for every console test of a module, and one headless Chromium (Debian's,
driven by Selenium through Debian's chromedriver) for the session. The broker is kbroker,
and Apache Kafka 3.9.1 in ZooKeeper mode for the `kafka`-marked reference run
(``--kafka-reference``): the same tests prove the console against both.

Screenshots go to $KBROKER_CONSOLE_SCREENSHOTS when it is set (docs/console/ holds the
committed set), else to a temporary directory.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import KBROKER, BrokerProcess
from tests.zookeeper import ZooKeeperServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Without these Chromium waits on the network this machine does not have.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
# Counts window.alert calls instead of showing them: a script a page runs is seen.
ALERT_TRAP = "window.__alerts = []; window.alert = (m) => window.__alerts.push(String(m));"


@dataclass
class Answer:
    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ConsoleProcess:
    """`kbroker console` as a user starts it, on a free loopback port it prints."""

    bootstrap: str
    log_path: Path
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self, timeout: float = 30) -> ConsoleProcess:
        args = [*KBROKER, "console", "-b", self.bootstrap, "--listen", "127.0.0.1:0"]
        args += ["--refresh", "1", "--lag-sample", "1", "--timeout", "10", *self.extra]
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
        log.close()
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().decode() if ready else ""
        if "http://" not in line:
            self.stop()
            raise RuntimeError(f"console did not start: {line!r}\n{self.log_path.read_text()}")
        self.url = line[line.index("http://") :].strip().rstrip("/")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return self._ask(urllib.request.Request(self.url + path, headers=headers or {}))

    def post(self, path: str, form: dict[str, str]) -> Answer:
        data = urllib.parse.urlencode(form).encode()
        return self._ask(urllib.request.Request(self.url + path, data=data, method="POST"))

    def _ask(self, request: urllib.request.Request) -> Answer:
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return Answer(answer.status, answer.read().decode(), dict(answer.headers))
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.read().decode(), dict(exc.headers))


class Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...


@pytest.fixture(scope="module", params=["kbroker", pytest.param("kafka", marks=pytest.mark.kafka)])
def system(request: pytest.FixtureRequest) -> str:
    """The broker's system: kbroker, or Apache Kafka 3.9.1 for the reference run."""
    return str(request.param)


@pytest.fixture(scope="module")
def console_broker(
    system: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Broker]:
    root = tmp_path_factory.mktemp(f"console-{system}")
    if system == "kafka":
        zookeeper: ZooKeeperServer = request.getfixturevalue("zookeeper")
        chroot = f"/console-{uuid.uuid4().hex[:8]}"
        with kafka_zk_broker(zookeeper.connect, chroot, root) as kafka:
            yield kafka
        return
    node = BrokerProcess(root / "data")
    node.start("group.initial.rebalance.delay.ms=0")
    try:
        yield node
    finally:
        node.kill()


def _console(broker: Broker, tmp: Path, *extra: str) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(broker.bootstrap, tmp / "console.log", extra).start()
    try:
        yield console
    finally:
        console.stop()


@pytest.fixture(scope="module")
def console_ro(
    console_broker: Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    """The console as it starts by default: read-only."""
    yield from _console(console_broker, tmp_path_factory.mktemp("console-ro"))


@pytest.fixture(scope="module")
def console_rw(
    console_broker: Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    yield from _console(console_broker, tmp_path_factory.mktemp("console-rw"), "--allow-writes")


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (deploy/setup.sh test)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ALERT_TRAP})
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def screenshot_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("KBROKER_CONSOLE_SCREENSHOTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot_dir(root: Path, system: str) -> Path:
    """Where a system's screenshots go: kbroker's in ``root``, another's in a subdirectory
    named after it."""
    path = root if system == "kbroker" else root / system
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def screenshots(system: str, screenshot_root: Path) -> Path:
    return screenshot_dir(screenshot_root, system)


def wait_until(check: Any, what: str, timeout: float = 20, seen: Any = None) -> Any:
    """`check()` until it is true, else AssertionError saying what ``seen()`` last gave.
    An exception counts as not yet (a page element replaced by a refresh under the test's
    hands, say), unlike tests.helpers.wait_for."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = seen() if seen is not None else result
        except Exception as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
