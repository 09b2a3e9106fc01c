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
A single node keeps that JSON under the same path in its local metadata store, and the epoch
beside it. What is true today: a cluster keeps the default (level 1, epoch 0) and its controller
does not yet write the znode (UpdateFeatures refuses in a cluster).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from kbroker.cluster.zk_data import FinalizedFeatures, decode_features, encode_features

GROUP_VERSION = "group.version"
# name -> (min, max) levels this broker supports.
SUPPORTED: Mapping[str, tuple[int, int]] = {GROUP_VERSION: (0, 1)}
# What a fresh node or cluster finalizes.
DEFAULT_LEVELS: Mapping[str, int] = {GROUP_VERSION: 1}

FEATURE_PATH = "/feature"
# Where a single node keeps the znode version (the finalized epoch) beside /feature.
FEATURE_EPOCH_PATH = "/kbroker/feature_epoch"


class Features:
    """The finalized feature levels this broker honours, and their epoch."""

    def __init__(self) -> None:
        self.levels: dict[str, int] = dict(DEFAULT_LEVELS)
        self.epoch = 0
        self._listeners: list[Callable[[], None]] = []

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def apply(self, znode: FinalizedFeatures, epoch: int) -> None:
        """Takes the finalized levels of a /feature znode at version ``epoch``."""
        self.levels = {name: level for name, level in znode.features if name in SUPPORTED}
        self.epoch = epoch
        for listener in self._listeners:
            listener()

    def znode(self, levels: Mapping[str, int]) -> FinalizedFeatures:
        """The /feature content finalizing ``levels`` (level 0 is left out, as Kafka does)."""
        return FinalizedFeatures(True, tuple(sorted((n, v) for n, v in levels.items() if v > 0)))


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
        znode = decode_features(_json_bytes(data))
        epoch = self._store.entry(FEATURE_EPOCH_PATH)
        self._features.apply(znode, int(epoch) if isinstance(epoch, int) else 0)

    def write(self, levels: Mapping[str, int], epoch: int | None = None) -> None:
        """Finalizes ``levels``; the epoch goes up by one unless given."""
        znode = self._features.znode(levels)
        new_epoch = self._features.epoch + 1 if epoch is None else epoch
        self._store.put_entry(FEATURE_PATH, json.loads(encode_features(znode)))
        self._store.put_entry(FEATURE_EPOCH_PATH, new_epoch)
        self._features.apply(znode, new_epoch)


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data).encode()
