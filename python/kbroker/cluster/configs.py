"""Dynamic configs in ZooKeeper, Kafka 3.9's way: writing them, reading them, hearing of changes.

Writers (the broker that took AlterConfigs, IncrementalAlterConfigs or
CreateTopics): `set_topic_configs` and `set_broker_configs` write the
entity's whole config set to /config/topics/<t> or /config/brokers/<id> (or
/config/brokers/<default>, the cluster-wide default), set or created, and
then create the sequential /config/changes/config_change_<seq> naming the
entity in Kafka's version 2 JSON (``{"version":2,"entity_path":"topics/t"}``)
so every broker re-reads it (Kafka's AdminZkClient.changeConfigs). The data
goes first and the two writes are not one transaction, as in Kafka: whoever
reads a notification finds the data it announces. The caller computes the
whole set (an incremental alter reads, edits, writes), and checks that the
topic exists, as Kafka's changeTopicConfig does. A topic being created
writes its configs with ``notify=False`` before its assignment, as Kafka's
createTopic does: brokers read them when they create the topic's logs.

Users' and clients' configs (SCRAM credentials and quotas) are the same
kind of znode at /config/users/<user>, /config/clients/<client-id> and
/config/users/<user>/clients/<client-id> (names sanitized, ``<default>`` for
defaults; see kbroker.quota.entity): `set_quota_entity_configs` writes one and
announces ``users/<user>``, ``clients/<id>`` or ``users/<user>/clients/<id>``,
creating missing parents with no data as Kafka does.

Groups' own configs (Kafka 4.x's GROUP config resource, which Kafka keeps in
KRaft's metadata) are the same kind of znode at /config/groups/<group id>
(sanitized as users' names are): `set_group_configs` writes one and announces
``groups/<group id>``. A Kafka 3.9 broker of a mixed cluster logs an error for
such a notification (not one of its entity types) and goes on with the next.

Readers: `read_topic_configs`, `read_broker_configs`, `read_group_configs`,
`read_quota_entity_configs` (a missing znode reads as no configs) and
`read_all_topic_configs`, `read_all_broker_configs`, `read_all_group_configs`,
`read_all_quota_entity_configs`.

Values are stored as given. Kafka stores password-type broker configs
(``ssl.keystore.password`` ...) encrypted with ``password.encoder.secret``:
such values read from a Kafka-written znode are ciphertext, and a plain
value written here is one a Kafka broker cannot decode.

`ConfigChangeWatcher` is what each broker runs (Kafka's DynamicConfigManager
over ZkNodeChangeNotificationListener): it reports every notification newer
than those present at its start, in sequence order, with the entity's
configs as read after the notification, to ``on_topic(topic, configs)`` or
``on_broker(broker_id | None, configs)`` on the event loop, and, when given,
users' and clients' to ``on_quota_entity(entity, configs)`` and groups' to
``on_group(group_id, configs)``. Notifications
and config znodes it cannot read (not Kafka's JSON, a bad entity name) are
logged and skipped. Other entity types (ips) are ignored.
Like Kafka it deletes notifications older than 15 minutes after each round.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from kbroker.cluster.errors import (
    ZkDataError,
    ZkError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotStartedError,
)
from kbroker.cluster.zk import PersistentWatch, SessionEvent, WatchEvent, ZkClient
from kbroker.cluster.zk_data import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES_PATH,
    CONFIG_PATH,
    DEFAULT_ENTITY,
    INT32_MAX,
    ConfigChange,
    EntityConfig,
    broker_config_path,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
    group_config_path,
    quota_entity_config_path,
    sequence_number,
    topic_config_path,
)
from kbroker.quota.entity import QuotaEntity, desanitize, sanitize

log = logging.getLogger(__name__)

# Kafka's ZkNodeChangeNotificationListener default (ConfigChangeNotificationExpiration).
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
TOPICS_CONFIG_PATH = f"{CONFIG_PATH}/topics"
BROKERS_CONFIG_PATH = f"{CONFIG_PATH}/brokers"
USERS_CONFIG_PATH = f"{CONFIG_PATH}/users"
CLIENTS_CONFIG_PATH = f"{CONFIG_PATH}/clients"
GROUPS_CONFIG_PATH = f"{CONFIG_PATH}/groups"
# How many znodes one read_all_* asks for at once.
_READ_BATCH = 128
# Set-or-create rounds when another writer creates or deletes the znode between our calls.
_WRITE_ATTEMPTS = 3

TopicCallback = Callable[[str, dict[str, str]], None]
BrokerCallback = Callable[[int | None, dict[str, str]], None]
QuotaEntityCallback = Callable[[QuotaEntity, dict[str, str]], None]
GroupCallback = Callable[[str, dict[str, str]], None]
T = TypeVar("T")


# -- writers -------------------------------------------------------------------------


async def set_topic_configs(
    zk: ZkClient, topic: str, configs: Mapping[str, str], *, notify: bool = True
) -> int | None:
    """Writes the topic's whole set of dynamic configs and announces the change.

    Returns the notification's sequence number (None with ``notify=False``).
    """
    return await _set_entity_configs(
        zk, topic_config_path(topic), f"topics/{topic}", configs, notify
    )


async def set_broker_configs(
    zk: ZkClient, broker_id: int | None, configs: Mapping[str, str], *, notify: bool = True
) -> int | None:
    """Writes a broker's whole set of dynamic configs (None: the cluster-wide default) and
    announces the change; returns the notification's sequence number."""
    path = broker_config_path(broker_id)
    name = DEFAULT_ENTITY if broker_id is None else str(broker_id)
    return await _set_entity_configs(zk, path, f"brokers/{name}", configs, notify)


async def set_quota_entity_configs(
    zk: ZkClient, entity: QuotaEntity, configs: Mapping[str, str], *, notify: bool = True
) -> int | None:
    """Writes a user's, client's or user's client's whole set of configs (credentials and
    quotas) and announces the change; returns the notification's sequence number."""
    return await _set_entity_configs(
        zk, quota_entity_config_path(entity), entity.path, configs, notify
    )


async def set_group_configs(
    zk: ZkClient, group_id: str, configs: Mapping[str, str], *, notify: bool = True
) -> int | None:
    """Writes a group's whole set of configs and announces the change; returns the
    notification's sequence number. ZkDataError for a group id no znode can be named by."""
    return await _set_entity_configs(
        zk, group_config_path(group_id), f"groups/{sanitize(group_id)}", configs, notify
    )


async def notify_config_change(zk: ZkClient, entity_path: str) -> int:
    """Creates /config/changes/config_change_<seq> for ``<type>/<name>``; returns <seq>."""
    data = encode_config_change(ConfigChange(entity_path))
    created, _ = await zk.create(
        f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}", data, sequential=True, makepath=True
    )
    return sequence_number(created, CONFIG_CHANGE_PREFIX)


async def _set_entity_configs(
    zk: ZkClient, path: str, entity_path: str, configs: Mapping[str, str], notify: bool
) -> int | None:
    for name, value in configs.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"config {name!r}={value!r}: names and values must be strings")
    data = encode_entity_config(EntityConfig.of(configs))
    for attempt in range(_WRITE_ATTEMPTS):
        try:
            await zk.set(path, data)
            break
        except ZkNoNodeError:
            try:
                await zk.create(path, data, makepath=True)
                break
            except ZkNodeExistsError:  # created meanwhile: set it
                if attempt + 1 == _WRITE_ATTEMPTS:
                    raise
    return await notify_config_change(zk, entity_path) if notify else None


# -- readers -------------------------------------------------------------------------


async def read_topic_configs(zk: ZkClient, topic: str) -> dict[str, str]:
    """The topic's dynamic configs ({} when it has none); ZkDataError when unreadable."""
    return await _read_entity(zk, topic_config_path(topic)) or {}


async def read_broker_configs(zk: ZkClient, broker_id: int | None) -> dict[str, str]:
    """A broker's dynamic configs (None: the cluster-wide default); {} when it has none."""
    return await _read_entity(zk, broker_config_path(broker_id)) or {}


async def read_all_topic_configs(zk: ZkClient) -> dict[str, dict[str, str]]:
    """Every topic's dynamic configs, by topic; an unreadable znode is logged and left out."""
    return await _read_all(zk, TOPICS_CONFIG_PATH, lambda name: name)


async def read_all_broker_configs(zk: ZkClient) -> dict[int | None, dict[str, str]]:
    """Every broker's dynamic configs (None: the cluster-wide default), by broker id."""
    return await _read_all(zk, BROKERS_CONFIG_PATH, broker_entity_id)


async def read_group_configs(zk: ZkClient, group_id: str) -> dict[str, str]:
    """A group's configs ({} when it has none); ZkDataError when unreadable."""
    return await _read_entity(zk, group_config_path(group_id)) or {}


async def read_all_group_configs(zk: ZkClient) -> dict[str, dict[str, str]]:
    """Every group's configs, by group id (some may be empty)."""
    return await _read_all(zk, GROUPS_CONFIG_PATH, desanitize)


async def read_quota_entity_configs(zk: ZkClient, entity: QuotaEntity) -> dict[str, str]:
    """A user's or client's configs ({} when it has none); ZkDataError when unreadable."""
    return await _read_entity(zk, quota_entity_config_path(entity)) or {}


async def read_all_quota_entity_configs(zk: ZkClient) -> dict[QuotaEntity, dict[str, str]]:
    """Every user's, client's and user's client's configs (some may be empty)."""
    out: dict[QuotaEntity, dict[str, str]] = {}
    users = await _read_all(
        zk, USERS_CONFIG_PATH, lambda name: QuotaEntity.from_path("users", name)
    )
    clients = await _read_all(
        zk, CLIENTS_CONFIG_PATH, lambda name: QuotaEntity.from_path("clients", name)
    )
    out.update(users)
    out.update(clients)
    try:
        user_names = await zk.get_children(USERS_CONFIG_PATH)
    except ZkNoNodeError:
        user_names = []
    for user in user_names:
        try:
            QuotaEntity.from_path("users", user)
        except ValueError as exc:
            log.warning("skipping %s/%s: %s", USERS_CONFIG_PATH, user, exc)
            continue
        parent = f"{USERS_CONFIG_PATH}/{user}/clients"
        pairs = await _read_all(zk, parent, functools.partial(_user_client_entity, user))
        out.update(pairs)
    return out


def _user_client_entity(user: str, client: str) -> QuotaEntity:
    return QuotaEntity.from_path("users", f"{user}/clients/{client}")


def broker_entity_id(name: str) -> int | None:
    """The broker a /config/brokers child names: None for <default>; ZkDataError otherwise."""
    if name == DEFAULT_ENTITY:
        return None
    if name.isascii() and name.isdigit() and len(name) <= 10 and int(name) <= INT32_MAX:
        return int(name)
    raise ZkDataError(f"broker config entity {name!r} is neither a broker id nor <default>")


async def _read_entity(zk: ZkClient, path: str) -> dict[str, str] | None:
    """The configs at `path`, None when the znode does not exist."""
    try:
        data, _ = await zk.get(path)
    except ZkNoNodeError:
        return None
    try:
        return decode_entity_config(data).as_dict()
    except ZkDataError as exc:
        raise ZkDataError(f"{path}: {exc}") from None


async def _read_all(
    zk: ZkClient, parent: str, entity: Callable[[str], T]
) -> dict[T, dict[str, str]]:
    try:
        names = await zk.get_children(parent)
    except ZkNoNodeError:
        return {}
    out: dict[T, dict[str, str]] = {}
    for start in range(0, len(names), _READ_BATCH):
        batch = names[start : start + _READ_BATCH]
        results = await asyncio.gather(
            *(_read_entity(zk, f"{parent}/{name}") for name in batch), return_exceptions=True
        )
        for name, result in zip(batch, results, strict=True):
            if isinstance(result, ZkDataError):
                log.warning("skipping unreadable dynamic configs: %s", result)
                continue
            if isinstance(result, BaseException):
                raise result
            if result is None:
                continue  # deleted since the listing
            try:
                out[entity(name)] = result
            except (ZkDataError, ValueError) as exc:
                log.warning("skipping %s/%s: %s", parent, name, exc)
    return out


# -- the watcher ---------------------------------------------------------------------


class ConfigChangeWatcher:
    """Reports dynamic config changes announced under /config/changes to this broker.

    Owns the sequence number of the last notification processed. After the
    session expires (notifications may have been purged while the broker was
    away) it reads every topic and broker config again, and the users', clients'
    and groups' configs it was asked to follow, and reports them all, then goes
    on from the notifications present at that point. After a reconnection within
    the same session it processes the notifications it missed: they are all
    still there, since the connection was down for less than the session timeout
    (seconds) and a notification lives 15 minutes. Callbacks may be called again
    with configs already reported; they must be idempotent.
    """

    def __init__(
        self,
        zk: ZkClient,
        on_topic: TopicCallback,
        on_broker: BrokerCallback,
        *,
        on_quota_entity: QuotaEntityCallback | None = None,
        on_group: GroupCallback | None = None,
        change_expiration_ms: int = CONFIG_CHANGE_EXPIRATION_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._zk = zk
        self._on_topic = on_topic
        self._on_broker = on_broker
        self._on_quota_entity = on_quota_entity
        self._on_group = on_group
        self._expiration_ms = change_expiration_ms
        self._clock = clock
        self._last = -1
        self._wake = asyncio.Event()
        self._full_resync = False
        self._watch: PersistentWatch | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def last_change(self) -> int:
        """The sequence number of the last notification processed (-1: none)."""
        return self._last

    async def start(self, *, report_existing: bool = False) -> None:
        """Starts watching. Notifications already present are not reported: read the configs
        after this returns, or pass ``report_existing`` to have every config reported first."""
        if self._task is not None:
            raise RuntimeError("ConfigChangeWatcher already started")
        await self._zk.ensure_path(CONFIG_CHANGES_PATH)
        self._remove_listener = self._zk.add_session_listener(self._on_session)
        try:
            self._watch = await self._zk.watch(CONFIG_CHANGES_PATH, self._on_watch, children=True)
            if report_existing:
                await self._report_everything()
            else:
                self._last = max(_numbered(await self._changes()), default=(-1, ""))[0]
        except BaseException:
            await self.stop()
            raise
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_watch(self, event: WatchEvent) -> None:
        self._wake.set()

    def _on_session(self, event: SessionEvent) -> None:
        # Both: a new session can be reported without EXPIRED first (kazoo may reconnect
        # straight into a new session).
        if event in (SessionEvent.EXPIRED, SessionEvent.NEW_SESSION):
            self._full_resync = True
        if event is SessionEvent.NEW_SESSION:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self._full_resync:
                    self._full_resync = False
                    try:
                        await self._report_everything()
                    except BaseException:
                        self._full_resync = True
                        raise
                await self._process_new()
            except ZkNotStartedError:
                return
            except ZkError as exc:
                # Connection lost or expired mid-round: try again once connected.
                log.info("processing config changes: %s; retrying when connected", exc)
                self._wake.set()
                try:
                    await self._zk.wait_connected()
                except ZkNotStartedError:
                    return
                await asyncio.sleep(0.05)
            except Exception:
                log.exception("processing config changes failed; waiting for the next change")

    async def _changes(self) -> list[str]:
        try:
            return await self._zk.get_children(CONFIG_CHANGES_PATH)
        except ZkNoNodeError:
            return []

    async def _process_new(self) -> None:
        numbered = _numbered(await self._changes())
        for seq, name in numbered:
            if seq > self._last:
                await self._process(name)
                self._last = seq
        if numbered:
            await self._purge(numbered)

    async def _process(self, name: str) -> None:
        path = f"{CONFIG_CHANGES_PATH}/{name}"
        try:
            data, _ = await self._zk.get(path)
        except ZkNoNodeError:
            log.debug("config change %s was purged before it was read", path)
            return
        try:
            change = decode_config_change(data)
        except ZkDataError as exc:
            log.warning("skipping config change notification %s: %s", path, exc)
            return
        log.info("config change %s for %s", name, change.entity_path)
        try:
            if change.entity_type == "topics":
                topic = change.entity_name
                self._call(self._on_topic, topic, await read_topic_configs(self._zk, topic))
            elif change.entity_type == "brokers":
                broker_id = broker_entity_id(change.entity_name)
                self._call(
                    self._on_broker, broker_id, await read_broker_configs(self._zk, broker_id)
                )
            elif change.entity_type in ("users", "clients") and self._on_quota_entity:
                try:
                    entity = QuotaEntity.from_path(change.entity_type, change.entity_name)
                except ValueError as exc:
                    log.warning("skipping config change %s: %s", path, exc)
                    return
                configs = await read_quota_entity_configs(self._zk, entity)
                self._call(self._on_quota_entity, entity, configs)
            elif change.entity_type == "groups" and self._on_group:
                try:
                    group_id = desanitize(change.entity_name)
                except ValueError as exc:
                    log.warning("skipping config change %s: %s", path, exc)
                    return
                self._call(self._on_group, group_id, await read_group_configs(self._zk, group_id))
            else:
                log.debug("ignoring config change for %s", change.entity_path)
        except ZkDataError as exc:
            log.warning("skipping config change %s for %s: %s", path, change.entity_path, exc)

    async def _report_everything(self) -> None:
        # The notifications first: a change they announce is in the configs read after them,
        # and a later one is processed after this.
        top = max(_numbered(await self._changes()), default=(-1, ""))[0]
        topics = await read_all_topic_configs(self._zk)
        brokers = await read_all_broker_configs(self._zk)
        log.info("reporting the configs of %d topics and %d brokers", len(topics), len(brokers))
        for topic, configs in topics.items():
            self._call(self._on_topic, topic, configs)
        for broker_id, configs in brokers.items():
            self._call(self._on_broker, broker_id, configs)
        if self._on_quota_entity is not None:
            entities = await read_all_quota_entity_configs(self._zk)
            log.info("reporting the configs of %d users and clients", len(entities))
            for entity, configs in entities.items():
                self._call(self._on_quota_entity, entity, configs)
        if self._on_group is not None:
            groups = await read_all_group_configs(self._zk)
            log.info("reporting the configs of %d groups", len(groups))
            for group_id, configs in groups.items():
                self._call(self._on_group, group_id, configs)
        self._last = max(self._last, top)

    async def _purge(self, numbered: Sequence[tuple[int, str]]) -> None:
        """Deletes notifications older than the expiration (every broker does; first one wins)."""
        now_ms = int(self._clock() * 1000)
        for _, name in numbered:
            path = f"{CONFIG_CHANGES_PATH}/{name}"
            stat = await self._zk.exists(path)
            if stat is not None and now_ms - stat.ctime_ms > self._expiration_ms:
                log.debug("purging config change %s", path)
                with contextlib.suppress(ZkNoNodeError):
                    await self._zk.delete(path)

    def _call(self, callback: Callable[..., None], *args: object) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception("config change callback failed for %s", args[0])


def _numbered(names: Sequence[str]) -> list[tuple[int, str]]:
    """The notifications among `names` with their sequence numbers, oldest first."""
    out = []
    for name in names:
        try:
            out.append((sequence_number(name, CONFIG_CHANGE_PREFIX), name))
        except ZkDataError:
            log.debug("ignoring %s/%s: not a config change notification", CONFIG_CHANGES_PATH, name)
    return sorted(out)
