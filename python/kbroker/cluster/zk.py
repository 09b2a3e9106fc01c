"""`ZkClient`: ZooKeeper for asyncio code, over kazoo's threads.

kazoo runs its own threads (a connection thread and callback workers). Every
request here is started with kazoo's ``*_async`` call and its answer is
handed to the event loop with ``loop.call_soon_threadsafe``; no request
blocks the loop or a thread of the loop's executor, and every one is bounded
by `ZkSettings.request_timeout_ms`. kazoo's exceptions become the typed
errors of `kbroker.cluster.errors`.

Watches and session changes reach their callbacks on the loop too:

- a one-shot watch (the ``watch=`` argument of `get`, `exists`,
  `get_children`) fires at most once; when the connection drops, kazoo
  forgets it and it fires with `WatchEventType.LOST`.
- `watch` installs a persistent watch: it re-arms itself after each event
  and after every reconnection or new session, and reports `RESYNC` when
  changes may have been missed meanwhile. (kazoo 2.11 has no ZooKeeper 3.6
  persistent watches, so this is built from one-shot ones.)
- `add_session_listener` reports `SessionEvent`s: CONNECTED once, then
  SUSPENDED / RECONNECTED (same session, ephemerals intact) or EXPIRED /
  NEW_SESSION (ephemerals gone: re-create them).

A chroot in the connect string (``host:port,host:port/kafka``) is created at
start when missing, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.states import EventType
from kazoo.retry import KazooRetry

from kbroker.cluster.errors import (
    ZkBadVersionError,
    ZkConfigError,
    ZkConnectionLossError,
    ZkError,
    ZkMultiError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotEmptyError,
    ZkNotStartedError,
    ZkSessionExpiredError,
    ZkTimeoutError,
)
from kbroker.cluster.zk_multi_read import (
    MultiRead,
    ReadFailed,
    multi_read_supported,
    server_versions,
)

log = logging.getLogger(__name__)

# Kafka's defaults (zookeeper.session.timeout.ms; zookeeper.connection.timeout.ms
# falls back to the session timeout).
DEFAULT_SESSION_TIMEOUT_MS = 18000

# Reads per multiRead request: Kafka's partition state znodes answer in well under 1 MiB
# (ZooKeeper's default jute.maxbuffer) at this count.
MULTI_READ_BATCH = 1000
# How often servers whose versions could not all be had are asked again.
MULTI_READ_PROBE_INTERVAL_S = 60.0

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-_]+):([0-9]{1,5})$")
_BAD_PATH = re.compile(r"//|\x00|/\.{1,2}(/|$)")


# -- settings ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZkSettings:
    """Where ZooKeeper is and how long to wait for it.

    `hosts` is ``host:port[,host:port...]``; `chroot` is ``""`` or ``/a/b``.
    """

    hosts: str
    chroot: str = ""
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    # None: the session timeout, as in Kafka.
    connection_timeout_ms: int | None = None
    # kbroker's own bound on one request (Kafka retries without one); None: the session timeout.
    request_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ZkConfigError("zookeeper.connect names no server")
        for item in self.hosts.split(","):
            match = _HOST_PORT.match(item.strip())
            if match is None or not 0 < int(match.group(2)) < 65536:
                raise ZkConfigError(f"zookeeper.connect: {item!r} is not host:port")
        if self.chroot and (
            not self.chroot.startswith("/")
            or self.chroot.endswith("/")
            or _BAD_PATH.search(self.chroot)
        ):
            raise ZkConfigError(
                f"zookeeper.connect: {self.chroot!r} is not a chroot path like /kafka"
            )
        for name in ("session_timeout_ms", "connection_timeout_ms", "request_timeout_ms"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or not 0 < value <= 3_600_000):
                raise ZkConfigError(f"{name} must be a number of milliseconds in (0, 3600000]")

    @classmethod
    def parse(
        cls,
        connect: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
    ) -> ZkSettings:
        """From a Kafka connect string, ``host:port[,host:port...][/chroot]``."""
        if not isinstance(connect, str):
            raise ZkConfigError(f"zookeeper.connect must be a string, got {connect!r}")
        hosts, slash, chroot = connect.strip().partition("/")
        return cls(
            hosts,
            f"/{chroot}" if slash and chroot else "",
            session_timeout_ms,
            connection_timeout_ms,
            request_timeout_ms,
        )

    @classmethod
    def from_config(cls, props: Mapping[str, object]) -> ZkSettings:
        """From broker settings under Kafka's names (zookeeper.connect, zookeeper.*.timeout.ms)."""

        def millis(name: str) -> int | None:
            value = props.get(name)
            if value is None:
                return None
            try:
                return int(str(value))
            except ValueError:
                raise ZkConfigError(f"{name} must be a number of milliseconds") from None

        connect = props.get("zookeeper.connect")
        if not isinstance(connect, str):
            raise ZkConfigError("zookeeper.connect is not set")
        return cls.parse(
            connect,
            session_timeout_ms=millis("zookeeper.session.timeout.ms") or DEFAULT_SESSION_TIMEOUT_MS,
            connection_timeout_ms=millis("zookeeper.connection.timeout.ms"),
        )

    @property
    def connect(self) -> str:
        return self.hosts + self.chroot

    @property
    def connection_timeout_s(self) -> float:
        return (self.connection_timeout_ms or self.session_timeout_ms) / 1000

    @property
    def request_timeout_s(self) -> float:
        return (self.request_timeout_ms or self.session_timeout_ms) / 1000


# -- values -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stat:
    """A znode's metadata. `czxid` names its creation (Kafka's broker epoch); `version` counts
    its data writes (the token of a conditional write); `ephemeral_owner` is the session that
    owns an ephemeral znode (0 otherwise)."""

    czxid: int
    mzxid: int
    version: int
    cversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int
    ctime_ms: int
    mtime_ms: int

    @classmethod
    def _of(cls, s: Any) -> Stat:
        return cls(
            s.czxid,
            s.mzxid,
            s.version,
            s.cversion,
            s.ephemeralOwner,
            s.dataLength,
            s.numChildren,
            s.ctime,
            s.mtime,
        )


class SessionEvent(enum.Enum):
    CONNECTED = "connected"  # the first session, made by start()
    SUSPENDED = "suspended"  # connection lost; the session may still be alive
    RECONNECTED = "reconnected"  # connection back within the same session
    EXPIRED = "expired"  # the session is gone, with its ephemeral znodes and watches
    NEW_SESSION = "new_session"  # connected again with a new session after EXPIRED


class WatchEventType(enum.Enum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"  # the data changed
    CHILD = "child"  # the children changed
    LOST = "lost"  # one-shot watch dropped with the connection: re-read once connected
    RESYNC = "resync"  # persistent watch re-armed after a connection change: re-read


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: WatchEventType
    path: str


_EVENT_TYPES = {
    EventType.CREATED: WatchEventType.CREATED,
    EventType.DELETED: WatchEventType.DELETED,
    EventType.CHANGED: WatchEventType.CHANGED,
    EventType.CHILD: WatchEventType.CHILD,
}


@dataclass(frozen=True, slots=True)
class CheckOp:
    """In a multi: the znode must have this version (or the whole multi fails)."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1  # -1: any version


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


Op = CheckOp | CreateOp | SetDataOp | DeleteOp
# A multi's result per op: the created path, the new Stat of a set, None for check/delete.
OpResult = str | Stat | None

WatchCallback = Callable[[WatchEvent], None]
SessionListener = Callable[[SessionEvent], None]


def check_path(path: object) -> str:
    """A chroot-relative znode path, or ZkError saying why it is not one."""
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or (path != "/" and path.endswith("/"))
        or _BAD_PATH.search(path)
        or len(path) > 4096
    ):
        raise ZkError(f"{path!r} is not a znode path", None)
    return path


def _translate(exc: BaseException, path: str | None) -> ZkError:
    where = f" ({path})" if path else ""
    table: list[tuple[type[BaseException], type[ZkError], str]] = [
        (kz.NoNodeError, ZkNoNodeError, "no such znode"),
        (kz.NodeExistsError, ZkNodeExistsError, "znode already exists"),
        (kz.BadVersionError, ZkBadVersionError, "znode version does not match"),
        (kz.NotEmptyError, ZkNotEmptyError, "znode has children"),
        (kz.ConnectionClosedError, ZkNotStartedError, "client is closed"),
        (kz.SessionExpiredError, ZkSessionExpiredError, "session expired"),
        (kz.ConnectionLoss, ZkConnectionLossError, "connection lost"),
        (kz.ConnectionDropped, ZkConnectionLossError, "connection lost"),
        (KazooTimeoutError, ZkTimeoutError, "timed out"),
    ]
    for kazoo_type, ours, text in table:
        if isinstance(exc, kazoo_type):
            return ours(f"ZooKeeper: {text}{where}", path)
    if isinstance(exc, kz.NoChildrenForEphemeralsError):
        return ZkError(f"ZooKeeper: an ephemeral znode cannot have children{where}", path)
    if isinstance(exc, ZkError):
        return exc
    return ZkError(f"ZooKeeper: {type(exc).__name__} {exc}{where}", path)


# -- the client ----------------------------------------------------------------------


class ZkClient:
    """One ZooKeeper session (renewed after expiry) used from one event loop."""

    def __init__(self, settings: ZkSettings) -> None:
        self.settings = settings
        self._kazoo: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._listeners: list[SessionListener] = []
        self._connected = asyncio.Event()
        self._session_id: int | None = None
        self._state: SessionEvent | None = None
        self._watches: set[PersistentWatch] = set()
        # Whether the servers have multiRead (None: not known yet), and when they were asked.
        self._multi_read: bool | None = None
        self._multi_read_probed = float("-inf")

    # -- life cycle --

    async def start(self) -> None:
        """Connects (within the connection timeout) and creates the chroot when missing."""
        if self._kazoo is not None:
            raise ZkError("ZooKeeper client already started")
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        if self.settings.chroot:
            await self._run_blocking(self._ensure_chroot)
        client = KazooClient(
            hosts=self.settings.connect,
            timeout=self.settings.session_timeout_ms / 1000,
            # Reconnect forever (until stop), promptly once ZooKeeper is back.
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
            logger=logging.getLogger("kazoo.client"),
        )
        client.add_listener(self._on_kazoo_state)
        self._kazoo = client
        try:
            await self._run_blocking(client.start, self.settings.connection_timeout_s)
        except BaseException:
            self._kazoo = None
            self._stopping.set()
            await self._run_blocking(_close_quietly, client)
            raise
        # kazoo's listener may reach the loop after start() returns: record the session now.
        if self._state is None and client.client_id:
            self._session_id = client.client_id[0]
            self._state = SessionEvent.CONNECTED
            self._connected.set()
            log.info("ZooKeeper session connected (0x%x)", self._session_id)

    async def stop(self) -> None:
        """Closes the session (its ephemeral znodes go at once) and kazoo's threads."""
        client, self._kazoo = self._kazoo, None
        self._stopping.set()
        for watch in list(self._watches):
            watch.cancel()
        self._watches.clear()
        self._connected.clear()
        if client is not None:
            await self._run_blocking(_close_quietly, client)

    async def __aenter__(self) -> ZkClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _ensure_chroot(self) -> None:
        """Kafka's createChrootIfNecessary: a short session without the chroot makes it."""
        client = KazooClient(
            hosts=self.settings.hosts,
            timeout=self.settings.session_timeout_ms / 1000,
            logger=logging.getLogger("kazoo.client"),
        )
        try:
            client.start(self.settings.connection_timeout_s)
            if client.exists(self.settings.chroot) is None:
                client.ensure_path(self.settings.chroot)
        finally:
            _close_quietly(client)

    async def _run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        # kazoo's own timeouts bound these; the outer bound is a backstop.
        limit = self.settings.connection_timeout_s + self.settings.session_timeout_ms / 1000 + 10
        try:
            async with asyncio.timeout(limit):
                return await asyncio.to_thread(fn, *args)
        except TimeoutError:
            raise ZkTimeoutError(
                f"ZooKeeper at {self.settings.connect}: no answer in {limit}s"
            ) from None
        except KazooTimeoutError:
            raise ZkTimeoutError(
                f"could not connect to ZooKeeper at {self.settings.connect} within "
                f"{self.settings.connection_timeout_s}s"
            ) from None
        except kz.KazooException as exc:
            raise _translate(exc, None) from None

    # -- session state --

    @property
    def session_id(self) -> int | None:
        """The current session's id (None while there is none)."""
        return self._session_id

    @property
    def state(self) -> SessionEvent | None:
        return self._state

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def add_session_listener(self, listener: SessionListener) -> Callable[[], None]:
        """`listener` hears every later `SessionEvent`, on the loop; returns its remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def wait_connected(self, timeout: float | None = None) -> None:
        if self._kazoo is None:
            raise ZkNotStartedError("ZooKeeper client is not started")
        try:
            async with asyncio.timeout(timeout):
                await self._connected.wait()
        except TimeoutError:
            raise ZkTimeoutError(f"not connected to ZooKeeper within {timeout}s") from None

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: read the session id here, act on the loop.
        client = self._kazoo
        if self._stopping.is_set() or client is None or self._loop is None:
            return
        session = (
            client.client_id[0] if state == KazooState.CONNECTED and client.client_id else None
        )
        self._to_loop(self._on_state, state, session)

    def _on_state(self, state: str, session: int | None) -> None:
        if self._stopping.is_set():
            return
        if state == KazooState.CONNECTED:
            if session == self._session_id and self._connected.is_set():
                return  # start() already recorded this connection
            if self._state is None:
                event = SessionEvent.CONNECTED
            elif session == self._session_id:
                event = SessionEvent.RECONNECTED
            else:
                event = SessionEvent.NEW_SESSION
            self._session_id = session
            self._connected.set()
        elif state == KazooState.SUSPENDED:
            event = SessionEvent.SUSPENDED
            self._connected.clear()
        else:
            event = SessionEvent.EXPIRED
            self._session_id = None
            self._connected.clear()
        self._state = event
        log.info("ZooKeeper session %s (0x%x)", event.value, session or 0)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("ZooKeeper session listener failed on %s", event.value)

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    # -- requests --

    def _client(self) -> KazooClient:
        if self._kazoo is None:
            raise ZkNotStartedError("ZooKeeper client is not started")
        return self._kazoo

    def _watcher(self, callback: WatchCallback | None) -> Callable[[Any], None] | None:
        if callback is None:
            return None

        def fire(event: Any) -> None:  # kazoo's callback thread
            kind = _EVENT_TYPES.get(event.type, WatchEventType.LOST)
            self._to_loop(callback, WatchEvent(kind, event.path or ""))

        return fire

    async def _call(self, what: str, path: str | None, start: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:  # on the loop
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(_translate(result.exception, path))

        try:
            pending = start()
        except (kz.KazooException, TypeError, ValueError) as exc:
            raise _translate(exc, path) from None
        pending.rawlink(lambda result: self._to_loop(settle, result))
        timeout = self.settings.request_timeout_s
        try:
            # Not wait_for: on Python 3.11 it can lose a cancellation that arrives with the
            # answer, and the cancelled caller would go on.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise ZkTimeoutError(f"ZooKeeper: {what} got no answer in {timeout}s", path) from None

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        """The znode's data (b"" for none) and stat; ZkNoNodeError when it does not exist."""
        client, path = self._client(), check_path(path)
        data, stat = await self._call(
            "get", path, lambda: client.get_async(path, self._watcher(watch))
        )
        return data or b"", Stat._of(stat)

    async def get_many(
        self, paths: Sequence[str], batch: int = MULTI_READ_BATCH
    ) -> list[tuple[bytes, Stat] | None]:
        """The data and stat of each znode of ``paths``, in order (None: it does not exist).

        With servers that have multiRead (ZooKeeper 3.6+, see `kbroker.cluster.zk_multi_read`),
        as multiRead requests of at most ``batch`` reads each, all in flight together; with
        others (or while their versions cannot be had), one get each, all in flight."""
        checked = [check_path(p) for p in paths]
        if not checked:
            return []
        if not await self._multi_read_supported():
            return list(await asyncio.gather(*(self._get_or_none(p) for p in checked)))
        client = self._client()
        chunks = [checked[i : i + max(1, batch)] for i in range(0, len(checked), max(1, batch))]

        def start(chunk: list[str]) -> Any:
            pending = client.handler.async_result()
            # kazoo has no multiRead of its own; its connection sends any request object.
            client._call(MultiRead([_prefix_root(client.chroot, p) for p in chunk]), pending)
            return pending

        answers = await asyncio.gather(
            *(
                self._call("multi read", chunk[0], functools.partial(start, chunk))
                for chunk in chunks
            )
        )
        out: list[tuple[bytes, Stat] | None] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            for path, read in zip(chunk, answer, strict=True):
                if isinstance(read, ReadFailed):
                    if isinstance(read.error, kz.NoNodeError):
                        out.append(None)
                        continue
                    raise _translate(read.error, path)
                out.append((read[0], Stat._of(read[1])))
        return out

    async def _get_or_none(self, path: str) -> tuple[bytes, Stat] | None:
        try:
            return await self.get(path)
        except ZkNoNodeError:
            return None

    async def _multi_read_supported(self) -> bool:
        """Whether every server of the connect string runs ZooKeeper 3.6 or later: asked once
        (again at most every `MULTI_READ_PROBE_INTERVAL_S` while some server does not say)."""
        if self._multi_read is not None:
            return self._multi_read
        now = time.monotonic()
        if now < self._multi_read_probed + MULTI_READ_PROBE_INTERVAL_S:
            return False
        self._multi_read_probed = now
        versions = await asyncio.to_thread(
            server_versions, self.settings.hosts, min(2.0, self.settings.connection_timeout_s)
        )
        supported = multi_read_supported(versions)
        if supported or all(v is not None for v in versions):
            self._multi_read = supported
        log.info(
            "ZooKeeper server versions %s: %s",
            ", ".join("unknown" if v is None else f"{v[0]}.{v[1]}" for v in versions),
            "reads in multiRead requests" if supported else "one read per request",
        )
        return supported

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        """The znode's stat, None when missing; a watch fires on create, delete or change."""
        client, path = self._client(), check_path(path)
        stat = await self._call(
            "exists", path, lambda: client.exists_async(path, self._watcher(watch))
        )
        return None if stat is None else Stat._of(stat)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        client, path = self._client(), check_path(path)
        children = await self._call(
            "get_children", path, lambda: client.get_children_async(path, self._watcher(watch))
        )
        return sorted(children)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> tuple[str, Stat]:
        """Creates the znode; returns its path (with the sequence number) and its stat."""
        client = self._client()
        check_path(path.rstrip("/") if sequential and path.endswith("/") else path)
        created, stat = await self._call(
            "create",
            path,
            lambda: client.create_async(
                path,
                data,
                ephemeral=ephemeral,
                sequence=sequential,
                makepath=makepath,
                include_data=True,
            ),
        )
        return created, Stat._of(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Writes the data if the znode has `version` (-1: any); ZkBadVersionError otherwise."""
        client, path = self._client(), check_path(path)
        stat = await self._call("set", path, lambda: client.set_async(path, data, version))
        return Stat._of(stat)

    async def delete(self, path: str, version: int = -1) -> None:
        client, path = self._client(), check_path(path)
        await self._call("delete", path, lambda: client.delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        """Creates the znode and its missing parents, empty; nothing when it exists."""
        client, path = self._client(), check_path(path)
        await self._call("ensure_path", path, lambda: client.ensure_path_async(path))

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """All of `ops` or none of them (a ZooKeeper multi); ZkMultiError names the op refused."""
        client = self._client()
        if not ops:
            return []
        transaction = client.transaction()
        for op in ops:
            check_path(op.path)
            if isinstance(op, CheckOp):
                transaction.check(op.path, op.version)
            elif isinstance(op, CreateOp):
                transaction.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetDataOp):
                transaction.set_data(op.path, op.data, op.version)
            else:
                transaction.delete(op.path, op.version)
        results = await self._call("multi", ops[0].path, transaction.commit_async)
        for index, result in enumerate(results):
            if isinstance(result, BaseException) and not isinstance(result, kz.RolledBackError):
                cause = _translate(result, ops[index].path)
                raise ZkMultiError(
                    f"ZooKeeper multi refused at op {index} ({type(ops[index]).__name__} "
                    f"{ops[index].path}): {cause}",
                    index,
                    cause,
                )
        if any(isinstance(r, BaseException) for r in results):
            raise ZkError("ZooKeeper multi rolled back without a failing op")
        return [
            Stat._of(r) if isinstance(op, SetDataOp) else r if isinstance(op, CreateOp) else None
            for op, r in zip(ops, results, strict=True)
        ]

    # -- persistent watches --

    async def watch(
        self, path: str, callback: WatchCallback, *, children: bool = False
    ) -> PersistentWatch:
        """Calls `callback` on the loop after every change of the znode (or of its children),
        until cancelled or the client stops. Armed when this returns: read the state after it."""
        watch = PersistentWatch(self, check_path(path), callback, children)
        await watch._arm()  # _run waits for this first arming's event
        self._watches.add(watch)
        watch._task = asyncio.get_running_loop().create_task(watch._run())
        return watch


class PersistentWatch:
    """A watch that re-arms itself; see `ZkClient.watch`."""

    def __init__(self, zk: ZkClient, path: str, callback: WatchCallback, children: bool) -> None:
        self.path = path
        self._zk = zk
        self._callback = callback
        self._children = children
        self._fired: asyncio.Future[WatchEvent] | None = None
        self._task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._zk._watches.discard(self)

    async def _arm(self) -> None:
        fired: asyncio.Future[WatchEvent] = asyncio.get_running_loop().create_future()
        self._fired = fired

        def fire(event: WatchEvent) -> None:
            if not fired.done():
                fired.set_result(event)

        if self._children:
            try:
                await self._zk.get_children(self.path, fire)
                return
            except ZkNoNodeError:
                pass  # no znode yet: its creation is the first change
        await self._zk.exists(self.path, fire)

    async def _run(self) -> None:
        """Wait for the armed watch, re-arm, then deliver: a change after delivery fires again."""
        try:
            while True:
                assert self._fired is not None
                event = await self._fired
                if event.type is WatchEventType.LOST:
                    event = WatchEvent(WatchEventType.RESYNC, self.path)
                while True:
                    await self._zk.wait_connected()
                    try:
                        await self._arm()
                        break
                    except ZkNotStartedError:
                        raise
                    except ZkError as exc:
                        log.debug("re-arming watch on %s: %s", self.path, exc)
                        event = WatchEvent(WatchEventType.RESYNC, self.path)
                        await asyncio.sleep(0.05)
                self._deliver(event)
        except ZkNotStartedError:
            return

    def _deliver(self, event: WatchEvent) -> None:
        try:
            self._callback(event)
        except Exception:
            log.exception("watch callback on %s failed", self.path)


def _close_quietly(client: KazooClient) -> None:
    """kazoo's stop (closes the session, joins its threads) then close; never raises."""
    try:
        client.stop()
    except Exception as exc:
        log.warning("stopping the ZooKeeper client: %s", exc)
    try:
        client.close()
    except Exception as exc:
        log.warning("closing the ZooKeeper client: %s", exc)
