"""ACLs in ZooKeeper, Kafka 3.9's way: storing them, reading them, hearing of changes.

The layout is Kafka's AclAuthorizer's (`kbroker.cluster.zk_data`), so a Kafka
3.9.1 broker on the same chroot enforces what kbroker writes and the reverse:
a resource pattern's ACLs in one znode (/kafka-acl/Topic/t1 for a LITERAL
pattern, /kafka-acl-extended/prefixed/Topic/t for a PREFIXED one), and
after each change a sequential notification naming the pattern
(/kafka-acl-changes/acl_changes_<seq>, /kafka-acl-extended-changes/...).

`ZkAclStorage` is the `AclStorage` a cluster member's authorizer writes
through: conditional creates, sets and deletes on the znode's version
(the authorizer retries when another broker won), and the notification
once a change is made. `ensure_acl_paths` creates the folders Kafka creates
at start; `read_all_acls` reads every stored ACL.

`AclChangeWatcher` is what each broker runs (Kafka's change listeners over
both notification folders): at start it loads every ACL into the
authorizer; then for each notification newer than those seen, in sequence
order per folder, it reads the announced pattern's ACLs again and hands
them to the authorizer. After a session expiry (notifications may have
been purged meanwhile) it loads everything again. Like Kafka it deletes
notifications older than 15 minutes after each round. A notification or
znode it cannot read is logged and skipped; the pattern keeps the ACLs it
had.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from kbroker.cluster.errors import (
    ZkBadVersionError,
    ZkDataError,
    ZkError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotStartedError,
)
from kbroker.cluster.zk import PersistentWatch, SessionEvent, WatchEvent, ZkClient
from kbroker.cluster.zk_data import (
    ACL_CHANGE_PATHS,
    ACL_CHANGE_PREFIX,
    ACL_STORES,
    acl_path,
    acl_type_path,
    decode_acl_change,
    decode_acls,
    encode_acl_change,
    encode_acls,
    sequence_number,
)
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.security.acl import CONCRETE_RESOURCE_TYPES, ResourcePattern
from kbroker.security.authorizer import ABSENT, NO_ACLS, AclAuthorizer, Entries, VersionedAcls

log = logging.getLogger(__name__)

# Kafka's ZkNodeChangeNotificationListener default.
ACL_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
# How many znodes one read_all_acls asks for at once.
_READ_BATCH = 128


async def ensure_acl_paths(zk: ZkClient) -> None:
    """The folders Kafka's authorizer creates at start: each store, a folder per resource
    type in each, and both notification folders."""
    for pattern_type in ACL_STORES:
        for resource_type in CONCRETE_RESOURCE_TYPES:
            await zk.ensure_path(acl_type_path(pattern_type, resource_type))
    for changes in ACL_CHANGE_PATHS.values():
        await zk.ensure_path(changes)


def _storage_error(pattern: ResourcePattern, exc: ZkError) -> KafkaError:
    return KafkaError(
        ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot update the ACLs of {pattern} in ZooKeeper: {exc}"
    )


class ZkAclStorage:
    """A cluster's ACLs, in ZooKeeper (see the module docstring)."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    async def read(self, pattern: ResourcePattern) -> VersionedAcls:
        try:
            data, stat = await self._zk.get(acl_path(pattern))
        except ZkNoNodeError:
            return NO_ACLS
        except ZkError as exc:
            raise _storage_error(pattern, exc) from None
        try:
            return VersionedAcls(decode_acls(data), stat.version)
        except ZkDataError as exc:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the stored ACLs of {pattern} are unreadable: {exc}",
            ) from None

    async def write(self, pattern: ResourcePattern, entries: Entries, expected: int) -> int | None:
        path = acl_path(pattern)
        try:
            if not entries:
                if expected != ABSENT:
                    await self._zk.delete(path, expected)
                return ABSENT
            if expected == ABSENT:
                await self._zk.create(path, encode_acls(entries), makepath=True)
                return 0
            return (await self._zk.set(path, encode_acls(entries), expected)).version
        except ZkNoNodeError:
            # Gone meanwhile: a delete is done; a set must start again from a create.
            return ABSENT if not entries else None
        except (ZkNodeExistsError, ZkBadVersionError):
            return None
        except ZkError as exc:
            raise _storage_error(pattern, exc) from None

    async def announce(self, pattern: ResourcePattern) -> None:
        changes = ACL_CHANGE_PATHS[pattern.pattern_type]
        try:
            await self._zk.create(
                f"{changes}/{ACL_CHANGE_PREFIX}",
                encode_acl_change(pattern),
                sequential=True,
                makepath=True,
            )
        except ZkError as exc:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the ACLs of {pattern} changed, but the other brokers could not be told: {exc}",
            ) from None


async def read_all_acls(zk: ZkClient) -> dict[ResourcePattern, VersionedAcls]:
    """Every stored ACL, by resource pattern. A resource type Kafka does not know is
    skipped, as Kafka skips it; an unreadable znode is ZkDataError (an authorizer that
    started without some DENY could allow what it must not)."""
    patterns: list[ResourcePattern] = []
    for pattern_type in ACL_STORES:
        for resource_type in CONCRETE_RESOURCE_TYPES:
            try:
                names = await zk.get_children(acl_type_path(pattern_type, resource_type))
            except ZkNoNodeError:
                continue
            patterns += [ResourcePattern(resource_type, n, pattern_type) for n in names]
    out: dict[ResourcePattern, VersionedAcls] = {}
    for start in range(0, len(patterns), _READ_BATCH):
        batch = patterns[start : start + _READ_BATCH]
        reads = await asyncio.gather(*(zk.get(acl_path(p)) for p in batch), return_exceptions=True)
        for pattern, result in zip(batch, reads, strict=True):
            if isinstance(result, ZkNoNodeError):
                continue  # deleted since the listing
            if isinstance(result, BaseException):
                raise result
            data, stat = result
            try:
                out[pattern] = VersionedAcls(decode_acls(data), stat.version)
            except ZkDataError as exc:
                raise ZkDataError(f"{acl_path(pattern)}: {exc}") from None
    return out


class AclChangeWatcher:
    """Keeps an authorizer's ACLs as ZooKeeper holds them (see the module docstring).

    Owns the sequence number of the last notification processed in each folder.
    """

    def __init__(
        self,
        zk: ZkClient,
        authorizer: AclAuthorizer,
        *,
        change_expiration_ms: int = ACL_CHANGE_EXPIRATION_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._zk = zk
        self._authorizer = authorizer
        self._storage = ZkAclStorage(zk)
        self._expiration_ms = change_expiration_ms
        self._clock = clock
        self._last = dict.fromkeys(ACL_CHANGE_PATHS.values(), -1)
        self._wake = asyncio.Event()
        self._full_reload = False
        self._watches: list[PersistentWatch] = []
        self._remove_listener: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def last_changes(self) -> dict[str, int]:
        """Per notification folder, the sequence number of the last one processed."""
        return dict(self._last)

    async def start(self) -> None:
        """Creates Kafka's ACL folders, loads every ACL into the authorizer (which then
        writes through this ZooKeeper) and follows the notifications from there."""
        if self._task is not None:
            raise RuntimeError("AclChangeWatcher already started")
        await ensure_acl_paths(self._zk)
        self._remove_listener = self._zk.add_session_listener(self._on_session)
        try:
            for changes in ACL_CHANGE_PATHS.values():
                self._watches.append(await self._zk.watch(changes, self._on_watch, children=True))
            await self._load_everything()
        except BaseException:
            await self.stop()
            raise
        self._authorizer.storage = self._storage
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        task, self._task = self._task, None
        # Until it is done: Python 3.11's wait_for (under every ZkClient request) loses a
        # cancellation that arrives with the answer, and the loop would go on waiting.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.1)

    def _on_watch(self, event: WatchEvent) -> None:
        self._wake.set()

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.EXPIRED, SessionEvent.NEW_SESSION):
            self._full_reload = True
        if event is SessionEvent.NEW_SESSION:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self._full_reload:
                    self._full_reload = False
                    try:
                        await self._load_everything()
                    except BaseException:
                        self._full_reload = True
                        raise
                for changes in ACL_CHANGE_PATHS.values():
                    await self._process_new(changes)
            except ZkNotStartedError:
                return
            except ZkError as exc:
                log.info("processing ACL changes: %s; retrying when connected", exc)
                self._wake.set()
                try:
                    await self._zk.wait_connected()
                except ZkNotStartedError:
                    return
                await asyncio.sleep(0.05)
            except Exception:
                log.exception("processing ACL changes failed; waiting for the next change")

    async def _changes(self, changes: str) -> list[tuple[int, str]]:
        try:
            names = await self._zk.get_children(changes)
        except ZkNoNodeError:
            return []
        return _numbered(changes, names)

    async def _load_everything(self) -> None:
        # The notifications first: a change they announce is in what is read after them.
        tops = {c: max(await self._changes(c), default=(-1, ""))[0] for c in self._last}
        async with self._authorizer.updating:
            self._authorizer.replace_all(await read_all_acls(self._zk))
        for changes, top in tops.items():
            self._last[changes] = max(self._last[changes], top)

    async def _process_new(self, changes: str) -> None:
        numbered = await self._changes(changes)
        for seq, name in numbered:
            if seq > self._last[changes]:
                await self._process(changes, name)
                self._last[changes] = seq
        if numbered:
            await self._purge(changes, numbered)

    async def _process(self, changes: str, name: str) -> None:
        path = f"{changes}/{name}"
        try:
            data, _ = await self._zk.get(path)
        except ZkNoNodeError:
            log.debug("ACL change %s was purged before it was read", path)
            return
        try:
            pattern = decode_acl_change(changes, data)
        except ZkDataError as exc:
            log.warning("skipping ACL change notification %s: %s", path, exc)
            return
        async with self._authorizer.updating:
            try:
                acls = await self._storage.read(pattern)
            except KafkaError as exc:
                log.warning("skipping ACL change %s: %s", path, exc.message)
                return
            self._authorizer.set_resource(pattern, acls)
        log.info(
            "ACL change %s: %s has %d ACL(s) (version %d)",
            name,
            pattern,
            len(acls.entries),
            acls.version,
        )

    async def _purge(self, changes: str, numbered: Sequence[tuple[int, str]]) -> None:
        """Deletes notifications older than the expiration (every broker does; first wins)."""
        now_ms = int(self._clock() * 1000)
        for _, name in numbered:
            path = f"{changes}/{name}"
            stat = await self._zk.exists(path)
            if stat is not None and now_ms - stat.ctime_ms > self._expiration_ms:
                log.debug("purging ACL change %s", path)
                with contextlib.suppress(ZkNoNodeError):
                    await self._zk.delete(path)


def _numbered(changes: str, names: Sequence[str]) -> list[tuple[int, str]]:
    """The notifications among ``names`` with their sequence numbers, oldest first."""
    out = []
    for name in names:
        try:
            out.append((sequence_number(name, ACL_CHANGE_PREFIX), name))
        except ZkDataError:
            log.debug("ignoring %s/%s: not an ACL change notification", changes, name)
    return sorted(out)
