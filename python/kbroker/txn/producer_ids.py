"""Producer ids for idempotent producers, unique across restarts.

Ids are reserved from the metadata store in blocks, so there is no durable
write per producer; a restart skips the rest of the block it had.
"""

from __future__ import annotations

from typing import Protocol

from kbroker.metadata.store import MetadataStore

BLOCK = 1000


class ProducerIds(Protocol):
    """Where InitProducerId takes new ids: `ProducerIdAllocator` on a single node,
    `kbroker.cluster.producer_id_blocks.ZkProducerIdAllocator` in a cluster."""

    async def next_id(self) -> int: ...


class ProducerIdAllocator:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._next = 0
        self._end = 0

    async def next_id(self) -> int:
        """A new producer id; a new block is on disk before any id of it is handed out."""
        if self._next >= self._end:
            first = self._store.allocate_producer_ids(BLOCK)
            self._next, self._end = first, first + BLOCK
        pid = self._next
        self._next += 1
        # At once when the block is on disk; otherwise when it is.
        await self._store.durable()
        return pid
