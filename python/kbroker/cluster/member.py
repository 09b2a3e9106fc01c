"""`ClusterMember`: a broker's part in a ZooKeeper cluster (``zookeeper.connect`` set).

What a broker does in a cluster beyond serving its partitions, in Kafka
3.9's ZooKeeper layout (`kbroker.cluster.zk_data`):

- At start, `connect`: the session (the chroot created when missing), the
  persistent paths, the cluster id (``/cluster/id``, made by the first
  broker), checked against the data directory's ``meta.properties``.
- Once its listener is up, `join`: the ephemeral ``/brokers/ids/<id>``
  (re-registered after a session expiry) and a place in the controller
  election (`ControllerElector`): the broker that wins runs the `Controller`.
- Topic administration for any client: a new topic is its assignment
  znode (and config znode) written for the controller to pick up; a
  deletion is a node under ``/admin/delete_topics``; new partitions extend
  the assignment. Each answer waits (up to the request's timeout) until
  this broker's metadata, which the controller's UpdateMetadata keeps,
  shows the change done.
- The dynamic configs of topics and brokers, read from ``/config/topics`` and
  ``/config/brokers`` before a partition's log is opened and followed after,
  and producer ids in blocks reserved in ZooKeeper.
- With an authorizer, the ACLs: loaded at `connect` (before the listener
  serves), kept up to date from Kafka's change notifications, and written
  through ZooKeeper by whichever broker takes CreateAcls or DeleteAcls.
- Users' and clients' configs (SCRAM credentials, quotas): all of them at
  `connect`, then each change announced, to ``on_quota_entity_configs``;
  groups' own configs (/config/groups) the same way, to ``on_group_configs``.
- The finalized features (``/feature``, `kbroker.cluster.features`): read at
  `connect` (a broker that cannot serve them does not start) and followed;
  the registration names the levels this broker supports.
- Handing leadership off: before it stops, `controlled_shutdown` asks the
  controller to move its partitions' leadership to other in-sync replicas;
  when its data directory fails, `storage_failed` does the same while the
  process goes on, and the broker registers again once it can write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.cluster import zk_data as zd
from kbroker.cluster.acls import AclChangeWatcher
from kbroker.cluster.configs import (
    ConfigChangeWatcher,
    GroupCallback,
    QuotaEntityCallback,
    read_topic_configs,
    set_broker_configs,
    set_group_configs,
    set_topic_configs,
)
from kbroker.cluster.controller_election import ControllerEpoch
from kbroker.cluster.errors import (
    ClusterError,
    ZkBadVersionError,
    ZkDataError,
    ZkError,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from kbroker.cluster.features import FeatureWatcher
from kbroker.cluster.producer_id_blocks import ZkProducerIdAllocator
from kbroker.cluster.registration import (
    BrokerRegistrar,
    ensure_persistent_paths,
    get_or_create_cluster_id,
)
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.config import BrokerConfig
from kbroker.controller.assignment import (
    AssignmentError,
    BrokerPlacement,
    assign_replicas,
    continue_assignment,
)
from kbroker.controller.controller import Controller, ControllerSettings
from kbroker.controller.elector import ControllerElector
from kbroker.errors import ErrorCode, TopicError
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.features import SUPPORTED, Features
from kbroker.metadata.model import TopicMetadata
from kbroker.metadata.store import load_meta_properties
from kbroker.metadata.topics import NewTopic
from kbroker.network.client import BrokerConnection, BrokerUnreachable
from kbroker.protocol import ApiKey
from kbroker.protocol.messages.inter_broker import ControlledShutdownRequest
from kbroker.security.authorizer import AclAuthorizer

log = logging.getLogger(__name__)

# What Kafka 3.9 brokers send (v3: the broker epoch, flexible versions).
CONTROLLED_SHUTDOWN_VERSION = 3
# How often a broker whose data directory failed checks whether it can write again.
STORAGE_PROBE_INTERVAL_S = 2.0
# What it must be able to write (and fsync), and the free space it must see, to rejoin:
# enough that the first appends do not fill the disk again at once.
PROBE_BYTES = 1 << 20
REJOIN_FREE_BYTES = 64 << 20


@dataclass(frozen=True)
class MemberSettings:
    broker_id: int
    data_dir: Path
    zk: ZkSettings
    rack: str | None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> MemberSettings:
        connect = config.get_str("zookeeper.connect")
        zk = ZkSettings.parse(
            connect,
            session_timeout_ms=config.get_int("zookeeper.session.timeout.ms"),
            connection_timeout_ms=config.get_optional_int("zookeeper.connection.timeout.ms"),
        )
        return cls(
            broker_id=config.get_int("broker.id"),
            data_dir=Path(config.get_str("log.dirs")),
            zk=zk,
            rack=config.get_optional_str("broker.rack"),
        )


class _Waiter:
    """A client request waiting until the metadata shows ``done()``."""

    def __init__(self, done: Callable[[], bool]) -> None:
        self.done = done
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class ClusterMember:
    def __init__(
        self,
        settings: MemberSettings,
        cache: MetadataCache,
        *,
        on_topic_configs: Callable[[str, dict[str, str]], None],
        on_broker_configs: Callable[[int | None, dict[str, str]], None],
        authorizer: AclAuthorizer | None = None,
        on_quota_entity_configs: QuotaEntityCallback | None = None,
        on_group_configs: GroupCallback | None = None,
        allow_unclean: Callable[[str], bool] = lambda _topic: False,
        controller_settings: ControllerSettings | None = None,
        features: Features | None = None,
    ) -> None:
        self.settings = settings
        self.controller_settings = controller_settings or ControllerSettings()
        self.broker_id = settings.broker_id
        self.cache = cache
        self.zk = ZkClient(settings.zk)
        self.producer_ids = ZkProducerIdAllocator(self.zk, settings.broker_id)
        self.allow_unclean = allow_unclean
        self.configs = ConfigChangeWatcher(
            self.zk,
            on_topic_configs,
            on_broker_configs,
            on_quota_entity=on_quota_entity_configs,
            on_group=on_group_configs,
        )
        # The ACLs, loaded and kept up to date from ZooKeeper, when there is an authorizer.
        self.acls = None if authorizer is None else AclChangeWatcher(self.zk, authorizer)
        # The finalized features, kept at what /feature says.
        self.features = Features() if features is None else features
        self._feature_watcher = FeatureWatcher(self.zk, self.features)
        # Config changes made here, being written to ZooKeeper.
        self._config_writes: list[asyncio.Future[object]] = []
        self.registrar: BrokerRegistrar | None = None
        self.elector: ControllerElector | None = None
        self._waiters: list[_Waiter] = []
        self._background: set[asyncio.Task[object]] = set()
        # Topics whose creation this broker started for a client that cannot wait
        # (auto-creation): not started twice.
        self._auto_creating: set[str] = set()
        # The data directory stopped taking writes (a full disk): this broker has handed
        # leadership to other replicas and waits until it can write again.
        self.storage_offline = False
        self._stepping_down = False

    # -- life --------------------------------------------------------------------------

    async def connect(self) -> str:
        """Opens the session and returns the cluster id (checked against meta.properties).

        Raises ClusterError (ZooKeeper unreachable, foreign data) or StateFileError
        (the data directory belongs to another cluster or broker).
        """
        await self.zk.start()
        try:
            await ensure_persistent_paths(self.zk)
            cluster_id = await get_or_create_cluster_id(self.zk)
            load_meta_properties(self.settings.data_dir, self.broker_id, cluster_id)
            # Every topic's and broker's configs now, before a log opens; changes later.
            await self.configs.start(report_existing=True)
            # Every ACL before the listener serves a request.
            if self.acls is not None:
                await self.acls.start()
            await self._feature_watcher.start()
        except BaseException:
            self._feature_watcher.stop()
            if self.acls is not None:
                await self.acls.stop()
            await self.configs.stop()
            await self.zk.stop()
            raise
        self.cache.cluster_id = cluster_id
        log.info(
            "broker %d joins cluster %s at ZooKeeper %s",
            self.broker_id,
            cluster_id,
            self.settings.zk.connect,
        )
        return cluster_id

    async def join(self, endpoints: Iterable[zd.EndPoint]) -> None:
        """Registers this broker (reached at ``endpoints``, one per listener) and enters the
        controller election."""
        registration = zd.BrokerRegistration(
            self.broker_id,
            tuple(endpoints),
            rack=self.settings.rack,
            features=tuple(
                zd.SupportedFeature(name, lo, hi) for name, (lo, hi) in sorted(SUPPORTED.items())
            ),
        )
        self.registrar = BrokerRegistrar(self.zk, registration, on_failed=self._registration_failed)
        await self.registrar.register()
        self.elector = ControllerElector(self.zk, self.broker_id, self._make_controller)
        await self.elector.start()

    def _make_controller(self, epoch: ControllerEpoch) -> Controller:
        return Controller(
            self.zk,
            self.broker_id,
            epoch,
            allow_unclean=self.allow_unclean,
            settings=self.controller_settings,
        )

    @property
    def controller(self) -> Controller | None:
        """The controller, when this broker is it."""
        return None if self.elector is None else self.elector.controller

    def _registration_failed(self, exc: Exception) -> None:
        log.error(
            "broker %d is no longer registered in ZooKeeper (%s): the cluster sees it as "
            "dead until it is restarted",
            self.broker_id,
            exc,
        )

    @property
    def broker_epoch(self) -> int | None:
        return None if self.registrar is None else self.registrar.broker_epoch

    @property
    def registered(self) -> bool:
        return self.broker_epoch is not None

    async def controlled_shutdown(self, config: BrokerConfig) -> None:
        """Asks the controller to move leadership off this broker before it stops (Kafka's
        controlled shutdown): partitions with another in-sync replica get a new leader
        while this broker still answers, so clients see only retriable errors. The
        partitions it keeps (no other replica) are logged; after
        ``controlled.shutdown.max.retries`` failed attempts the broker stops anyway."""
        if not config.get_bool("controlled.shutdown.enable"):
            return
        if not await self._hand_off_leadership(config, "shutdown"):
            log.warning("broker %d stops without a controlled shutdown", self.broker_id)

    async def _hand_off_leadership(self, config: BrokerConfig, why: str) -> bool:
        """Sends ControlledShutdown to the controller (``controlled.shutdown.max.retries``
        retries); whether the controller took it. The controller then keeps this broker
        out of elections and ISRs until it registers again."""
        if self.broker_epoch is None:
            return False
        attempts = config.get_int("controlled.shutdown.max.retries") + 1
        backoff_s = config.get_int("controlled.shutdown.retry.backoff.ms") / 1000
        request = ControlledShutdownRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch
        )
        for attempt in range(1, attempts + 1):
            controller = self.cache.broker(self.cache.controller_id)
            link = self.controller_settings.inter_broker
            address = None if controller is None else controller.address(link.listener)
            failure = "no controller is known"
            if address is not None:
                conn = BrokerConnection(
                    *address, f"broker-{self.broker_id}-shutdown", security=link.security
                )
                try:
                    response = await conn.request(
                        ApiKey.CONTROLLED_SHUTDOWN,
                        CONTROLLED_SHUTDOWN_VERSION,
                        request,
                        self.settings.zk.request_timeout_s + 30,
                    )
                except BrokerUnreachable as exc:
                    failure = str(exc)
                else:
                    if response.error_code == ErrorCode.NONE:
                        kept = [
                            f"{p.topic_name}-{p.partition_index}"
                            for p in response.remaining_partitions
                        ]
                        log.info(
                            "controlled %s of broker %d done%s",
                            why,
                            self.broker_id,
                            f"; it still leads {len(kept)} partition(s) with no other "
                            f"in-sync replica ({', '.join(kept[:5])}"
                            f"{', ...' if len(kept) > 5 else ''})"
                            if kept
                            else "",
                        )
                        return True
                    failure = f"the controller answered {ErrorCode(response.error_code).name}"
                finally:
                    await conn.close()
            log.warning(
                "controlled %s of broker %d, attempt %d of %d: %s",
                why,
                self.broker_id,
                attempt,
                attempts,
                failure,
            )
            if attempt < attempts:
                await asyncio.sleep(backoff_s)
        return False

    def storage_failed(self, config: BrokerConfig) -> None:
        """A write to the data directory failed (a full disk, a failing device). As Kafka
        takes a failed log directory offline, this broker hands leadership of its
        partitions to other in-sync replicas (a controlled shutdown, the process going
        on); unlike Kafka, which then needs a restart, it registers again once it can
        write (``writable``), and follows and leads again. Partitions with no other
        in-sync replica keep their leader here, without writes, until then."""
        if self._stepping_down or self.registrar is None:
            return
        self._stepping_down = True
        self._spawn(self._step_down_until_writable(config))

    async def _step_down_until_writable(self, config: BrokerConfig) -> None:
        data_dir = self.settings.data_dir
        try:
            log.error(
                "broker %d cannot write to its log directory %s: it hands leadership to "
                "the other in-sync replicas and takes no part in replication until it can "
                "write again (checked every %.0f s)",
                self.broker_id,
                data_dir,
                STORAGE_PROBE_INTERVAL_S,
            )
            self.storage_offline = True
            await self._hand_off_leadership(config, "step-down")
            while not await asyncio.to_thread(writable, data_dir):
                await asyncio.sleep(STORAGE_PROBE_INTERVAL_S)
            await self._register_again()
            self.storage_offline = False
            log.info(
                "broker %d can write to %s again: registered again (broker epoch %s), it "
                "follows its partitions' leaders and may lead again",
                self.broker_id,
                data_dir,
                self.broker_epoch,
            )
        finally:
            self._stepping_down = False

    async def _register_again(self) -> None:
        """A new registration (a new broker epoch): the controller treats this broker as
        one that started, forgets its controlled shutdown and sends it its partitions."""
        assert self.registrar is not None
        while True:
            try:
                await self.registrar.deregister()
                await self.registrar.register()
                return
            except ClusterError as exc:
                log.warning("broker %d could not register again: %s", self.broker_id, exc)
                await asyncio.sleep(STORAGE_PROBE_INTERVAL_S)

    async def leave(self) -> None:
        """Leaves the election and the registry, then closes the session."""
        for task in list(self._background):
            task.cancel()
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.cancel()
        self._waiters.clear()
        await self.configs.stop()
        if self.acls is not None:
            await self.acls.stop()
        self._feature_watcher.stop()
        if self.elector is not None:
            with contextlib.suppress(ClusterError):
                await self.elector.stop()
        if self.registrar is not None:
            with contextlib.suppress(ClusterError):
                await self.registrar.deregister()
        await self.zk.stop()

    # -- metadata from the controller ------------------------------------------------------

    def metadata_changed(self) -> None:
        """The controller's UpdateMetadata was applied: answer requests it completes."""
        still: list[_Waiter] = []
        for waiter in self._waiters:
            if waiter.future.done():
                continue
            if waiter.done():
                waiter.future.set_result(None)
            else:
                still.append(waiter)
        self._waiters = still

    async def _wait_until(self, done: Callable[[], bool], timeout_ms: int) -> bool:
        """True once ``done()`` holds (checked after each metadata update); False at the
        timeout."""
        if done():
            return True
        if timeout_ms <= 0:
            return False
        waiter = _Waiter(done)
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout_ms / 1000)
            return True
        except TimeoutError:
            return False
        finally:
            if not waiter.future.done():
                waiter.future.cancel()

    def _has_leaders(self, name: str, topic_id: uuid.UUID, partitions: Iterable[int]) -> bool:
        topic = self.cache.topic(name)
        if topic is None or topic.topic_id != topic_id:
            return False
        states = topic.partitions
        return all(p in states and states[p].leader >= 0 for p in partitions)

    # -- topic configs -----------------------------------------------------------------------

    async def read_topic_configs(self, name: str) -> dict[str, str]:
        """The overrides stored for ``name`` (none when its config znode is missing or
        unreadable: logged)."""
        try:
            return await read_topic_configs(self.zk, name)
        except ZkDataError as exc:
            log.error("ignoring the configs of topic %s: %s", name, exc)
            return {}

    def record_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Writes a topic's overrides to ZooKeeper (every broker hears of them) in the
        background; `config_writes_done` waits for it."""
        self._record(set_topic_configs(self.zk, name, dict(configs)))

    def record_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None:
        """Writes a broker's dynamic settings (None: the cluster default) to ZooKeeper."""
        self._record(set_broker_configs(self.zk, broker_id, dict(configs)))

    def record_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Writes a group's configs to ZooKeeper (/config/groups/<group id>) and announces
        them to every broker, in the background (`config_writes_done`)."""
        self._record(set_group_configs(self.zk, group_id, dict(configs)))

    def _record(self, write: Coroutine[Any, Any, object]) -> None:
        # One after the other: the last change made is the last written.
        previous = self._config_writes[-1] if self._config_writes else None

        async def in_order() -> object:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            return await write

        self._config_writes.append(asyncio.ensure_future(in_order()))

    async def config_writes_done(self) -> None:
        """Once every config change made so far is in ZooKeeper; raises the ZkError of one
        that could not be written."""
        writes, self._config_writes = self._config_writes, []
        failed: BaseException | None = None
        for write in writes:
            try:
                await write
            except ZkError as exc:
                failed = exc
        if failed is not None:
            raise failed

    # -- topic administration ------------------------------------------------------------------

    def placement(self) -> list[BrokerPlacement]:
        return [BrokerPlacement(b.broker_id, b.rack) for b in self.cache.alive_brokers()]

    def check_replication_factor(self, replication_factor: int) -> None:
        alive = len(self.cache.alive_brokers())
        if replication_factor > alive:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: {alive}.",
            )

    def check_replicas(self, replicas: Iterable[int]) -> None:
        alive = {b.broker_id for b in self.cache.alive_brokers()}
        for b in replicas:
            if b not in alive:
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"the replica assignment includes broker {b}, but no such broker is registered",
                )

    def _assign(self, new: NewTopic) -> dict[int, list[int]]:
        if new.assignment is not None:
            return {p: list(r) for p, r in new.assignment.items()}
        try:
            return assign_replicas(self.placement(), new.num_partitions, new.replication_factor)
        except AssignmentError as exc:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None

    async def create_topics(
        self, new: list[NewTopic], timeout_ms: int
    ) -> dict[str, TopicMetadata | TopicError]:
        """Writes each topic for the controller, then waits (up to ``timeout_ms``) until
        every partition has a leader. A topic that timed out is still created, later."""
        results: dict[str, TopicMetadata | TopicError] = {}
        written: list[tuple[NewTopic, uuid.UUID]] = []
        for t in new:
            try:
                written.append((t, await self._write_topic(t)))
            except TopicError as exc:
                results[t.name] = exc
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        for t, topic_id in written:
            left_ms = int((deadline - asyncio.get_running_loop().time()) * 1000)

            def done(
                name: str = t.name, topic_id: uuid.UUID = topic_id, count: int = t.num_partitions
            ) -> bool:
                return self._has_leaders(name, topic_id, range(count))

            if await self._wait_until(done, max(left_ms, 1) if timeout_ms > 0 else 0):
                topic = self.cache.topic(t.name)
                assert topic is not None
                results[t.name] = topic
            elif timeout_ms <= 0:
                results[t.name] = TopicMetadata(t.name, topic_id, {}, internal=t.internal)
            else:
                results[t.name] = TopicError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"topic {t.name!r} is created, but its partitions had no leader within "
                    f"{timeout_ms} ms",
                )
        return results

    async def _write_topic(self, t: NewTopic) -> uuid.UUID:
        if await self.zk.exists(zd.delete_topic_path(t.name)) is not None:
            raise TopicError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} is marked for deletion"
            )
        assignment = self._assign(t)
        topic_id = uuid.uuid4()
        stored = {k: v for k, v in t.configs.items() if v is not None}
        try:
            # The configs first, as Kafka does: a broker opening the log reads them.
            await set_topic_configs(self.zk, t.name, stored, notify=False)
            await self.zk.create(
                zd.topic_path(t.name),
                zd.encode_topic_assignment(zd.TopicAssignment.of(assignment, topic_id)),
                makepath=True,
            )
        except ZkNodeExistsError:
            raise TopicError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
            ) from None
        except ZkError as exc:
            raise TopicError(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot record topic {t.name!r}: {exc}"
            ) from None
        log.info("wrote topic %s (id %s) for the controller: %s", t.name, topic_id, assignment)
        return topic_id

    def create_in_background(self, t: NewTopic) -> None:
        """Starts creating ``t`` for a request that does not wait (auto-creation)."""
        if t.name in self._auto_creating:
            return
        self._auto_creating.add(t.name)

        async def create() -> None:
            try:
                result = (await self.create_topics([t], 0))[t.name]
                if isinstance(result, TopicError) and result.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.warning("cannot create topic %s: %s", t.name, result)
            finally:
                self._auto_creating.discard(t.name)

        self._spawn(create())

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def delete_topics(
        self, topics: Mapping[str, uuid.UUID], timeout_ms: int
    ) -> dict[str, TopicError | None]:
        """Marks each topic (name -> id) for deletion and waits until the controller took
        it out of the metadata, up to ``timeout_ms``."""
        results: dict[str, TopicError | None] = {}
        marked: dict[str, uuid.UUID] = {}
        for name, topic_id in topics.items():
            try:
                await self.zk.create(zd.delete_topic_path(name), b"", makepath=True)
            except ZkNodeExistsError:
                pass  # already being deleted: wait with the others
            except ZkError as exc:
                results[name] = TopicError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot mark {name!r} for deletion: {exc}"
                )
                continue
            marked[name] = topic_id
        for name, topic_id in marked.items():

            def gone(name: str = name, topic_id: uuid.UUID = topic_id) -> bool:
                topic = self.cache.topic(name)
                return topic is None or topic.topic_id != topic_id

            if await self._wait_until(gone, timeout_ms) or timeout_ms <= 0:
                results[name] = None
            else:
                results[name] = TopicError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"topic {name!r} is marked for deletion, but was not deleted within "
                    f"{timeout_ms} ms",
                )
        return results

    async def add_partitions(
        self,
        name: str,
        total: int,
        assignment: list[list[int]] | None,
        timeout_ms: int,
    ) -> None:
        """Extends the topic's assignment to ``total`` partitions (conditionally on the
        znode's version) and waits until the new partitions have leaders."""
        path = zd.topic_path(name)
        try:
            data, stat = await self.zk.get(path)
            current = zd.decode_topic_assignment(data)
        except ZkNoNodeError:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
            ) from None
        except (ZkDataError, ZkError) as exc:
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"topic {name!r}: {exc}") from None
        moving = [
            a.partition for a in current.partitions if a.adding_replicas or a.removing_replicas
        ]
        if moving:
            raise TopicError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS,
                f"topic {name!r} has partitions being reassigned ({moving}); add partitions "
                "once the reassignment is done",
            )
        existing = current.replicas()
        if total <= len(existing):
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {len(existing)} partitions; the new count must be larger, "
                f"not {total}",
            )
        if assignment is not None:
            added = {len(existing) + i: list(r) for i, r in enumerate(assignment)}
        else:
            try:
                added = continue_assignment(self.placement(), existing, total - len(existing))
            except AssignmentError as exc:
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
        updated = zd.TopicAssignment.of({**existing, **added}, current.topic_id)
        try:
            await self.zk.set(path, zd.encode_topic_assignment(updated), stat.version)
        except ZkBadVersionError:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, f"topic {name!r} changed while partitions were added"
            ) from None
        except ZkError as exc:
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"topic {name!r}: {exc}") from None
        log.info("added partitions %s to topic %s", sorted(added), name)
        topic_id = current.topic_id
        if topic_id is None:
            return

        def done() -> bool:
            assert topic_id is not None
            return self._has_leaders(name, topic_id, added)

        if not await self._wait_until(done, timeout_ms) and timeout_ms > 0:
            raise TopicError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the new partitions of {name!r} had no leader within {timeout_ms} ms",
            )


def writable(data_dir: Path) -> bool:
    """Whether ``data_dir`` takes writes again: PROBE_BYTES written and fsync'ed, and
    REJOIN_FREE_BYTES (or 5% of a smaller file system) free for everyone after that."""
    probe = data_dir / ".kbroker-write-probe"
    try:
        usage = shutil.disk_usage(data_dir)
        if usage.free < min(REJOIN_FREE_BYTES, usage.total // 20) + PROBE_BYTES:
            return False
        with open(probe, "wb") as f:
            f.write(bytes(PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
