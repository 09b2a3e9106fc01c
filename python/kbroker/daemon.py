"""The broker daemon: a `Broker` with the request handlers, run until a signal.

Composes what ``kbroker serve`` runs: the broker and the handlers that answer
its clients (so the broker itself does not depend on its handlers), the log
format, the open files limit raised, the readiness checks and systemd's
notifications, and with ``metrics.listeners`` the metrics listener.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import resource
import signal
from collections.abc import Iterable

from kbroker import __version__
from kbroker.broker import Broker
from kbroker.cluster.errors import ClusterError
from kbroker.config import BrokerConfig, ConfigError
from kbroker.handlers import Dispatcher
from kbroker.heap import collect_young_objects_less_often
from kbroker.log.manager import DataDirLocked
from kbroker.metadata.store import MetadataError, StateFileError
from kbroker.metrics import BrokerMetrics, BrokerView, GroupLag, build_registry
from kbroker.metrics.http import LoopWatch, MetricsServer, Readiness, SystemdNotifier
from kbroker.metrics.logs import setup_logging
from kbroker.metrics.state import ClusterState, ReplicationState

log = logging.getLogger(__name__)


def raise_open_files_limit() -> None:
    """Raises the soft limit on open files to the hard limit (logs live in files)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
            return
        log.info("raised the open files limit from %d to %d", soft, hard)


# glibc's mallopt parameters, and the values the broker takes (see `keep_request_memory`).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MALLOC_SETTINGS = (
    (_M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 16 << 20),
    (_M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 64 << 20),
)


def keep_request_memory() -> list[str]:
    """Keeps the memory of requests in the process between requests (glibc only).

    A request frame (hundreds of KiB of record batches) is a malloc of its own. By
    default glibc serves those from fresh mmaps or trims the heap's top once they are
    freed, so while several frames are held at once (pipelined requests whose writes
    are on the I/O threads) nearly every frame's memory comes back zeroed by the kernel
    through page faults: measured, over a third of the event loop's time per MB under
    full-rate produce. Frames up to 16 MiB come from the heap, and up to 64 MiB of free
    heap stays mapped. A ``MALLOC_*_`` variable the user set is left to glibc. Returns
    what was set, as ``NAME=value``.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the process runs on
    except AttributeError:  # not glibc (musl has no mallopt)
        return []
    done = []
    for param, variable, value in _MALLOC_SETTINGS:
        if variable in os.environ:
            continue
        if mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1:
            done.append(f"{variable}={value}")
    return done


def _metrics_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition("://")[2].rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def broker_view(broker: Broker, started: list[bool]) -> BrokerView:
    """What the metrics scrape reads of ``broker`` (nothing before its storage is open)."""

    def partitions() -> Iterable[tuple[object, object]]:
        return broker.replica_manager.all_partitions().items() if started else ()

    def lag() -> list[GroupLag]:
        return broker.coordinator.consumer_lag() if started else []

    def cluster() -> ClusterState | None:
        member = broker.cluster
        if member is None:
            return None
        controller = member.controller
        offline, partitions, topics = controller.counts() if controller is not None else (0, 0, 0)
        elector = member.elector
        elections, unclean = elector.leader_elections() if elector is not None else (0, 0)
        return ClusterState(
            active_controller=int(controller is not None),
            offline_partitions=offline,
            global_partitions=partitions,
            global_topics=topics,
            zookeeper_connected=int(member.zk.connected),
            leader_elections=elections,
            unclean_leader_elections=unclean,
            controller_terms=0 if elector is None else elector.terms,
            offline_log_dirs=int(member.storage_offline),
        )

    def replication() -> ReplicationState:
        if not started:
            return ReplicationState()
        rm = broker.replica_manager
        lag = rm.fetchers.max_lag() if rm.fetchers is not None else 0
        return ReplicationState(rm.isr_shrinks, rm.isr_expands, lag)

    def min_insync(topic: str) -> int:
        try:
            return broker.topic_config(topic).get_int("min.insync.replicas")
        except Exception:  # a topic deleted while the scrape ran
            return 1

    return BrokerView(
        cluster=cluster,
        replication=replication,
        min_insync=min_insync,
        broker_id=broker.broker_id,
        version=__version__,
        data_dirs=lambda: [str(broker.data_dir)],
        partitions=partitions,  # type: ignore[arg-type]
        consumer_lag=lag,
        partition_level=lambda: broker.config.get_bool("metrics.partition.level.enable"),
    )


def run_broker(config: BrokerConfig, log_level: str = "INFO", log_format: str = "text") -> int:
    """The daemon: runs until SIGTERM/SIGINT, then shuts down cleanly. Returns the exit code."""
    setup_logging(log_level, log_format)

    raise_open_files_limit()
    tuned = keep_request_memory()
    if tuned:
        log.debug("malloc: %s", " ".join(tuned))

    async def main() -> int:
        metrics_at = config.get_optional_str("metrics.listeners")
        metrics = BrokerMetrics() if metrics_at else None
        try:
            broker = Broker(config, metrics)
        except (ClusterError, ConfigError) as exc:
            # A zookeeper.connect that names no ensemble; a keystore that cannot be read;
            # a bad super.users.
            log.error("cannot start: %s", exc)
            return 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # Set once the broker serves: storage open, listener up.
        started: list[bool] = []
        watch = LoopWatch(metrics)
        watch.start()
        readiness = Readiness()
        readiness.add_check("storage open and serving", lambda: bool(started))
        readiness.add_check("group coordinator loaded", lambda: not broker.coordinator.loading)
        if broker.cluster is not None:
            member = broker.cluster
            readiness.add_check("registered with the cluster", lambda: member.registered)
            readiness.add_check("log directory writable", lambda: not member.storage_offline)
        server: MetricsServer | None = None
        if metrics is not None and metrics_at is not None:
            server = MetricsServer(
                build_registry(metrics, broker_view(broker, started)), watch, readiness
            )
            try:
                host, port = server.start(*_metrics_address(metrics_at))
            except OSError as exc:
                log.error("cannot start: metrics listener %s: %s", metrics_at, exc)
                return 1
            log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", host, port)
        notifier = SystemdNotifier(watch, readiness, server.stall_s if server else 5.0)
        notifier.start()
        try:
            try:
                await broker.start(Dispatcher(broker, metrics).dispatch)
            except (OSError, DataDirLocked, MetadataError, StateFileError, ClusterError) as exc:
                log.error("cannot start: %s", exc)
                if broker.cluster is not None:
                    await broker.cluster.leave()
                return 1
            started.append(True)
            collect_young_objects_less_often()
            await stop.wait()
            log.info("shutting down")
            readiness.stopping = True
            notifier.stopping()
            await broker.stop()
            return 0
        finally:
            watch.stop()
            if server is not None:
                server.stop()

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(main())
    return uvloop.run(main())
