"""A cluster's finalized features (KIP-584) in its ``/feature`` znode, as Kafka 3.x keeps them.

The controller, once elected, makes sure the znode exists and is enabled: a fresh cluster gets
kbroker's defaults, left out any feature a registered broker does not support (the controller
of a cluster that already has the znode, a Kafka one's included, leaves its levels as they
are, as Kafka's does). The controller alone changes it afterwards (UpdateFeatures), each write
checked against the znode's version and fenced by the controller epoch. The znode's version
is the finalized epoch.

Every broker follows the znode (`FeatureWatcher`): before it serves (a broker whose supported
levels do not cover what is finalized refuses to start, as Kafka's does), and after each change.
A later change it cannot serve is logged and not applied (the controller checks every live
broker before writing, so only a foreign writer can do this); a znode it cannot read, or none,
finalizes nothing, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kbroker.cluster.controller_election import ControllerEpoch, fenced_multi
from kbroker.cluster.errors import (
    ClusterError,
    ZkDataError,
    ZkError,
    ZkNoNodeError,
    ZkNotStartedError,
)
from kbroker.cluster.zk import (
    CreateOp,
    PersistentWatch,
    SetDataOp,
    Stat,
    WatchEvent,
    ZkClient,
)
from kbroker.cluster.zk_data import FinalizedFeatures, decode_features, encode_features
from kbroker.metadata.features import DEFAULT_LEVELS, FEATURE_PATH, Features, unsupported, znode

log = logging.getLogger(__name__)

# id -> the feature ranges a broker's registration says it supports.
BrokerSupport = Mapping[int, Mapping[str, tuple[int, int]]]


async def read_feature_znode(zk: ZkClient) -> tuple[FinalizedFeatures | None, int]:
    """/feature and its version (None, -1 when there is none). Raises ZkDataError."""
    try:
        data, stat = await zk.get(FEATURE_PATH)
    except ZkNoNodeError:
        return None, -1
    return decode_features(data), stat.version


def default_levels(brokers: BrokerSupport) -> dict[str, int]:
    """What a fresh cluster finalizes: kbroker's defaults that every broker can serve."""
    levels = {}
    for name, level in DEFAULT_LEVELS.items():
        if all(
            name in support and support[name][0] <= level <= support[name][1]
            for support in brokers.values()
        ):
            levels[name] = level
    return levels


async def ensure_feature_znode(
    zk: ZkClient, epoch: ControllerEpoch, brokers: BrokerSupport
) -> None:
    """The controller's first step: /feature exists and is enabled."""
    try:
        found, version = await read_feature_znode(zk)
    except ZkDataError as exc:
        # Kafka's controller would fail over and over here; leave the operator's znode alone.
        log.error("%s cannot be read (%s): left as it is, nothing is finalized", FEATURE_PATH, exc)
        return
    if found is None:
        new = znode(default_levels(brokers))
        await fenced_multi(zk, epoch, [CreateOp(FEATURE_PATH, encode_features(new))])
        log.info("created %s finalizing %s", FEATURE_PATH, dict(new.features) or "nothing")
    elif not found.enabled:
        enabled = FinalizedFeatures(True, found.features)
        await fenced_multi(zk, epoch, [SetDataOp(FEATURE_PATH, encode_features(enabled), version)])
        log.info("enabled %s", FEATURE_PATH)


async def write_feature_znode(
    zk: ZkClient, epoch: ControllerEpoch, levels: Mapping[str, int], version: int
) -> int:
    """Finalizes ``levels`` in /feature, found at ``version`` (-1: absent); the new epoch.
    Raises ZkMultiError (ZkBadVersionError) when the znode changed meanwhile."""
    data = encode_features(znode(levels))
    if version < 0:
        await fenced_multi(zk, epoch, [CreateOp(FEATURE_PATH, data)])
        return 0
    (stat,) = await fenced_multi(zk, epoch, [SetDataOp(FEATURE_PATH, data, version)])
    if not isinstance(stat, Stat):
        raise ClusterError(f"setting {FEATURE_PATH} answered {stat!r}, not its new stat")
    return stat.version


def _unservable(found: FinalizedFeatures | None) -> list[str]:
    """The finalized levels of an enabled /feature this broker cannot serve, described."""
    return [] if found is None or not found.enabled else unsupported(found.features)


class FeatureWatcher:
    """Keeps ``features`` at what /feature finalizes."""

    def __init__(self, zk: ZkClient, features: Features) -> None:
        self._zk = zk
        self._features = features
        self._watch: PersistentWatch | None = None
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Reads /feature now; raises ClusterError when this broker cannot serve its levels."""
        self._watch = await self._zk.watch(FEATURE_PATH, self._on_event)
        try:
            found, version = await read_feature_znode(self._zk)
        except ZkDataError as exc:
            log.error("%s cannot be read (%s): nothing is finalized", FEATURE_PATH, exc)
            found, version = None, -1
        problems = _unservable(found)
        if problems:
            self.stop()
            raise ClusterError(
                f"{FEATURE_PATH} finalizes what this broker cannot serve: " + ", ".join(problems)
            )
        self._apply(found, version)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _on_event(self, _event: WatchEvent) -> None:
        self._dirty.set()

    def _apply(self, found: FinalizedFeatures | None, version: int) -> None:
        if found is None:
            self._features.clear()
        else:
            self._features.apply(found, version)

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                found, version = await read_feature_znode(self._zk)
            except ZkNotStartedError:
                return
            except ZkDataError as exc:
                log.error("%s cannot be read (%s): nothing is finalized", FEATURE_PATH, exc)
                self._features.clear()
                continue
            except ZkError as exc:
                log.info("reading %s: %s; will retry", FEATURE_PATH, exc)
                self._dirty.set()
                await asyncio.sleep(0.1)
                continue
            problems = _unservable(found)
            if problems:
                log.error(
                    "%s (epoch %d) finalizes what this broker cannot serve: %s; this broker "
                    "keeps epoch %d",
                    FEATURE_PATH,
                    version,
                    ", ".join(problems),
                    self._features.epoch,
                )
                continue
            self._apply(found, version)
