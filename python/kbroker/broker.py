"""The broker: wires config, metadata, logs, partitions and the network together.

`Broker` owns the partitions this node serves and the topic-level operations
(create, delete, add partitions, configs) that change them; request handlers
(`kbroker.handlers`) call into it. `run_broker` is the daemon's main.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kbroker.config import BrokerConfig, ConfigError, Value, parse_topic_configs
from kbroker.coordinator import GroupCoordinator
from kbroker.log import LogConfig, LogManager, TopicPartition, log_config_from_topic
from kbroker.log.cleaner import CleanerSettings, LogCleaner
from kbroker.log.log import TOPIC_NAME
from kbroker.metadata import LocalMetadataStore, MetadataError, MetadataStore, TopicMetadata
from kbroker.network.server import Server, ServerLimits
from kbroker.producer_ids import ProducerIdAllocator
from kbroker.replication.partition import Partition

log = logging.getLogger("kbroker")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicError(Exception):
    """A topic operation refused with the Kafka error named ``error``."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int


def _listener(url: str) -> Endpoint:
    """'PLAINTEXT://host:port' (or 'host:port') -> Endpoint."""
    _, _, hostport = url.rpartition("://")
    host, _, port = hostport.rpartition(":")
    return Endpoint(host.strip("[]") or "0.0.0.0", int(port))


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id: int = config["broker.id"]
        self.data_dir = Path(config["log.dirs"])
        self.listen = _listener(config["listeners"])
        advertised = config["advertised.listeners"]
        self.advertised = _listener(advertised) if advertised else self.listen
        self.metadata: MetadataStore
        self.logs: LogManager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.server: Server | None = None
        self.producer_ids: ProducerIdAllocator
        self.coordinator = GroupCoordinator(self)
        # Filled by the Dispatcher: the APIs ApiVersions advertises.
        self.handled_api_keys: frozenset[int] = frozenset()
        self._topic_configs: dict[str, dict[str, Value]] = {}
        # topic -> (broker config generation, its overrides, effective config)
        self._effective: dict[str, tuple[int, dict[str, Value], dict[str, Value]]] = {}
        self._background: list[asyncio.Task[None]] = []

    # -- start and stop ------------------------------------------------------

    def open_storage(self) -> None:
        """Loads metadata and opens (recovering) every partition log."""
        store = LocalMetadataStore(self.data_dir, self.broker_id)
        store.load()
        self.metadata = store
        self.producer_ids = ProducerIdAllocator(store)
        for name, text in store.broker_configs().items():
            try:
                self.config.set(name, text)
            except ConfigError as exc:
                log.warning("ignoring stored broker setting %s: %s", name, exc)
        for topic in store.topics().values():
            self._topic_configs[topic.name] = parse_topic_configs(topic.configs)
        self.logs = LogManager(
            self.data_dir, self.log_config_for, max_open_files=self.config["log.max.open.files"]
        )
        self.logs.open()
        known = {
            TopicPartition(t.name, p) for t in store.topics().values() for p in t.partitions
        }
        for tp in [tp for tp in self.logs.partitions() if tp not in known]:
            log.warning("deleting log %s of a topic that no longer exists", tp)
            self.logs.delete(tp)
        for topic in store.topics().values():
            self._open_partitions(topic)

    def _open_partitions(self, topic: TopicMetadata) -> None:
        for p, state in topic.partitions.items():
            tp = TopicPartition(topic.name, p)
            if tp not in self.partitions and self.broker_id in state.replicas:
                self.partitions[tp] = Partition(self.logs.get_or_create(tp), state, self.broker_id)

    async def start(self) -> None:
        self.open_storage()
        # Before the listener: early group requests see the load in progress.
        await self.coordinator.start()
        from kbroker.handlers import Dispatcher

        limits = ServerLimits(
            max_request_bytes=self.config["socket.request.max.bytes"],
            idle_timeout_ms=self.config["connections.max.idle.ms"],
        )
        self.server = Server(Dispatcher(self).dispatch, limits)
        host, port = await self.server.start(self.listen.host, self.listen.port)
        if self.advertised.port == 0:
            self.advertised = Endpoint(self.advertised.host, port)
        cleaner = LogCleaner(
            self.logs, lambda: CleanerSettings.from_broker(self.config), self._high_watermark
        )
        self._background.append(
            asyncio.ensure_future(
                self.logs.run_background(
                    lambda: self.config["log.retention.check.interval.ms"], cleaner=cleaner
                )
            )
        )
        log.info(
            "kbroker %d serving on %s:%d (cluster %s, %d partitions)",
            self.broker_id, host, port, self.metadata.cluster_id, len(self.partitions),
        )

    async def stop(self) -> None:
        """Stops accepting, finishes in-flight requests, flushes and closes the logs."""
        # First: members waiting in JoinGroup/SyncGroup are answered NOT_COORDINATOR.
        await self.coordinator.stop()
        if self.server is not None:
            await self.server.stop()
        for task in self._background:
            task.cancel()
        for partition in self.partitions.values():
            partition.close()
        await asyncio.to_thread(self.logs.close)
        log.info("kbroker %d stopped cleanly", self.broker_id)

    # -- topics ----------------------------------------------------------------

    def _high_watermark(self, tp: TopicPartition) -> int | None:
        # The cleaner stays below it: records above may still be truncated.
        partition = self.partitions.get(tp)
        return None if partition is None else partition.high_watermark

    def log_config_for(self, topic: str) -> LogConfig:
        return log_config_from_topic(self.topic_config(topic))

    def topic_config(self, topic: str) -> dict[str, Value]:
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
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str | None]
    ) -> tuple[int, int, dict[str, Value]]:
        """Validates a CreateTopics entry; returns (partitions, replication factor, configs)."""
        if not TOPIC_NAME.match(name) or name in (".", ".."):
            raise TopicError("INVALID_TOPIC_EXCEPTION", f"{name!r} is not a legal topic name")
        if name in self.metadata.topics():
            raise TopicError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if num_partitions <= 0:
            raise TopicError("INVALID_PARTITIONS", "the number of partitions must be at least 1")
        if num_partitions > 100_000:
            raise TopicError("INVALID_PARTITIONS", "at most 100000 partitions per topic")
        if replication_factor <= 0:
            raise TopicError("INVALID_REPLICATION_FACTOR", "the replication factor must be at least 1")
        if replication_factor > 1:
            raise TopicError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
        try:
            parsed = parse_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError("INVALID_CONFIG", str(exc)) from None
        return num_partitions, replication_factor, parsed

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        internal: bool = False,
    ) -> TopicMetadata:
        partitions, rf, parsed = self.check_new_topic(
            name, num_partitions, replication_factor, configs or {}
        )
        assignment = {p: [self.broker_id] * rf for p in range(partitions)}
        stored = {k: v for k, v in (configs or {}).items() if v is not None}
        try:
            topic = self.metadata.create_topic(name, assignment, stored, internal=internal)
        except MetadataError as exc:
            raise TopicError(exc.error, str(exc)) from None
        self._topic_configs[name] = parsed
        self._open_partitions(topic)
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def delete_topic(self, name: str) -> None:
        if name not in self.metadata.topics():
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        if not self.config["delete.topic.enable"]:
            raise TopicError("TOPIC_DELETION_DISABLED", "delete.topic.enable is false")
        topic = self.metadata.topics()[name]
        self.metadata.delete_topic(name)
        self._topic_configs.pop(name, None)
        for p in topic.partitions:
            tp = TopicPartition(name, p)
            partition = self.partitions.pop(tp, None)
            if partition is not None:
                partition.close()
            self.logs.delete(tp)
        self.coordinator.on_topic_deleted(name)
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        topic = self.metadata.topics().get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if total <= current:
            raise TopicError(
                "INVALID_PARTITIONS",
                f"topic {name!r} has {current} partitions; the new count must be larger, not {total}",
            )
        if total > 100_000:
            raise TopicError("INVALID_PARTITIONS", "at most 100000 partitions per topic")
        if validate_only:
            return
        rf = len(next(iter(topic.partitions.values())).replicas)
        updated = self.metadata.add_partitions(
            name, {p: [self.broker_id] * rf for p in range(current, total)}
        )
        self._open_partitions(updated)
        self.coordinator.on_partitions_added(name)

    def set_topic_configs(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Replaces the overrides of ``name`` with ``configs`` (already merged by the caller)."""
        if name not in self.metadata.topics():
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        try:
            parsed = parse_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError("INVALID_CONFIG", str(exc)) from None
        if validate_only:
            return
        self.metadata.set_topic_configs(name, configs)
        self._topic_configs[name] = parsed
        self.logs.update_config(name)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, index))


def run_broker(config: BrokerConfig, log_level: str = "INFO") -> int:
    """The daemon: runs until SIGTERM/SIGINT, then shuts down cleanly. Returns the exit code."""
    logging.basicConfig(
        level=getattr(logging, log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    async def main() -> int:
        broker = Broker(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await broker.start()
        except OSError as exc:
            log.error("cannot start: %s", exc)
            return 1
        except Exception as exc:
            from kbroker.log.manager import DataDirLocked

            if isinstance(exc, DataDirLocked | MetadataError):
                log.error("cannot start: %s", exc)
                return 1
            raise
        await stop.wait()
        log.info("shutting down")
        await broker.stop()
        return 0

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(main())
    return uvloop.run(main())
