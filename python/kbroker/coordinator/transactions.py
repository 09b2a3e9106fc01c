"""Transactional offset commits: TxnOffsetCommit and the markers that end them.

`TxnOffsetManager` owns the group side of exactly-once processing (Kafka's
GroupCoordinator.handleTxnCommitOffsets and the transactional parts of its
GroupMetadataManager):

- `commit_offsets` (TxnOffsetCommit): the offsets are written to the group's
  ``__consumer_offsets`` partition in a transactional batch of the producer
  (its id and epoch; the partition refuses a fenced epoch and, as KIP-890
  has it, first asks the transaction coordinator whether the partition is
  in the producer's transaction when it would open it there) and wait,
  pending in the group, for their transaction's marker on that partition. A
  member of a group checks as in OffsetCommit v3+ (UNKNOWN_MEMBER_ID,
  ILLEGAL_GENERATION, FENCED_INSTANCE_ID), but a commit without member or
  generation (v0-v2, or a producer outside the group) is taken by any group.
- `on_txn_completed`: a marker was written (the cache says when it counts):
  the groups of that partition with offsets pending from that producer get
  them committed (COMMIT; a later record of a partition wins) or dropped
  (ABORT). An index from producer to groups finds them, as Kafka's
  openGroupsForProducer does; loading and unloading keep it current.

OffsetFetch's require_stable (UNSTABLE_OFFSET_COMMIT while such a commit is
pending) is answered by `offsets.OffsetManager` from the group's state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kbroker.config import as_int
from kbroker.coordinator.cache import GroupCache
from kbroker.coordinator.group import Group, GroupState
from kbroker.coordinator.offsets import checked_offsets
from kbroker.coordinator.records import offset_key, offset_value
from kbroker.coordinator.store import Record, TxnProducer, answered, txn_offset_error
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost

log = logging.getLogger(__name__)

E = ErrorCode
TopicPartitionKey = tuple[str, int]
# (offset, leader epoch, metadata) per partition, as a request gives them.
OffsetRequest = Mapping[TopicPartitionKey, tuple[int, int, str | None]]

NO_PRODUCER_ID = -1


class TxnOffsetManager:
    def __init__(
        self,
        broker: CoordinatorHost,
        cache: GroupCache,
        check: Callable[[str, bool], ErrorCode],
        clock: Callable[[], int],
    ) -> None:
        self._broker = broker
        self._config = broker.config
        self._cache = cache
        self._check = check
        self._clock = clock
        # producer id -> ids of the groups with offsets pending from it
        self._open_groups: dict[int, set[str]] = {}

    # -- TxnOffsetCommit -------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: OffsetRequest,
    ) -> asyncio.Future[dict[TopicPartitionKey, ErrorCode]]:
        """TxnOffsetCommit: an error per partition, once the commit is written (pending
        until its transaction ends) or refused."""
        error = self._check(group_id, False)
        if error != E.NONE:
            return answered(dict.fromkeys(offsets, error))
        if producer_id < 0:
            # Not a transactional producer: no transaction could hold these offsets.
            return answered(dict.fromkeys(offsets, E.INVALID_PRODUCER_ID_MAPPING))
        group = self._cache.groups.get(group_id)
        # A group the coordinator does not know is an empty one to check against.
        error = self._check_member(
            group or Group(group_id, self._clock()), member_id, group_instance_id, generation_id
        )
        if error != E.NONE:
            return answered(dict.fromkeys(offsets, error))
        if group is None:
            group = self._cache.groups[group_id] = Group(group_id, self._clock())
        return self._store(
            group, TxnProducer(transactional_id, producer_id, producer_epoch), offsets
        )

    @staticmethod
    def _check_member(
        group: Group, member_id: str, instance: str | None, generation_id: int
    ) -> ErrorCode:
        if group.gone:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return E.NONE
        if generation_id >= 0 or member_id or instance is not None:
            if instance is not None:
                current = group.static_member_id(instance)
                if current is None:
                    return E.UNKNOWN_MEMBER_ID
                if current != member_id:
                    return E.FENCED_INSTANCE_ID
            elif member_id not in group.members:
                return E.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        # Without member and generation (TxnOffsetCommit v0-v2) any group takes it.
        return E.NONE

    def _store(
        self, group: Group, producer: TxnProducer, offsets: OffsetRequest
    ) -> asyncio.Future[dict[TopicPartitionKey, ErrorCode]]:
        results, accepted = checked_offsets(
            self._broker.metadata_cache.topics(),
            as_int(self._config["offset.metadata.max.bytes"]),
            offsets,
            self._clock(),
            None,
        )
        if not accepted:
            return answered(results)
        records: list[Record] = [
            (offset_key(group.group_id, t, p), offset_value(c)) for (t, p), c in accepted.items()
        ]
        write = self._cache.append_batch(group, records, producer)
        producer_id = producer.producer_id
        group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
        self._open_groups.setdefault(producer_id, set()).add(group.group_id)

        async def stored() -> dict[TopicPartitionKey, ErrorCode]:
            outcome = await write
            error = txn_offset_error(outcome.error)
            for tp, committed in accepted.items():
                if error == E.NONE:
                    committed.record_offset = outcome.base_offset
                group.txn_offset_stored(producer_id, tp, committed, error == E.NONE)
            # The index follows the group as it is now (it may have been reloaded meanwhile).
            current = self._cache.groups.get(group.group_id)
            if current is None or producer_id not in current.pending_txn_offsets:
                self._forget_open_group(producer_id, group.group_id)
            if error != E.NONE:
                log.debug(
                    "group %s: transactional offset commit of producer %d failed: %s",
                    group.group_id,
                    producer_id,
                    error.name,
                )
            results.update(dict.fromkeys(accepted, error))
            return results

        return asyncio.shield(self._cache.spawn(stored()))

    # -- markers ---------------------------------------------------------------------------

    def on_txn_completed(self, index: int, producer_id: int, commit: bool) -> None:
        """``producer_id``'s transaction ended in partition ``index``: its offsets there
        become committed (COMMIT) or go (ABORT)."""
        open_groups = self._open_groups.get(producer_id)
        if not open_groups:
            return
        for group_id in [g for g in open_groups if self._cache.partition_of(g) == index]:
            open_groups.discard(group_id)
            group = self._cache.groups.get(group_id)
            if group is not None and group.state is not GroupState.DEAD:
                group.complete_txn_offsets(producer_id, commit)
        if not open_groups:
            del self._open_groups[producer_id]

    def on_group_loaded(self, group: Group) -> None:
        for producer_id in group.pending_txn_offsets:
            self._open_groups.setdefault(producer_id, set()).add(group.group_id)

    def on_group_unloaded(self, group: Group) -> None:
        for producer_id in list(self._open_groups):
            self._forget_open_group(producer_id, group.group_id)

    def _forget_open_group(self, producer_id: int, group_id: str) -> None:
        groups = self._open_groups.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self._open_groups[producer_id]

    def open_producers(self, group_id: str) -> list[int]:
        """The producers with offsets pending in ``group_id`` (for tests and tools)."""
        return sorted(p for p, groups in self._open_groups.items() if group_id in groups)
