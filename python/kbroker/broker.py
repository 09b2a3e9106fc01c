"""The broker: wires config, metadata, logs, partitions and the network together.

`Broker` owns the start and stop of one broker, its listeners and their
security, the topic-level operations (create, delete, add partitions,
configs) and the dynamic configs of brokers, groups, users and clients (a
changed keystore loaded again); in a cluster it holds its `ClusterMember`.
The partitions it serves belong to its `ReplicaManager`, which every read and
write goes through. Request handlers (`kbroker.handlers`) call into both.
`kbroker.daemon.run_broker` runs it (``kbroker serve``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import ssl
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from kbroker.cluster import zk_data as zd
from kbroker.cluster.entity_configs import ZkEntityConfigStore
from kbroker.cluster.errors import ZkDataError
from kbroker.cluster.member import ClusterMember, MemberSettings
from kbroker.config import (
    TOPIC_SETTINGS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    TopicConfig,
    Value,
    broker_setting,
    is_tls_setting,
    parse_stored_topic_configs,
    parse_topic_configs,
)
from kbroker.controller.controller import ControllerSettings
from kbroker.coordinator import GroupCoordinator
from kbroker.coordinator.group_configs import GroupConfigs
from kbroker.errors import ErrorCode, TopicError
from kbroker.heap import LongLivedObjects
from kbroker.log import LogConfig, LogManager, TopicPartition, log_config_from_topic
from kbroker.log.cleaner import CleanerSettings, LogCleaner
from kbroker.log.log import Log, illegal_topic_name
from kbroker.log.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)
from kbroker.metadata.acls import LocalAclStorage
from kbroker.metadata.cache import BrokerInfo, ControllerPartitionState, MetadataCache
from kbroker.metadata.features import Features, LocalFeatureStore
from kbroker.metadata.model import TopicMetadata
from kbroker.metadata.store import (
    LocalMetadataStore,
    MetadataError,
    MetadataStore,
    StateFileError,
)
from kbroker.metadata.topics import (
    INTERNAL_TOPICS,
    MAX_PARTITIONS_PER_TOPIC,
    NewTopic,
    collision_key,
)
from kbroker.metrics.core import BrokerMetrics
from kbroker.network.server import Dispatch, Server, ServerLimits
from kbroker.quota.entity import DEFAULT, QuotaEntity, desanitize
from kbroker.quota.manager import QuotaManagers
from kbroker.quota.store import EntityConfigStore, LocalEntityConfigStore
from kbroker.replication.alter_partition import IsrChannel
from kbroker.replication.fetcher import FetcherSettings, ReplicaFetcherManager
from kbroker.replication.partition import Partition
from kbroker.replication.producer_state import expire_producers_periodically
from kbroker.replication.replica_manager import ReplicaManager
from kbroker.security import tls
from kbroker.security.authenticator import ListenerSecurity
from kbroker.security.authorizer import AclAuthorizer
from kbroker.security.client import ClientSecurity, InterBrokerLink
from kbroker.security.credentials import CredentialCache
from kbroker.security.listeners import Listener, ListenerSet
from kbroker.txn import TransactionCoordinator
from kbroker.txn.marker_writer import BrokerMarkerWriter
from kbroker.txn.peers import PeerConnections
from kbroker.txn.producer_ids import ProducerIdAllocator, ProducerIds
from kbroker.txn.verifier import CoordinatorVerifier

log = logging.getLogger("kbroker")

T = TypeVar("T")


# Partitions whose logs one call into the storage core makes (at least one request's):
# requests of a burst wait for their batch, then go on together.
LOG_BATCH_PARTITIONS = 256
# Requests resumed together once their batch's logs are made, between the loop's other work.
RESUME_EVERY = 8

# New topics' ids and logs by name, or the error that refused each.
OpenedLogs = dict[str, tuple[uuid.UUID, list[Log]] | TopicError]
# Topics waiting for their logs, and the answer they wait on.
QueuedCreation = tuple[list[NewTopic], asyncio.Future[OpenedLogs]]


class Broker:
    def __init__(self, config: BrokerConfig, metrics: BrokerMetrics | None = None) -> None:
        self.config = config
        # What the broker counts as it works (kbroker.metrics), when metrics are on.
        self.metrics = metrics
        self.broker_id: int = config.get_int("broker.id")
        self.data_dir = Path(config.get_str("log.dirs"))
        # Where it listens and what it advertises, per listener (ports made real at start).
        self.listeners = ListenerSet.from_config(config)
        # Users' SCRAM credentials, which SASL listeners check against.
        self.credentials = CredentialCache()
        # How each listener secures its connections (TLS contexts loaded here: a keystore
        # that cannot be read stops the start).
        self.listener_security = {
            lst.name: ListenerSecurity.from_config(config, lst, self.credentials)
            for lst in self.listeners.listeners
        }
        # How this broker reaches the others (a cluster's inter-broker listener).
        inter_broker = self.listeners.advertised[self.listeners.inter_broker]
        self.inter_broker = InterBrokerLink(
            inter_broker.name,
            ClientSecurity.for_inter_broker(config, inter_broker.name, inter_broker.protocol)
            if config.get_optional_str("zookeeper.connect")
            else ClientSecurity(),
        )
        # What handlers read; the metadata store (the backend) feeds it.
        self.metadata_cache = MetadataCache()
        self.metadata: MetadataStore
        self.logs: LogManager
        self.replica_manager: ReplicaManager
        self.servers: dict[str, Server] = {}
        self.producer_ids: ProducerIds
        # Every group's own configs (the GROUP config resource), which the coordinator reads.
        self.group_configs = GroupConfigs(config)
        self.coordinator = GroupCoordinator(self)
        # The transaction coordinator, and its connections to the other brokers (markers,
        # and the partitions' KIP-890 verification).
        self.txn_peers = PeerConnections(self.broker_id, self.metadata_cache, self.inter_broker)
        self.txn_coordinator = TransactionCoordinator(
            self, BrokerMarkerWriter(self, self.txn_peers)
        )
        # The ACL authorizer (authorizer.class.name), or None: nothing is checked.
        self.authorizer = AclAuthorizer.from_config(config)
        # The client quotas, fed (as `credentials`) from users' and clients' configs
        # (`on_quota_entity_configs`), which `entity_configs` keeps.
        self.quotas = QuotaManagers(
            config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds")
        )
        self.entity_configs: EntityConfigStore
        # Filled by the Dispatcher: the APIs ApiVersions advertises.
        self.handled_api_keys: frozenset[int] = frozenset()
        self._topic_configs: dict[str, dict[str, Value]] = {}
        # topic -> (broker config generation, its overrides, effective config)
        self._effective: dict[str, tuple[int, dict[str, Value], TopicConfig]] = {}
        self._background: list[asyncio.Task[None]] = []
        # Topics whose logs are being created, and their partitions (not yet in the
        # replica manager).
        self._creating: set[str] = set()
        # Creations waiting for their logs, and the task making them (`_open_new_topic_logs`).
        self._logs_to_open: list[QueuedCreation] = []
        self._opening_logs: asyncio.Future[None] | None = None
        self._reserved_partitions = 0
        self._admin_thread = ThreadPoolExecutor(1, thread_name_prefix="topic-admin")
        # The objects of every topic: the garbage collector skips them once made.
        self.long_lived = LongLivedObjects()
        # collision_key(name) -> name, of every topic
        self._collisions: dict[str, str] = {}
        # Set once the logs are open.
        self._storage_open = False
        # Cluster mode: dynamic broker settings, the cluster default's (True) and this
        # broker's own (False, over the default).
        self._dynamic_layers: dict[bool, dict[str, str]] = {True: {}, False: {}}
        # Finalized feature levels (KIP-584); a single node keeps them in its metadata store.
        self.features = Features()
        self.feature_store: LocalFeatureStore | None = None
        # A broker of a ZooKeeper cluster (zookeeper.connect), or None for a single node.
        self.cluster: ClusterMember | None = None
        if config.get_optional_str("zookeeper.connect"):
            self.cluster = ClusterMember(
                MemberSettings.from_config(config),
                self.metadata_cache,
                on_topic_configs=self.on_topic_configs,
                on_broker_configs=self.on_broker_configs,
                authorizer=self.authorizer,
                on_quota_entity_configs=self.on_quota_entity_configs,
                on_group_configs=self.group_configs.update,
                allow_unclean=lambda topic: bool(
                    self.topic_config(topic)["unclean.leader.election.enable"]
                ),
                controller_settings=ControllerSettings(
                    auto_leader_rebalance=config.get_bool("auto.leader.rebalance.enable"),
                    leader_imbalance_check_interval_s=config.get_int(
                        "leader.imbalance.check.interval.seconds"
                    ),
                    leader_imbalance_per_broker_percentage=config.get_int(
                        "leader.imbalance.per.broker.percentage"
                    ),
                    inter_broker=self.inter_broker,
                ),
                features=self.features,
            )

    # -- start and stop ------------------------------------------------------

    def open_storage(self) -> None:
        """Loads metadata and opens (recovering) every partition log."""
        store = LocalMetadataStore(self.data_dir, self.broker_id, self.metadata_cache)
        store.load()
        self.metadata = store
        self.feature_store = LocalFeatureStore(store, self.features)
        self.feature_store.load()
        if self.authorizer is not None:
            acls = LocalAclStorage(store)
            self.authorizer.replace_all(acls.read_all())
            self.authorizer.storage = acls
        self.producer_ids = ProducerIdAllocator(store)
        entity_configs = LocalEntityConfigStore(store, self.on_quota_entity_configs)
        for entity, configs in entity_configs.load().items():
            self.on_quota_entity_configs(entity, configs)
        self.entity_configs = entity_configs
        self._load_group_configs(store)
        stored = store.broker_configs()
        for name, text in stored.items():
            try:
                self.config.set(name, text)
            except ConfigError as exc:
                log.warning("ignoring stored broker setting %s: %s", name, exc)
        if any(is_tls_setting(n) for n in stored):
            self._reload_keystores()
        for topic in store.topics().values():
            self._topic_configs[topic.name] = parse_stored_topic_configs(topic.name, topic.configs)
        self._open_logs()
        self._reconcile_logs(store.loaded_existing)
        for topic in store.topics().values():
            self._collisions[collision_key(topic.name)] = topic.name
            self._open_partitions(topic)

    def _load_group_configs(self, store: LocalMetadataStore) -> None:
        prefix = f"{zd.CONFIG_PATH}/{zd.GROUPS_CONFIG_TYPE}/"
        for path, data in store.entries(prefix).items():
            try:
                group_id = desanitize(path[len(prefix) :])
                configs = zd.decode_entity_config(json.dumps(data).encode()).as_dict()
            except (ValueError, ZkDataError) as exc:
                log.warning("skipping the stored group configs at %s: %s", path, exc)
                continue
            self.group_configs.update(group_id, configs)

    def _reconcile_logs(self, had_metadata: bool) -> None:
        """Matches the partition directories on disk with the metadata.

        A directory is removed only when its ``partition.metadata`` names a
        topic that was deleted. A directory the metadata does not know is
        adopted, never deleted: its topic is rebuilt from the directories
        (its id from ``partition.metadata``, its partition count from the
        directories, its configs the broker defaults), with a warning.
        """
        store = self.metadata
        deleted = store.deleted_topic_ids()
        unknown: dict[str, dict[int, uuid.UUID | None]] = {}
        for tp, lg in sorted(self.logs.partitions().items()):
            try:
                dir_id = read_partition_metadata(lg.dir)
            except PartitionMetadataError as exc:
                log.warning("%s: it is written anew", exc)
                (lg.dir / PARTITION_METADATA_FILE).unlink()
                dir_id = None
            topic = store.topics().get(tp.topic)
            if (
                dir_id is not None
                and dir_id in deleted
                and (topic is None or topic.topic_id != dir_id)
            ):
                log.info(
                    "removing %s: topic %s (id %s) was deleted", lg.dir, deleted[dir_id], dir_id
                )
                self.logs.delete(tp)
                continue
            if topic is None:
                unknown.setdefault(tp.topic, {})[tp.partition] = dir_id
                continue
            if dir_id is not None and dir_id != topic.topic_id:
                raise StateFileError(
                    lg.dir / PARTITION_METADATA_FILE,
                    f"the directory belongs to topic id {dir_id}, but topic {tp.topic!r} has id "
                    f"{topic.topic_id}",
                    "move the directory out of the data directory (to keep its data aside) "
                    "and start again",
                )
            if tp.partition not in topic.partitions:
                missing = range(len(topic.partitions), tp.partition + 1)
                log.warning(
                    "adopting %s: the metadata did not record partition(s) %s of topic %s",
                    lg.dir,
                    ",".join(map(str, missing)),
                    tp.topic,
                )
                rf = len(next(iter(topic.partitions.values())).replicas)
                store.add_partitions(tp.topic, {p: [self.broker_id] * rf for p in missing})
        for name, found in unknown.items():
            self._adopt_topic(name, found, had_metadata)
        for topic_id in list(deleted):
            store.forget_deleted(topic_id)

    def _adopt_topic(
        self, name: str, found: Mapping[int, uuid.UUID | None], had_metadata: bool
    ) -> None:
        ids = {i for i in found.values() if i is not None}
        if len(ids) > 1:
            raise StateFileError(
                self.data_dir / f"{name}-*",
                f"the directories of topic {name!r} belong to different topic ids "
                f"({', '.join(sorted(map(str, ids)))})",
                "move the directories of the topic you do not want out of the data directory",
            )
        topic_id = ids.pop() if ids else uuid.uuid4()
        internal = name in INTERNAL_TOPICS
        configs = (
            {
                **self.coordinator.internal_topic_configs(name),
                **self.txn_coordinator.internal_topic_configs(name),
            }
            if internal
            else {}
        )
        count = max(found) + 1
        self.metadata.create_topic(
            name,
            {p: [self.broker_id] for p in range(count)},
            configs,
            internal=internal,
            topic_id=topic_id,
        )
        self._topic_configs[name] = parse_topic_configs(configs)
        log.warning(
            "rebuilt topic %s (id %s, %d partitions) from its directories: %s",
            name,
            topic_id,
            count,
            "the metadata did not record it" if had_metadata else "the metadata files were missing",
        )

    def _open_logs(self) -> None:
        """Opens (recovering) every partition log and the replica manager over them."""
        self.logs = LogManager(
            self.data_dir,
            self.log_config_for,
            max_open_files=self.config.get_optional_int("log.max.open.files"),
            io_threads=self.config.get_int("num.io.threads"),
        )
        self.logs.open()
        self._storage_open = True
        if self.metrics is not None:
            self.logs.flush_observer = self.metrics.flushed
        # Retention never deletes above a partition's high watermark.
        self.logs.retention_bound = self._high_watermark
        self.replica_manager = ReplicaManager(
            self.broker_id, self.logs, self.topic_config, metrics=self.metrics
        )
        self.replica_manager.add_listener(self.coordinator.on_leadership_change)
        self.replica_manager.add_listener(self.txn_coordinator.on_leadership_change)
        # Markers on __consumer_offsets end the transactional offset commits they hold.
        self.replica_manager.add_marker_listener(self.coordinator.on_txn_marker)
        # KIP-890: a partition asks the transaction coordinator before it opens a
        # producer's transaction there.
        self.replica_manager.set_txn_verifier(
            CoordinatorVerifier(self, self.txn_coordinator, self.txn_peers),
            lambda: self.config.get_bool("transaction.partition.verification.enable"),
        )

    def open_cluster_storage(self) -> None:
        """Opens (recovering) every partition log of a cluster member.

        The logs are served once the controller names this broker a replica
        (LeaderAndIsr); the topics come from the controller (UpdateMetadata).
        """
        assert self.cluster is not None
        cluster = self.cluster
        self.producer_ids = cluster.producer_ids
        self.entity_configs = ZkEntityConfigStore(cluster.zk, self.on_quota_entity_configs)
        self._open_logs()
        # A failed write of partition data (from any thread): leadership moves elsewhere
        # until this broker can write again.
        loop = asyncio.get_running_loop()
        self.logs.errors.on_write_failure(
            lambda _exc: loop.call_soon_threadsafe(cluster.storage_failed, self.config)
        )
        self.replica_manager.start_replication(
            ReplicaFetcherManager(
                self.broker_id,
                FetcherSettings.from_config(self.config, self.inter_broker.security),
                self.logs.errors,
            ),
            IsrChannel(
                self.broker_id,
                lambda: cluster.broker_epoch,
                self.metadata_cache,
                link=self.inter_broker,
            ),
            self._endpoint,
        )

    @property
    def in_cluster(self) -> bool:
        return self.cluster is not None

    def _endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where ``broker_id`` is reached by other brokers (its inter-broker listener)."""
        known = self.metadata_cache.broker(broker_id)
        return None if known is None else known.address(self.listeners.inter_broker)

    def advertised_endpoints(self) -> tuple[tuple[str, str, int], ...]:
        """(listener, host, port) of every listener, as clients are told."""
        return tuple((lst.name, lst.host, lst.port) for lst in self.listeners.advertised.values())

    async def _replication_upkeep(self) -> None:
        """Cluster mode: leaders drop lagging followers from their ISRs every half
        ``replica.lag.time.max.ms``; the high watermarks are checkpointed every
        ``replica.high.watermark.checkpoint.interval.ms``."""
        loop = asyncio.get_running_loop()
        next_checkpoint = loop.time()
        rm = self.replica_manager
        while True:
            max_lag = self.config.get_int("replica.lag.time.max.ms")
            try:
                rm.shrink_isrs(max_lag)
                if loop.time() >= next_checkpoint:
                    interval = self.config.get_int("replica.high.watermark.checkpoint.interval.ms")
                    next_checkpoint = loop.time() + interval / 1000
                    hws = rm.high_watermarks()  # read here, on the loop; written off it
                    await asyncio.to_thread(rm.checkpoint_high_watermarks, hws)
            except OSError as exc:
                log.warning("could not checkpoint the high watermarks: %s", exc)
            except Exception:
                # A bug must not end ISR upkeep for good.
                log.exception("replication upkeep failed a round")
            await asyncio.sleep(min(max_lag / 2000, 1.0))

    async def load_topic_configs(self, topics: Iterable[str]) -> None:
        """Reads the overrides of ``topics`` not known yet (cluster mode), before their
        logs open."""
        assert self.cluster is not None
        for name in topics:
            if name in self._topic_configs:
                continue
            stored = await self.cluster.read_topic_configs(name)
            self._topic_configs[name] = parse_stored_topic_configs(name, stored)

    def open_log(self, tp: TopicPartition, topic_id: uuid.UUID | None) -> Log:
        """Opens or creates the log of a partition the controller gives this broker."""
        if topic_id is None:
            topic = self.metadata_cache.topic(tp.topic)
            topic_id = topic.topic_id if topic is not None else uuid.uuid4()
        return self._open_log(tp, topic_id)

    def apply_update_metadata(
        self,
        controller_id: int,
        brokers: Iterable[BrokerInfo],
        partitions: Iterable[ControllerPartitionState],
    ) -> None:
        """Takes a controller's UpdateMetadata into the cache, and follows what it changed:
        groups of deleted topics, partitions added to topics, waiting admin requests."""
        cache = self.metadata_cache
        before = {name: len(t.partitions) for name, t in cache.topics().items()}
        cache.update_from_controller(controller_id, brokers, partitions)
        if self.replica_manager.isr_channel is not None:
            self.replica_manager.isr_channel.controller_changed()
        after = cache.topics()
        for name in before.keys() - after.keys():
            self._forget_topic(name)
            self._topic_deleted(name)
        for name, topic in after.items():
            self._collisions.setdefault(collision_key(name), name)
            count = before.get(name)
            if count is not None and len(topic.partitions) > count:
                self.coordinator.on_partitions_added(name)
        if self.cluster is not None:
            self.cluster.metadata_changed()

    def _open_partitions(self, topic: TopicMetadata) -> None:
        for p, state in topic.partitions.items():
            tp = TopicPartition(topic.name, p)
            if tp not in self.replica_manager and self.broker_id in state.replicas:
                self.replica_manager.add_partition(
                    Partition(
                        self._open_log(tp, topic.topic_id), state, self.broker_id, io=self.logs.io
                    )
                )

    def _open_log(self, tp: TopicPartition, topic_id: uuid.UUID) -> Log:
        """Opens or creates a partition's log, its directory naming its topic (any thread)."""
        lg = self.logs.get_or_create(tp)
        if not (lg.dir / PARTITION_METADATA_FILE).exists():
            write_partition_metadata(lg.dir, topic_id)
        return lg

    async def start(self, dispatch: Dispatch) -> None:
        """Opens storage and starts serving; ``dispatch`` answers each request frame.

        A cluster member first connects to ZooKeeper (the cluster id checks the
        data directory) and last registers, once clients can reach it.
        """
        if self.cluster is not None:
            await self.cluster.connect()
            self.open_cluster_storage()
        else:
            self.open_storage()
        self.long_lived.settled()  # the objects of every topic found on disk
        # Before the listener: early group requests see the load in progress.
        await self.coordinator.start()
        await self.txn_coordinator.start()
        limits = ServerLimits(
            max_request_bytes=self.config.get_int("socket.request.max.bytes"),
            max_queued_request_bytes=self.config.get_int("queued.max.request.bytes"),
            idle_timeout_ms=self.config.get_int("connections.max.idle.ms"),
        )
        for lst in self.listeners.listeners:
            observer = None if self.metrics is None else self.metrics.listener(lst.name)
            server = Server(dispatch, limits, observer, self.listener_security[lst.name])
            try:
                host, port = await server.start(lst.host, lst.port)
            except OSError:
                await self._stop_servers()
                raise
            self.servers[lst.name] = server
            self.listeners = self.listeners.bound(lst.name, host, port)
            log.info("listener %s on %s:%d (%s)", lst.name, host, port, lst.protocol.value)
        if self.cluster is None:
            self.metadata_cache.put_broker(BrokerInfo(self.broker_id, self.advertised_endpoints()))
            self.metadata_cache.controller_id = self.broker_id  # a single node controls itself
        cleaner = LogCleaner(
            self.logs,
            lambda: CleanerSettings.from_broker(self.config),
            lambda tp: self.replica_manager.cleanable_bound_of(tp),
            on_pass=None if self.metrics is None else self._cleaner_pass,
        )
        self._background.append(
            asyncio.ensure_future(
                self.logs.run_background(
                    lambda: self.config.get_int("log.retention.check.interval.ms"), cleaner=cleaner
                )
            )
        )
        self._background.append(
            asyncio.ensure_future(
                expire_producers_periodically(
                    lambda: (p.producers for p in self.replica_manager.all_partitions().values()),
                    self.config,
                )
            )
        )
        if self.cluster is not None:
            self._background.append(asyncio.ensure_future(self._replication_upkeep()))
            await self.cluster.join(
                zd.EndPoint(lst.name, lst.host, lst.port, lst.protocol.value)
                for lst in self.listeners.advertised.values()
            )
        log.info(
            "kbroker %d serving on %s (cluster %s, %d partitions)",
            self.broker_id,
            ", ".join(lst.url for lst in self.listeners.listeners),
            self.metadata_cache.cluster_id,
            len(self.replica_manager),
        )

    async def stop(self) -> None:
        """Stops accepting, finishes in-flight requests, flushes and closes the logs."""
        if self.cluster is not None:
            # While this broker still serves: leadership moves off it first.
            await self.cluster.controlled_shutdown(self.config)
        # Then: members waiting in JoinGroup/SyncGroup are answered NOT_COORDINATOR,
        # waiting fetches and produces are answered now, not at their timeouts.
        await self.coordinator.stop()
        await self.txn_coordinator.stop()
        await self.txn_peers.close()
        if self.cluster is not None:
            await self.cluster.leave()
        if self.servers:
            await self._stop_servers(before_drain=self.replica_manager.shutdown)
        else:
            self.replica_manager.shutdown()
        for task in self._background:
            task.cancel()
        await self.replica_manager.stop_replication()
        await asyncio.to_thread(self._admin_thread.shutdown)
        self.long_lived.close()
        await asyncio.to_thread(self.logs.close)
        if self.cluster is None:
            await asyncio.to_thread(self.metadata.close)
        log.info("kbroker %d stopped cleanly", self.broker_id)

    async def _stop_servers(self, before_drain: Callable[[], None] | None = None) -> None:
        """Stops every listener together: none takes a request once any stops."""
        servers = list(self.servers.values())
        self.servers = {}
        for server in servers:
            server.stop_accepting()
        if before_drain is not None:
            before_drain()
        await asyncio.gather(*(server.stop() for server in servers))

    def _cleaner_pass(self, stats: Any, dirty_ratio: float) -> None:
        assert self.metrics is not None
        self.metrics.cleaned(stats.bytes_read, stats.bytes_written, dirty_ratio, stats.elapsed_ms)

    # -- topics ----------------------------------------------------------------

    def _high_watermark(self, tp: TopicPartition) -> int | None:
        # The cleaner and retention stay below it: records above may still be truncated.
        return self.replica_manager.high_watermark_of(tp)

    def log_config_for(self, topic: str) -> LogConfig:
        return log_config_from_topic(self.topic_config(topic))

    def topic_config(self, topic: str) -> TopicConfig:
        """Every topic-level setting of ``topic``: its overrides over the broker's defaults.

        Cached (produce asks for it per partition) until the topic's overrides
        or any broker setting change.
        """
        overrides = self._topic_configs.get(topic, {})
        cached = self._effective.get(topic)
        if cached is not None and cached[0] == self.config.generation and cached[1] is overrides:
            return cached[2]
        effective = self.config.effective_topic_config(overrides)
        self._effective[topic] = (self.config.generation, overrides, effective)
        return effective

    def topic_overrides(self, topic: str) -> Mapping[str, Value]:
        return self._topic_configs.get(topic, {})

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
    ) -> tuple[int, int, dict[str, Value]]:
        """Validates a CreateTopics entry; returns (partitions, replication factor, configs)."""
        illegal = illegal_topic_name(name)
        if illegal is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)
        if name in self.metadata_cache.topics() or name in self._creating:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if num_partitions == -1:
            num_partitions = self.config.get_int("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get_int("default.replication.factor")
        if num_partitions <= 0:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if num_partitions > MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic",
            )
        if replication_factor <= 0:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if self.cluster is not None:
            self.cluster.check_replication_factor(replication_factor)
        elif replication_factor > 1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: 1.",
            )
        try:
            parsed = parse_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return num_partitions, replication_factor, parsed

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name collides with ``name``, if any."""
        other = self._collisions.get(collision_key(name))
        return other if other != name else None

    def check_partition_budget(self, adding: int) -> None:
        """Refuses ``adding`` more partitions when this broker would then serve more than it may.

        (A cluster places partitions on several brokers: not checked there yet.)
        """
        if self.cluster is not None:
            return
        limit = self.config.get_int("max.broker.partitions")
        have = len(self.replica_manager) + self._reserved_partitions
        if have + adding > limit:
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"this broker serves {have} partitions; {adding} more would exceed "
                f"max.broker.partitions={limit}",
            )

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        internal: bool = False,
    ) -> TopicMetadata:
        """Creates a (small) topic at once, on the event loop: auto-creation and internal topics.

        The metadata change is written in the background; CreateTopics uses
        `create_topics`, which opens the logs off the event loop and answers
        once the change is on disk.
        """
        partitions, rf, parsed = self.check_new_topic(
            name, num_partitions, replication_factor, configs or {}
        )
        if self.cluster is not None:
            self.cluster.create_in_background(
                NewTopic(name, partitions, rf, configs or {}, parsed, internal)
            )
            raise TopicError(ErrorCode.LEADER_NOT_AVAILABLE, f"topic {name!r} is being created")
        self.check_partition_budget(partitions)
        topic_id = uuid.uuid4()
        tps = [TopicPartition(name, p) for p in range(partitions)]
        self._topic_configs[name] = parsed  # the logs open with the topic's settings
        try:
            logs = self._create_logs(name, topic_id, tps)
        except TopicError:
            self._topic_configs.pop(name, None)
            raise
        topic = self._register_topic(
            NewTopic(name, partitions, rf, configs or {}, parsed, internal), topic_id, logs
        )
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def _create_logs(self, name: str, topic_id: uuid.UUID, tps: list[TopicPartition]) -> list[Log]:
        """Creates the logs of new partitions of ``name`` (any thread): all or none."""
        try:
            logs = [self._open_log(tp, topic_id) for tp in tps]
        except OSError as exc:
            self.logs.delete_all(tps)
            self.logs.errors.failed("creating partitions of", name, exc)
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create the partitions of {name!r}: {exc}"
            ) from None
        self.logs.errors.succeeded("creating partitions of", name)
        return logs

    def _register_topic(self, new: NewTopic, topic_id: uuid.UUID, logs: list[Log]) -> TopicMetadata:
        assignment = {
            p: [self.broker_id] * new.replication_factor for p in range(new.num_partitions)
        }
        stored = {k: v for k, v in new.configs.items() if v is not None}
        try:
            topic = self.metadata.create_topic(
                new.name, assignment, stored, internal=new.internal, topic_id=topic_id
            )
        except MetadataError as exc:
            raise TopicError(exc.code, str(exc)) from None
        self._topic_configs[new.name] = new.parsed
        self._collisions[collision_key(new.name)] = new.name
        for p, lg in enumerate(logs):
            self.replica_manager.add_partition(
                Partition(
                    lg,
                    topic.partitions[p],
                    self.broker_id,
                    new=lg.log_end_offset == 0,
                    io=self.logs.io,
                )
            )
        return topic

    async def create_topics(
        self, new: list[NewTopic], timeout_ms: int = 0
    ) -> dict[str, TopicMetadata | TopicError]:
        """Creates validated topics together: logs opened in a thread, one metadata write.

        Each topic's result is its metadata or the TopicError that refused it. In
        a cluster the topics go to the controller through ZooKeeper, and the
        answer waits up to ``timeout_ms`` for their leaders.
        """
        if self.cluster is not None:
            return await self.cluster.create_topics(new, timeout_ms)
        results: dict[str, TopicMetadata | TopicError] = {}
        ready: list[NewTopic] = []
        for t in new:
            if t.name in self.metadata.topics() or t.name in self._creating:
                results[t.name] = TopicError(
                    ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
                )
                continue
            try:
                self.check_partition_budget(t.num_partitions)
            except TopicError as exc:
                results[t.name] = exc
                continue
            self._creating.add(t.name)
            self._reserved_partitions += t.num_partitions
            self._topic_configs[t.name] = t.parsed  # the logs open with the topic's settings
            ready.append(t)
        try:
            opened = await self._open_new_topic_logs(ready)
            for i, t in enumerate(ready):
                logs_or_error = opened[t.name]
                if isinstance(logs_or_error, TopicError):
                    self._topic_configs.pop(t.name, None)
                    results[t.name] = logs_or_error
                    continue
                self._creating.discard(t.name)
                self._reserved_partitions -= t.num_partitions
                topic_id, logs = logs_or_error
                try:
                    results[t.name] = self._register_topic(t, topic_id, logs)
                except TopicError as exc:
                    results[t.name] = exc
                if i % 64 == 63:
                    await asyncio.sleep(0)  # others' requests between large batches
                if i % 1024 == 1023:
                    self.long_lived.settled()  # no full collection walks them again
        finally:
            for t in ready:
                if t.name in self._creating:
                    self._creating.discard(t.name)
                    self._reserved_partitions -= t.num_partitions
                    if t.name not in self.metadata.topics():
                        self._topic_configs.pop(t.name, None)
        created = [r for r in results.values() if isinstance(r, TopicMetadata)]
        if created:
            try:
                await self.metadata.durable()
                self.long_lived.settled()
                log.info(
                    "created %d topic(s) with %d partitions: %s",
                    len(created),
                    sum(len(t.partitions) for t in created),
                    _names(created),
                )
            except OSError as exc:
                # Not recorded: undone whole, as if never asked for.
                for topic in created:
                    self._unregister_topic(topic)
                    self.metadata.restore_topic(topic.name, None)
                    results[topic.name] = TopicError(
                        ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record topic {topic.name!r}: {exc}"
                    )
                tps = [TopicPartition(t.name, p) for t in created for p in t.partitions]
                await self._in_admin_thread(self.logs.delete_all, tps)
        return results

    def _forget_topic(self, name: str) -> None:
        """Drops what the broker keeps of a topic's name and settings."""
        self._collisions.pop(collision_key(name), None)
        self._topic_configs.pop(name, None)
        self._effective.pop(name, None)

    def _topic_deleted(self, name: str) -> None:
        """Tells the coordinator and the metrics that a topic is gone."""
        self.coordinator.on_topic_deleted(name)
        if self.metrics is not None:
            self.metrics.forget_topic(name)

    def _unregister_topic(self, topic: TopicMetadata) -> None:
        """Stops serving ``topic`` (its logs stay until deleted)."""
        self._forget_topic(topic.name)
        self.replica_manager.remove_partitions(
            TopicPartition(topic.name, p) for p in topic.partitions
        )

    async def _open_new_topic_logs(self, new: list[NewTopic]) -> OpenedLogs:
        """The ids and logs of new topics, made in the admin thread together with those of
        the other requests that come meanwhile: requests arriving while a batch is being
        made go into the next one, so a burst of small CreateTopics costs a few calls into
        the storage core, not one (and its GIL hand-overs) each."""
        done: asyncio.Future[OpenedLogs] = asyncio.get_running_loop().create_future()
        self._logs_to_open.append((new, done))
        if self._opening_logs is None or self._opening_logs.done():
            self._opening_logs = asyncio.ensure_future(self._open_queued_topic_logs())
        return await done

    async def _open_queued_topic_logs(self) -> None:
        """Makes the logs of every queued creation, a batch at a time, until none is left.

        A batch holds up to `LOG_BATCH_PARTITIONS` partitions (a request at least), and
        the next batch's files are being made while the requests of the last one go on,
        a few at a time between the loop's other work: thousands of requests resumed at
        once would hold every client up for their whole length.
        """
        loop = asyncio.get_running_loop()
        running = self._next_log_batch(loop)
        while running is not None:
            batch, work = running
            opened: OpenedLogs | Exception
            try:
                opened = await work
            except Exception as exc:
                opened = exc
            except BaseException:
                for _, done in batch:
                    done.cancel()
                raise
            running = self._next_log_batch(loop)
            for i, (new, done) in enumerate(batch):
                if done.done():
                    continue
                if isinstance(opened, Exception):
                    done.set_exception(opened)
                else:
                    done.set_result({t.name: opened[t.name] for t in new})
                if i % RESUME_EVERY == RESUME_EVERY - 1:
                    await asyncio.sleep(0)
            if running is None:  # requests that came while these went on
                running = self._next_log_batch(loop)

    def _next_log_batch(
        self, loop: asyncio.AbstractEventLoop
    ) -> tuple[list[QueuedCreation], asyncio.Future[OpenedLogs]] | None:
        """Takes the next batch of queued creations and starts making their logs."""
        if not self._logs_to_open:
            return None
        partitions = 0
        taken = 0
        for new, _ in self._logs_to_open:
            if taken and partitions >= LOG_BATCH_PARTITIONS:
                break
            partitions += sum(t.num_partitions for t in new)
            taken += 1
        batch = self._logs_to_open[:taken]
        del self._logs_to_open[:taken]
        work = loop.run_in_executor(
            self._admin_thread,
            functools.partial(self._open_topic_logs, [t for new, _ in batch for t in new]),
        )
        return batch, work

    def _open_topic_logs(self, new: list[NewTopic]) -> OpenedLogs:
        """Makes the ids and logs of new topics (in a worker thread), with one call into the
        storage core for all of them; a topic that fails leaves no directory."""
        ids = [uuid.uuid4() for _ in new]
        partitions = [[TopicPartition(t.name, p) for p in range(t.num_partitions)] for t in new]
        created = self.logs.create_topic_logs(list(zip(ids, partitions, strict=True)))
        opened: OpenedLogs = {}
        for t, topic_id, logs in zip(new, ids, created, strict=True):
            if isinstance(logs, Exception):
                self.logs.errors.failed("creating partitions of", t.name, logs)
                opened[t.name] = TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"cannot create the partitions of {t.name!r}: {logs}",
                )
            else:
                self.logs.errors.succeeded("creating partitions of", t.name)
                opened[t.name] = (topic_id, logs)
        return opened

    def check_delete_topic(self, name: str) -> None:
        if name not in self.metadata_cache.topics():
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if not self.config.get_bool("delete.topic.enable"):
            raise TopicError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")

    async def delete_topics(
        self, names: list[str], timeout_ms: int = 0
    ) -> dict[str, TopicError | None]:
        """Deletes topics: the deletion is on disk before any of their files go.

        Files go in a thread. Should the broker stop before they are gone,
        the directories, which name the deleted topic's id, are removed at
        the next start. In a cluster the controller deletes them (this waits
        up to ``timeout_ms`` for it).
        """
        results: dict[str, TopicError | None] = {}
        if self.cluster is not None:
            targets: dict[str, uuid.UUID] = {}
            for name in names:
                try:
                    self.check_delete_topic(name)
                except TopicError as exc:
                    results[name] = exc
                    continue
                topic = self.metadata_cache.topic(name)
                assert topic is not None
                targets[name] = topic.topic_id
            return results | await self.cluster.delete_topics(targets, timeout_ms)
        gone: list[TopicMetadata] = []
        for name in names:
            try:
                self.check_delete_topic(name)
            except TopicError as exc:
                results[name] = exc
                continue
            gone.append(self.metadata.delete_topic(name))
            results[name] = None
        if not gone:
            return results
        try:
            await self.metadata.durable()
        except OSError as exc:
            # Not recorded: the topics stay as they were.
            for topic in gone:
                self.metadata.restore_topic(topic.name, topic)
                results[topic.name] = TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"cannot record the deletion of {topic.name!r}: {exc}",
                )
            return results
        for topic in gone:
            self._unregister_topic(topic)
            self._topic_deleted(topic.name)
        self.long_lived.released()  # their objects may be cyclic garbage now
        tps = [TopicPartition(t.name, p) for t in gone for p in t.partitions]
        left = {tp.topic for tp in await self._in_admin_thread(self.logs.delete_all, tps)}
        for topic in gone:
            # A directory left behind keeps its tombstone: the next start removes it.
            if topic.name not in left:
                self.metadata.forget_deleted(topic.topic_id)
            log.info("deleted topic %s", topic.name)
        return results

    def check_add_partitions(self, name: str, total: int) -> TopicMetadata:
        topic = self.metadata_cache.topic(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if total <= current:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {current} partitions; the new count must be larger, "
                f"not {total}",
            )
        if total > MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"at most {MAX_PARTITIONS_PER_TOPIC} partitions per topic",
            )
        self.check_partition_budget(total - current)
        return topic

    async def add_partitions(
        self,
        name: str,
        total: int,
        assignment: list[list[int]] | None = None,
        timeout_ms: int = 0,
    ) -> None:
        """Grows ``name`` to ``total`` partitions (validated with `check_add_partitions`;
        ``assignment``, each new partition's replicas, only in a cluster)."""
        topic = self.check_add_partitions(name, total)
        if self.cluster is not None:
            await self.cluster.add_partitions(name, total, assignment, timeout_ms)
            return
        current = len(topic.partitions)
        rf = len(next(iter(topic.partitions.values())).replicas)
        tps = [TopicPartition(name, p) for p in range(current, total)]
        self._reserved_partitions += len(tps)
        try:
            logs = await self._in_admin_thread(self._create_logs, name, topic.topic_id, tps)
        finally:
            self._reserved_partitions -= len(tps)
        if self.metadata.topics().get(name) is not topic or len(topic.partitions) != current:
            await self._in_admin_thread(self.logs.delete_all, tps)
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, f"topic {name!r} changed while partitions were added"
            )
        previous = topic.copy()
        updated = self.metadata.add_partitions(
            name, {p: [self.broker_id] * rf for p in range(current, total)}
        )
        for tp, lg in zip(tps, logs, strict=True):
            self.replica_manager.add_partition(
                Partition(lg, updated.partitions[tp.partition], self.broker_id, io=self.logs.io)
            )
        try:
            await self.metadata.durable()
        except OSError as exc:
            # Not recorded: the topic stays as it was.
            self.metadata.restore_topic(name, previous)
            self.replica_manager.remove_partitions(tps)
            await self._in_admin_thread(self.logs.delete_all, tps)
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"cannot record the new partitions of {name!r}: {exc}",
            ) from None
        self.coordinator.on_partitions_added(name)

    def set_topic_configs(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Replaces the overrides of ``name`` with ``configs`` (already merged by the caller).

        The change applies here at once and is recorded in the background (in a
        cluster: in ZooKeeper, which tells every broker): the caller awaits
        `config_changes_recorded()`.
        """
        if name not in self.metadata_cache.topics():
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            parsed = parse_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if validate_only:
            return
        if self.cluster is not None:
            self.cluster.record_topic_configs(name, configs)
        else:
            self.metadata.set_topic_configs(name, configs)
        self._topic_configs[name] = parsed
        self.logs.update_config(name)

    def on_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """A topic's overrides as ZooKeeper holds them (cluster mode: at start, and on each
        change any broker announces)."""
        self._topic_configs[name] = parse_stored_topic_configs(name, configs)
        if self._storage_open:
            self.logs.update_config(name)

    def on_quota_entity_configs(self, entity: QuotaEntity, configs: Mapping[str, str]) -> None:
        """A user's or client's whole config set, as stored (at start, and on each change):
        a user's SCRAM credentials go to the credential cache, every quota to the quotas."""
        if entity.client_id is None and entity.user is not None and entity.user != DEFAULT:
            self.credentials.update_user(desanitize(entity.user), configs)
        self.quotas.update_entity(entity, configs)

    def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replaces a group's configs with ``configs`` (checked by the caller), applies them
        at once and records them in the background (`config_changes_recorded`): in the
        metadata store, or in a cluster in ZooKeeper, which tells every broker. ValueError
        for a group id that cannot be stored (see zk_data.group_config_path)."""
        try:
            path = zd.group_config_path(group_id)
        except ZkDataError as exc:
            raise ValueError(str(exc)) from None
        if self.cluster is not None:
            self.cluster.record_group_configs(group_id, configs)
        else:
            assert isinstance(self.metadata, LocalMetadataStore)
            data = json.loads(zd.encode_entity_config(zd.EntityConfig.of(configs)))
            self.metadata.put_entry(path, data)  # kept when empty, as in ZooKeeper
        self.group_configs.update(group_id, configs)

    def dynamic_broker_configs(self, cluster_default: bool) -> dict[str, str]:
        """The dynamic broker settings of this broker, or (``cluster_default``) those every
        broker of the cluster takes unless it has its own; one set on a single node."""
        if self.cluster is None:
            return dict(self.metadata.broker_configs())
        return dict(self._dynamic_layers[cluster_default])

    def set_dynamic_broker_configs(self, configs: Mapping[str, str], cluster_default: bool) -> None:
        """Replaces a set of dynamic broker settings (validated by the caller), applies it
        at once and records it in the background (`config_changes_recorded`)."""
        if self.cluster is None:
            before = dict(self.metadata.broker_configs())
            self.metadata.set_broker_configs(configs)
            self._apply_dynamic(before, dict(configs), cluster_default=False)
            return
        self.cluster.record_broker_configs(None if cluster_default else self.broker_id, configs)
        self.on_broker_configs(None if cluster_default else self.broker_id, configs)

    def on_broker_configs(self, broker_id: int | None, configs: Mapping[str, str]) -> None:
        """Dynamic broker settings as ZooKeeper holds them (cluster mode): this broker's own
        (``broker_id``) or the cluster's defaults (None)."""
        if broker_id is not None and broker_id != self.broker_id:
            return
        default = broker_id is None
        before = self._dynamic_layers[default]
        self._dynamic_layers[default] = dict(configs)
        self._apply_dynamic(before, dict(configs), cluster_default=default)

    def _apply_dynamic(
        self, before: Mapping[str, str], after: Mapping[str, str], cluster_default: bool
    ) -> None:
        for name in before.keys() - after.keys():
            self.config.set(name, None, cluster_default)
        for name, text in after.items():
            try:
                self.config.set(name, text, cluster_default)
            except ConfigError as exc:
                log.warning("ignoring dynamic broker setting %s=%s: %s", name, text, exc)
        changed = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
        if self._storage_open and changed & {ts.broker_setting for ts in TOPIC_SETTINGS}:
            self.logs.update_all_configs()
        if any(is_tls_setting(n) for n in changed):
            self._reload_keystores()
        if self._storage_open and "num.io.threads" in changed:
            self.logs.io.resize(self.config.get_int("num.io.threads"))
        if changed:
            log.info(
                "dynamic broker settings%s are now %s",
                " (cluster default)" if cluster_default else "",
                {n: _shown(n, v) for n, v in after.items()},
            )

    def _tls_listeners(self) -> list[Listener]:
        return [lst for lst in self.listeners.listeners if lst.protocol.tls]

    def check_tls_change(self, configs: Mapping[str, str], cluster_default: bool) -> None:
        """Raises ConfigError when the dynamic settings ``configs`` (the whole new set)
        would give a TLS listener a keystore that cannot be loaded, or one whose
        certificate is not for the names of the certificate it presents (as Kafka checks,
        see tls.check_same_names)."""
        current = self.config.dynamic_default if cluster_default else self.config.dynamic
        changed = {n for n in current.keys() | configs.keys() if is_tls_setting(n)}
        if not changed:
            return
        trial = self.config.with_dynamic(configs, cluster_default)
        for lst in self._tls_listeners():

            def lookup(name: str, listener: str = lst.name) -> Value:
                return trial.listener_value(listener, name)

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            what = f"listener {lst.name}"
            names = tls.load_keystore(context, lookup, what)
            old = self.listener_security[lst.name].certificate
            tls.check_same_names(old, names, lookup, what)

    def _reload_keystores(self) -> None:
        """Loads each TLS listener's keystore anew: connections made from now on present
        the new certificate, those open go on."""
        for lst in self._tls_listeners():
            context = self.listener_security[lst.name].ssl_context
            if context is None:
                continue

            def lookup(name: str, listener: str = lst.name) -> Value:
                return self.config.listener_value(listener, name)

            try:
                names = tls.load_keystore(context, lookup, f"listener {lst.name}")
            except ConfigError as exc:
                log.error("keeping listener %s's certificate: %s", lst.name, exc)
                continue
            self.listener_security[lst.name].certificate = names
            log.info("listener %s loaded its keystore again", lst.name)
            # The broker's own connections to the others present the listener's
            # certificate too (mutual TLS between brokers): new ones take the new one.
            outgoing = self.inter_broker.security.ssl_context
            if lst.name == self.inter_broker.listener and outgoing is not None:
                try:
                    tls.load_keystore(outgoing, lookup, f"inter-broker listener {lst.name}")
                except ConfigError as exc:
                    log.error("keeping the inter-broker client certificate: %s", exc)

    async def config_changes_recorded(self) -> None:
        """Once every config change made so far is recorded (on disk, or in ZooKeeper);
        raises OSError or ClusterError when one could not be."""
        if self.cluster is not None:
            await self.cluster.config_writes_done()
        else:
            await self.metadata.durable()

    async def _in_admin_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs file work of topic administration in the one admin thread.

        One thread, not a pool: creating or removing thousands of logs is
        disk-bound anyway, and each extra thread holding the GIL now and then
        delays the event loop (every client) a little more.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._admin_thread, functools.partial(fn, *args))

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.replica_manager.get_partition(TopicPartition(topic, index))


def _shown(name: str, value: str) -> str:
    """A setting's value as logs show it: never a password."""
    setting = broker_setting(name)
    return "[hidden]" if setting is not None and setting.type is ConfigType.PASSWORD else value


def _names(topics: list[TopicMetadata], most: int = 5) -> str:
    """A few topic names for a log line."""
    shown = ", ".join(t.name for t in topics[:most])
    return shown + (f" and {len(topics) - most} more" if len(topics) > most else "")
