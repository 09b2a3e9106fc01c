"""Fixtures for the cluster layer: a fresh chroot on the session's real ZooKeeper per test.

Async tests are plain functions that call `run` (no asyncio plugin here).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from kazoo.client import KazooClient

from kbroker.cluster.zk import ZkClient, ZkSettings
from tests.cluster.nodes import Cluster
from tests.zookeeper import ZooKeeperServer

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 60) -> T:
    """Runs a coroutine on a fresh loop, failing after `timeout` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def until(check: Callable[[], object], what: str, timeout: float = 15) -> None:
    """Waits on the loop until `check()` is true."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def expire_session(client: ZkClient, hosts: str) -> None:
    """Expires `client`'s session for real: a second connection takes the session over and
    closes it, so the server ends the session and drops its ephemeral znodes."""
    kazoo = client._kazoo
    assert kazoo is not None and kazoo.client_id
    thief = KazooClient(hosts=hosts, client_id=kazoo.client_id)
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def other_threads() -> set[str]:
    """Running threads besides the main one and asyncio's executor (kazoo's, for instance)."""
    return {
        f"{t.name}#{t.ident}"
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.name.startswith("asyncio_")
    }


@pytest.fixture
def zk_settings(zookeeper: ZooKeeperServer) -> ZkSettings:
    """Settings for a chroot of this test's own (not created yet: ZkClient.start makes it)."""
    return ZkSettings.parse(
        f"{zookeeper.connect}/test-{uuid.uuid4().hex[:12]}",
        # The server's tickTime of 500 ms bounds sessions to [1 s, 10 s].
        session_timeout_ms=4000,
        connection_timeout_ms=10000,
        request_timeout_ms=10000,
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that had a cluster: each broker's last lines go into the failure's
    message, which the run's closing summary prints whole (a long log is shown cut)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    clusters = [v for v in funcargs.values() if isinstance(v, Cluster)]
    crash = getattr(report.longrepr, "reprcrash", None)
    if not clusters or crash is None:
        return
    tails = []
    for c in clusters:
        for i, node in c.nodes.items():
            try:
                lines = [ln for ln in node.output().splitlines() if "kazoo.client" not in ln]
            except OSError:
                continue
            tails.append(f"--- broker {i} ({c.system}), last lines:")
            tails += [ln[:300] for ln in lines[-8:]]
    crash.message += "\n" + "\n".join(tails)
