"""A single node's ACLs, kept in its metadata store under ZooKeeper's paths and JSON.

`LocalAclStorage` is the `AclStorage` of a broker without ZooKeeper: each
resource pattern's ACLs are an entry of `LocalMetadataStore` at the path
and in the JSON a cluster keeps in ZooKeeper (/kafka-acl/Topic/t1:
``{"acls":[...],"version":1}``), so one codec (`kbroker.cluster.zk_data`)
serves both. A change is answered once it is on disk; when the disk
refuses it, the entry is put back as it was and the request is answered
KAFKA_STORAGE_ERROR. One process writes, under the authorizer's lock, so
versions only say whether an entry exists (0) or not (`ABSENT`).
"""

from __future__ import annotations

from kbroker.cluster.errors import ZkDataError
from kbroker.cluster.zk_data import (
    ACL_PATH,
    EXTENDED_ACL_PATH,
    acl_path,
    acl_pattern_of_path,
    acls_from_json,
    acls_to_json,
)
from kbroker.metadata.store import LocalMetadataStore
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.security.acl import ResourcePattern
from kbroker.security.authorizer import ABSENT, NO_ACLS, Entries, VersionedAcls


class LocalAclStorage:
    def __init__(self, store: LocalMetadataStore) -> None:
        self._store = store

    def read_all(self) -> dict[ResourcePattern, VersionedAcls]:
        """Every stored ACL, by resource pattern; ZkDataError names an unreadable entry
        (starting without some DENY could allow what must not be)."""
        out: dict[ResourcePattern, VersionedAcls] = {}
        for prefix in (ACL_PATH + "/", EXTENDED_ACL_PATH + "/"):
            for path, data in sorted(self._store.entries(prefix).items()):
                try:
                    pattern = acl_pattern_of_path(path)
                    out[pattern] = VersionedAcls(acls_from_json(data), 0)
                except ZkDataError as exc:
                    raise ZkDataError(f"the metadata entry {path}: {exc}") from None
        return out

    async def read(self, pattern: ResourcePattern) -> VersionedAcls:
        data = self._store.entry(acl_path(pattern))
        if data is None:
            return NO_ACLS
        try:
            return VersionedAcls(acls_from_json(data), 0)
        except ZkDataError as exc:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the stored ACLs of {pattern} are unreadable: {exc}",
            ) from None

    async def write(self, pattern: ResourcePattern, entries: Entries, expected: int) -> int | None:
        path = acl_path(pattern)
        previous = self._store.entry(path)
        if (previous is None) != (expected == ABSENT):
            return None
        self._store.put_entry(path, acls_to_json(entries) if entries else None)
        try:
            await self._store.durable()
        except OSError as exc:
            self._store.put_entry(path, previous)
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"the ACLs of {pattern} could not be written to disk ({exc}); nothing changed",
            ) from None
        return 0 if entries else ABSENT

    async def announce(self, pattern: ResourcePattern) -> None:
        """Nothing to do: no other broker reads them."""
