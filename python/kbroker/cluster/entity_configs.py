"""`ZkEntityConfigStore`: users' and clients' configs of a ZooKeeper cluster.

The `kbroker.quota.store.EntityConfigStore` of a cluster member: reads go to
ZooKeeper (what any broker, kbroker or Kafka, last wrote), a change writes
the entity's znode and its change notification (`kbroker.cluster.configs`),
which every broker follows; this broker applies it at once as well.
Alterations made through this broker are made one at a time; as in Kafka,
two brokers altering the same entity at the same moment may lose one change.
"""

from __future__ import annotations

import asyncio

from kbroker.cluster.configs import (
    read_all_quota_entity_configs,
    read_quota_entity_configs,
    set_quota_entity_configs,
)
from kbroker.cluster.zk import ZkClient
from kbroker.quota.entity import QuotaEntity
from kbroker.quota.store import Edit, EntityChange


class ZkEntityConfigStore:
    def __init__(self, zk: ZkClient, on_change: EntityChange) -> None:
        self._zk = zk
        self._on_change = on_change
        self._lock = asyncio.Lock()

    async def fetch(self, entity: QuotaEntity) -> dict[str, str]:
        return await read_quota_entity_configs(self._zk, entity)

    async def fetch_all(self) -> dict[QuotaEntity, dict[str, str]]:
        return {e: c for e, c in (await read_all_quota_entity_configs(self._zk)).items() if c}

    async def update(self, entity: QuotaEntity, edit: Edit) -> dict[str, str] | None:
        async with self._lock:
            configs = edit(await read_quota_entity_configs(self._zk, entity))
            if configs is None:
                return None
            await set_quota_entity_configs(self._zk, entity, configs)
            self._on_change(entity, dict(configs))
            return configs
