"""Versioned features (KIP-584): which kbroker supports, which are finalized, and their epoch.

kbroker claims exactly one feature, ``group.version`` (supported 0-1): level 1 is the KIP-848
consumer group protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe), which kbroker serves;
at level 0 it is switched off, as in Kafka. A fresh node or cluster finalizes level 1, as a fresh
Kafka 4.1 does. Kafka 4.1.1 also advertises metadata.version and kraft.version (KRaft's own, which
a ZooKeeper-shaped broker has not), transaction.version 0-2 (level 2 is KIP-890 part 2, not done
here), eligible.leader.replicas.version (KIP-966, not done) and share.version (KIP-932, not done);
claiming any of them would tell clients and tools something untrue, so none is advertised.

Finalized levels are kept as Kafka 3.x in ZooKeeper mode keeps them in its ``/feature`` znode
(ZkData.scala FeatureZNode): ``{"features": {name: {"max_version_level": n}}, "version": 2,
"status": 1}``, a feature at level 0 being absent. The znode's version is the finalized epoch.
In a cluster the controller creates the znode and changes it (`kbroker.cluster.features`), and
every broker follows it; a single node keeps the same JSON under the same path in its local
metadata store, and the epoch beside it. Finalized features kbroker does not claim (a Kafka
controller's) are kept in the znode and otherwise ignored.

An update (UpdateFeatures) is checked here, the same way on a single node and on a cluster's
controller, in the words Kafka 4.1's controller uses: the whole request fails when one update
does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kbroker.cluster.zk_data import FinalizedFeatures, decode_features, encode_features

GROUP_VERSION = "group.version"
# name -> (min, max) levels this broker supports.
SUPPORTED: Mapping[str, tuple[int, int]] = {GROUP_VERSION: (0, 1)}
# What a fresh node or cluster finalizes.
DEFAULT_LEVELS: Mapping[str, int] = {GROUP_VERSION: 1}
# The epoch of a broker that has read no finalized features (no /feature yet), as Kafka's.
NO_EPOCH = -1

FEATURE_PATH = "/feature"
# Where a single node keeps the znode version (the finalized epoch) beside /feature.
FEATURE_EPOCH_PATH = "/kbroker/feature_epoch"

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
NOT_SUPPORTED = (
    "Could not apply finalized feature update because the provided feature is not supported."
)


class Features:
    """The finalized feature levels this broker honours, and their epoch."""

    def __init__(self) -> None:
        self.levels: dict[str, int] = dict(DEFAULT_LEVELS)
        self.epoch = 0
        self._listeners: list[Callable[[], None]] = []
        self._changed: asyncio.Event | None = None

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def apply(self, znode: FinalizedFeatures, epoch: int) -> None:
        """Takes the finalized levels of a /feature znode at version ``epoch`` (a disabled one
        finalizes nothing, as in Kafka)."""
        features = znode.features if znode.enabled else ()
        self._set({name: level for name, level in features if name in SUPPORTED}, epoch)

    def clear(self) -> None:
        """No /feature: nothing is finalized."""
        self._set({}, NO_EPOCH)

    def _set(self, levels: dict[str, int], epoch: int) -> None:
        self.levels = levels
        self.epoch = epoch
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        for listener in self._listeners:
            listener()

    async def reach(self, epoch: int, timeout_s: float) -> bool:
        """Waits until this broker follows /feature at ``epoch`` or later; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.epoch < epoch:
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return False
        return True


def unsupported(finalized: Iterable[tuple[str, int]]) -> list[str]:
    """The finalized levels this broker claims but cannot serve, described."""
    out = []
    for name, level in finalized:
        if name in SUPPORTED:
            lo, hi = SUPPORTED[name]
            if not lo <= level <= hi:
                out.append(f"{name} at level {level} (this broker supports {lo}-{hi})")
    return out


def znode(levels: Mapping[str, int]) -> FinalizedFeatures:
    """The enabled /feature content finalizing ``levels`` (level 0 left out, as Kafka does)."""
    return FinalizedFeatures(True, tuple(sorted((n, v) for n, v in levels.items() if v > 0)))


# -- updates -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One update of an UpdateFeatures request, whatever the request's version."""

    feature: str
    level: int
    kind: int  # UPGRADE, SAFE_DOWNGRADE or UNSAFE_DOWNGRADE (anything else is refused)

    @classmethod
    def from_request(cls, update: Any, version: int) -> FeatureUpdate:
        if version >= 1:
            kind = int(update.upgrade_type)
        else:
            kind = SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
        return cls(update.feature, int(update.max_version_level), kind)


class UpdateRefused(Exception):
    """The whole update fails; the message is the answer's."""


def refusal(update: FeatureUpdate) -> str:
    """Why an update of a feature kbroker does not claim cannot be applied."""
    if not update.feature:
        return "Feature name can not be empty."
    if update.kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "Received unknown upgrade type."
    if update.level < 1:
        if update.kind == UPGRADE:
            return (
                f"Can not provide versionLevel: {update.level} less than 1 "
                "without setting the SAFE downgradeType in the request."
            )
        return "Can not delete non-existing finalized feature."
    return NOT_SUPPORTED


def _supported_refusal(
    update: FeatureUpdate,
    current: Mapping[str, int],
    controller_id: int,
    brokers: Mapping[int, Mapping[str, tuple[int, int]]],
) -> str | None:
    name, level = update.feature, update.level
    lo, hi = SUPPORTED[name]
    if update.kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "Received unknown upgrade type."
    if not lo <= level <= hi:
        return (
            f"Invalid update version {level} for feature {name}. Local controller "
            f"{controller_id} only supports versions {lo}-{hi}"
        )
    if level < current.get(name, 0) and update.kind == UPGRADE:
        return (
            f"Invalid update version {level} for feature {name}. Can't downgrade the version "
            "of this feature without setting the upgrade type to either safe or unsafe downgrade."
        )
    # Every live broker must serve the new level (a Kafka 3.9 broker of a mixed cluster
    # supports no feature, and exits when one it does not know is finalized).
    for broker_id, supported in sorted(brokers.items()):
        if level == 0:
            break
        their = supported.get(name)
        if their is None:
            return (
                f"Invalid update version {level} for feature {name}. Broker {broker_id} does "
                "not support this feature."
            )
        if not their[0] <= level <= their[1]:
            return (
                f"Invalid update version {level} for feature {name}. Broker {broker_id} only "
                f"supports versions {their[0]}-{their[1]}"
            )
    return None


def plan_update(
    updates: Iterable[FeatureUpdate],
    current: Mapping[str, int],
    controller_id: int,
    brokers: Mapping[int, Mapping[str, tuple[int, int]]] | None = None,
) -> dict[str, int]:
    """The finalized levels once ``updates`` apply to ``current`` (features kbroker does not
    claim kept as they are), every broker of ``brokers`` (id -> supported ranges) able to
    serve them; raises UpdateRefused naming the first update that cannot apply."""
    levels = dict(current)
    for u in updates:
        problem = (
            _supported_refusal(u, current, controller_id, brokers or {})
            if u.feature in SUPPORTED
            else refusal(u)
        )
        if problem is not None:
            raise UpdateRefused(
                "The update failed for all features since the following feature had an "
                f"error: {problem}"
            )
        levels[u.feature] = u.level
    return {name: level for name, level in levels.items() if level > 0}


# -- a single node's /feature ----------------------------------------------------------------


class LocalFeatureStore:
    """A single node's /feature, in its local metadata store (``entry``/``put_entry``)."""

    def __init__(self, store: Any, features: Features) -> None:
        self._store = store
        self._features = features

    def load(self) -> None:
        """Reads /feature, writing the default on a fresh node."""
        data = self._store.entry(FEATURE_PATH)
        if data is None:
            self.write(dict(DEFAULT_LEVELS), epoch=0)
            return
        found = decode_features(_json_bytes(data))
        epoch = self._store.entry(FEATURE_EPOCH_PATH)
        self._features.apply(found, int(epoch) if isinstance(epoch, int) else 0)

    def write(self, levels: Mapping[str, int], epoch: int | None = None) -> None:
        """Finalizes ``levels``; the epoch goes up by one unless given."""
        new = znode(levels)
        new_epoch = self._features.epoch + 1 if epoch is None else epoch
        self._store.put_entry(FEATURE_PATH, json.loads(encode_features(new)))
        self._store.put_entry(FEATURE_EPOCH_PATH, new_epoch)
        self._features.apply(new, new_epoch)


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data).encode()
