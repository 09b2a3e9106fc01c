"""Where users' and clients' configs are kept, one interface for both kinds of broker.

`EntityConfigStore` is what the quota and SCRAM handlers use: the whole
config set of a `QuotaEntity` (SCRAM credentials in Kafka's text form under
their mechanism's name, quotas under their keys), every entity's, and a
read-edit-write of one entity under a lock, so two alterations made through
this broker do not lose each other's changes. The broker hears of every
change it makes at once (``on_change``), before the answer goes out.

`LocalEntityConfigStore` is a single node's: the same JSON a cluster keeps in
ZooKeeper (``{"version":1,"config":{...}}``), under the same paths, in the
metadata store. A cluster's (`kbroker.cluster.entity_configs`) writes
ZooKeeper and announces the change to every broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Protocol

from kbroker.cluster.errors import ZkDataError
from kbroker.cluster.zk_data import (
    CONFIG_PATH,
    EntityConfig,
    decode_entity_config,
    encode_entity_config,
    quota_entity_config_path,
)
from kbroker.metadata.store import LocalMetadataStore
from kbroker.quota.entity import QuotaEntity

log = logging.getLogger(__name__)

EntityChange = Callable[[QuotaEntity, dict[str, str]], None]
# An edit of an entity's configs: the new set, or None to leave it as it is.
Edit = Callable[[dict[str, str]], "dict[str, str] | None"]


class EntityConfigStore(Protocol):
    async def fetch(self, entity: QuotaEntity) -> dict[str, str]:
        """The entity's configs ({} when it has none)."""
        ...

    async def fetch_all(self) -> dict[QuotaEntity, dict[str, str]]:
        """Every user's, client's and user's client's configs (empty sets left out)."""
        ...

    async def update(self, entity: QuotaEntity, edit: Edit) -> dict[str, str] | None:
        """Reads the entity's configs, applies `edit`, and records what it returns (durably,
        announced to every broker); returns that set (None: nothing was written). Raises
        OSError or a cluster error when the change cannot be recorded."""
        ...


class LocalEntityConfigStore:
    """A single node's users' and clients' configs, in its metadata store."""

    def __init__(self, store: LocalMetadataStore, on_change: EntityChange) -> None:
        self._store = store
        self._on_change = on_change
        self._lock = asyncio.Lock()

    def load(self) -> dict[QuotaEntity, dict[str, str]]:
        """Every entity's configs as stored (those that cannot be read are logged)."""
        out: dict[QuotaEntity, dict[str, str]] = {}
        for prefix in (f"{CONFIG_PATH}/users/", f"{CONFIG_PATH}/clients/"):
            for path, data in self._store.entries(prefix).items():
                entity_type, _, name = path[len(CONFIG_PATH) + 1 :].partition("/")
                try:
                    entity = QuotaEntity.from_path(entity_type, name)
                    configs = _decode(data)
                except (ValueError, ZkDataError) as exc:
                    log.warning("skipping the stored configs at %s: %s", path, exc)
                    continue
                out[entity] = configs
        return out

    async def fetch(self, entity: QuotaEntity) -> dict[str, str]:
        data = self._store.entry(quota_entity_config_path(entity))
        if data is None:
            return {}
        try:
            return _decode(data)
        except ZkDataError as exc:
            log.warning("ignoring the stored configs of %s: %s", entity, exc)
            return {}

    async def fetch_all(self) -> dict[QuotaEntity, dict[str, str]]:
        return {e: c for e, c in self.load().items() if c}

    async def update(self, entity: QuotaEntity, edit: Edit) -> dict[str, str] | None:
        async with self._lock:
            configs = edit(dict(await self.fetch(entity)))
            if configs is None:
                return None
            path = quota_entity_config_path(entity)
            before = self._store.entry(path)
            self._store.put_entry(path, json.loads(encode_entity_config(EntityConfig.of(configs))))
            try:
                await self._store.durable()
            except OSError:
                self._store.put_entry(path, before)  # not recorded: as it was
                raise
            self._on_change(entity, dict(configs))
            return configs


def _decode(data: object) -> dict[str, str]:
    return decode_entity_config(json.dumps(data).encode()).as_dict()
