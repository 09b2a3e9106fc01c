"""ZkClient against a real ZooKeeper: chroot, requests, multi, watches, session events, stop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kazoo.client import KazooClient

from kbroker.cluster.errors import (
    ZkBadVersionError,
    ZkConfigError,
    ZkError,
    ZkMultiError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotStartedError,
    ZkTimeoutError,
)
from kbroker.cluster.zk import (
    CheckOp,
    CreateOp,
    DeleteOp,
    SessionEvent,
    SetDataOp,
    WatchEvent,
    WatchEventType,
    ZkClient,
    ZkSettings,
)
from tests.cluster.conftest import expire_session, other_threads, run, until
from tests.helpers import free_port
from tests.zookeeper import ZooKeeperServer, _four_letter


def test_settings_parse_kafka_connect_strings() -> None:
    s = ZkSettings.parse("127.0.0.1:2181,[::1]:2182/kafka/prod")
    assert (s.hosts, s.chroot, s.session_timeout_ms) == (
        "127.0.0.1:2181,[::1]:2182",
        "/kafka/prod",
        18000,
    )
    assert s.connection_timeout_s == 18.0 and s.connect == "127.0.0.1:2181,[::1]:2182/kafka/prod"
    c = ZkSettings.from_config(
        {"zookeeper.connect": "h:1", "zookeeper.connection.timeout.ms": "6000"}
    )
    assert (c.chroot, c.session_timeout_ms, c.connection_timeout_s) == ("", 18000, 6.0)
    for bad in ["", "h", "h:0", "h:70000", "h:1/a/", "h:1/a//b", "h:1/a/../b", "h 1:2"]:
        with pytest.raises(ZkConfigError):
            ZkSettings.parse(bad)
    with pytest.raises(ZkConfigError):
        ZkSettings.parse("h:1", session_timeout_ms=0)
    with pytest.raises(ZkConfigError, match="not set"):
        ZkSettings.from_config({})
    with pytest.raises(ZkConfigError, match="milliseconds"):
        ZkSettings.from_config({"zookeeper.connect": "h:1", "zookeeper.session.timeout.ms": "x"})


def test_chroot_is_created_and_requests_stay_inside_it(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            path, stat = await zk.create("/a/b", b"v", makepath=True)
            assert path == "/a/b" and stat.version == 0 and stat.ephemeral_owner == 0
            assert await zk.get_children("/") == ["a"]
            assert await zk.get("/a/b") == (b"v", stat)

    run(main())
    raw = KazooClient(hosts=zookeeper.connect)
    raw.start(10)
    try:
        assert raw.get(f"{zk_settings.chroot}/a/b")[0] == b"v"
    finally:
        raw.stop()
        raw.close()


def test_requests_and_typed_errors(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            await zk.ensure_path("/x")
            assert await zk.exists("/x/y") is None
            with pytest.raises(ZkNoNodeError) as missing:
                await zk.get("/x/y")
            assert missing.value.path == "/x/y"
            await zk.create("/x/y", b"1")
            with pytest.raises(ZkNodeExistsError):
                await zk.create("/x/y", b"2")
            stat = await zk.set("/x/y", b"2", version=0)
            assert stat.version == 1
            with pytest.raises(ZkBadVersionError):
                await zk.set("/x/y", b"3", version=0)
            with pytest.raises(ZkBadVersionError):
                await zk.delete("/x/y", version=0)
            seq1, _ = await zk.create("/x/s_", sequential=True)
            seq2, _ = await zk.create("/x/s_", sequential=True)
            assert (seq1, seq2) == ("/x/s_0000000001", "/x/s_0000000002")
            _, estat = await zk.create("/x/e", ephemeral=True)
            assert estat.ephemeral_owner == zk.session_id
            with pytest.raises(ZkError, match="ephemeral"):
                await zk.create("/x/e/child")
            for bad in ["x", "/x/", "/x//y", "/x/./y", "/x/\x00"]:
                with pytest.raises(ZkError, match="not a znode path"):
                    await zk.get(bad)
            await zk.delete("/x/y", version=1)
            assert await zk.get_children("/x") == ["e", "s_0000000001", "s_0000000002"]

    run(main())


def test_multi_is_all_or_nothing_and_names_the_failed_op(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            await zk.create("/m", b"0")
            results = await zk.multi(
                [CheckOp("/m", 0), CreateOp("/m/c", b"c"), SetDataOp("/m", b"1", 0)]
            )
            assert results[0] is None and results[1] == "/m/c"
            assert getattr(results[2], "version", None) == 1
            with pytest.raises(ZkMultiError) as refused:
                await zk.multi([SetDataOp("/m", b"2", 1), CheckOp("/m", 0), DeleteOp("/m/c")])
            assert refused.value.failed == 1
            assert isinstance(refused.value.cause, ZkBadVersionError)
            # Nothing of the refused multi happened.
            data, stat = await zk.get("/m")
            assert (data, stat.version) == (b"1", 1)
            assert await zk.exists("/m/c") is not None
            assert await zk.multi([]) == []

    run(main())


async def _many_znodes(zk: ZkClient, count: int) -> list[str]:
    """``count`` znodes under /many, the i-th holding b"v<i>" and written i % 3 times more."""
    paths = [f"/many/n{i}" for i in range(count)]
    await zk.ensure_path("/many")
    await asyncio.gather(*(zk.create(p, b"first") for p in paths))
    for i, p in enumerate(paths):
        for _ in range(i % 3):
            await zk.set(p, b"again")
        await zk.set(p, f"v{i}".encode())
    return paths


def test_get_many_reads_in_multi_read_requests(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    """ZooKeeper 3.8 says its version (srvr): 60 reads in batches of 25 are 3 requests,
    each znode answered as get answers it, a missing one None, in the order asked."""

    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            paths = await _many_znodes(zk, 60)
            asked = [*paths[:30], "/many/missing", *paths[30:], "/nowhere/at/all"]
            one_by_one = [await zk.get(p) for p in paths]
            await zk.get_many(["/many"])  # the servers' versions are asked once, here
            before = zookeeper.packets_received()
            found = await zk.get_many(asked, batch=25)
            sent = zookeeper.packets_received() - before
            assert found == [*one_by_one[:30], None, *one_by_one[30:], None]
            assert [f[0] for f in found[:3] if f] == [b"v0", b"v1", b"v2"]
            assert [f[1].version for f in found[:3] if f] == [1, 2, 3]
            assert sent < 10, f"{sent} requests for 62 reads"
            assert await zk.get_many([]) == []
            with pytest.raises(ZkError, match="not a znode path"):
                await zk.get_many(["/many/n0", "bad"])

    run(main())


def test_get_many_reads_one_by_one_when_a_server_does_not_say_its_version(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    """A server of the connect string that does not answer srvr (down, or too old for a
    multiRead, which would close the session) means one get per znode: the same answers."""
    silent = f"127.0.0.1:{free_port()}"
    settings = ZkSettings.parse(
        f"{zk_settings.hosts},{silent}{zk_settings.chroot}",
        session_timeout_ms=zk_settings.session_timeout_ms,
        connection_timeout_ms=10000,
        request_timeout_ms=10000,
    )

    async def main() -> None:
        async with ZkClient(zk_settings) as writer:
            paths = await _many_znodes(writer, 40)
            one_by_one = [await writer.get(p) for p in paths]
        async with ZkClient(settings) as zk:
            before = zookeeper.packets_received()
            found = await zk.get_many([*paths, "/many/missing"], batch=25)
            sent = zookeeper.packets_received() - before
            assert found == [*one_by_one, None]
            assert sent >= 41, f"{sent} requests for 41 reads"

    run(main())


def test_watches_fire_on_the_loop(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            loop_thread = threading.get_ident()
            one_shot: list[tuple[WatchEvent, int]] = []
            persistent: list[WatchEvent] = []
            children: list[WatchEvent] = []
            await zk.exists("/w", watch=lambda e: one_shot.append((e, threading.get_ident())))
            await zk.watch("/w", persistent.append)
            await zk.watch("/w", children.append, children=True)
            # Each change waits for the event of the one before: a watch re-arms after it
            # fires, and changes made before it is armed again come as one event (readers
            # re-read state on every event), so back-to-back changes may not count one each.
            await zk.create("/w", b"0")
            await until(lambda: len(persistent) >= 1 and len(children) >= 1, "creation events")
            await zk.set("/w", b"1")
            await until(lambda: len(persistent) >= 2, "a change event")
            await zk.set("/w", b"2")
            await until(lambda: len(persistent) >= 3, "another change event")
            await zk.create("/w/kid")
            await until(lambda: len(children) >= 2, "a child event")
            assert [(e.type, e.path, t) for e, t in one_shot] == [
                (WatchEventType.CREATED, "/w", loop_thread)
            ]
            assert [e.type for e in persistent][:3] == [
                WatchEventType.CREATED,
                WatchEventType.CHANGED,
                WatchEventType.CHANGED,
            ]
            assert [e.type for e in children][:2] == [WatchEventType.CREATED, WatchEventType.CHILD]
            await zk.delete("/w/kid")
            await zk.delete("/w")
            await until(lambda: persistent[-1].type is WatchEventType.DELETED, "delete event")
            await asyncio.sleep(0.2)
            assert len(one_shot) == 1  # one-shot: fired once only

    run(main())


def test_session_expiry_is_reported_and_watches_resync(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            events: list[SessionEvent] = []
            zk.add_session_listener(events.append)
            watched: list[WatchEvent] = []
            lost: list[WatchEvent] = []
            await zk.watch("/node", watched.append)
            await zk.exists("/node", watch=lost.append)
            await zk.create("/eph", ephemeral=True)
            first_session = zk.session_id
            await asyncio.to_thread(expire_session, zk, zookeeper.connect)
            await until(lambda: SessionEvent.NEW_SESSION in events, "a new session", 20)
            assert SessionEvent.EXPIRED in events
            assert events.index(SessionEvent.EXPIRED) < events.index(SessionEvent.NEW_SESSION)
            assert zk.session_id not in (None, first_session) and zk.connected
            assert await zk.exists("/eph") is None  # went with the old session
            await until(lambda: any(e.type is WatchEventType.RESYNC for e in watched), "resync")
            assert [e.type for e in lost] == [WatchEventType.LOST]
            # The persistent watch works in the new session.
            await zk.create("/node")
            await until(lambda: watched[-1].type is WatchEventType.CREATED, "create after expiry")

    run(main())


def test_stop_leaves_no_thread_or_connection(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    def connections() -> int:
        text = _four_letter(zookeeper.port, b"srvr").decode()
        return int(text.split("Connections:")[1].split()[0])

    before_threads = other_threads()
    before = connections()

    async def main() -> None:
        zk = ZkClient(zk_settings)
        await zk.start()
        await zk.watch("/p", lambda e: None)
        assert connections() >= before + 1
        await zk.stop()
        with pytest.raises(ZkNotStartedError):
            await zk.get("/p")
        await zk.stop()  # twice is harmless

    run(main())
    deadline = time.monotonic() + 10
    while (other_threads() - before_threads or connections() > before) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert other_threads() - before_threads == set()
    assert connections() <= before


def test_unreachable_zookeeper_times_out_within_the_connection_timeout() -> None:
    settings = ZkSettings.parse(f"127.0.0.1:{free_port()}", connection_timeout_ms=1500)
    before = other_threads()

    async def main() -> None:
        zk = ZkClient(settings)
        started = time.monotonic()
        with pytest.raises(ZkTimeoutError, match="could not connect"):
            await zk.start()
        assert time.monotonic() - started < 8
        with pytest.raises(ZkNotStartedError):
            await zk.exists("/")

    run(main())
    deadline = time.monotonic() + 10
    while other_threads() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert other_threads() - before == set()
