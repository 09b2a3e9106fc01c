"""Replaying one ``__consumer_offsets`` partition into the groups it holds.

`PartitionReplay` takes the partition's batches oldest first (as loading
reads them) and rebuilds what Kafka's GroupMetadataManager rebuilds:

- each group's metadata (its newest record; a tombstone removes it);
- the state of each consumer group of KIP-848 (`consumer_records`);
- committed offsets: the newest record per partition, a tombstone removing it;
- transactional offset commits (records of a producer's transactional
  batch) stay pending under their producer until that producer's marker:
  at COMMIT each becomes the committed offset unless a later record
  committed that partition already (the record offsets decide, not the
  order of the markers), at ABORT they are dropped. A transaction with no
  marker yet stays pending in its group (its coordinator will end it).

A group with neither metadata nor offsets (committed or pending) is not
loaded. Unreadable records are skipped with a warning, as Kafka does with
keys it does not know.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from kbroker.coordinator.consumer_records import ConsumerGroupReplay, ConsumerKey
from kbroker.coordinator.group import Group
from kbroker.coordinator.records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupKey,
    GroupRecord,
    OffsetKey,
    RecordFormatError,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from kbroker.coordinator.store import StoredBatch

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
GroupPartition = tuple[str, TopicPartitionKey]


class PartitionReplay:
    def __init__(self, index: int) -> None:
        self.index = index
        self._offsets: dict[str, dict[TopicPartitionKey, CommittedOffset]] = defaultdict(dict)
        self._records: dict[str, GroupRecord | None] = {}
        # producer id -> (group, partition) -> its pending transactional commit
        self._pending: dict[int, dict[GroupPartition, CommittedOffset]] = {}
        self._consumer_groups = ConsumerGroupReplay()

    def add(self, batch: StoredBatch) -> None:
        """The next batch of the partition."""
        if batch.marker is not None:
            self._end_transaction(batch.producer_id, batch.marker)
            return
        for key_bytes, value in batch.records:
            try:
                key = parse_key(key_bytes)
                if isinstance(key, OffsetKey):
                    self._offset(batch, key, value)
                elif isinstance(key, GroupKey):
                    self._records[key.group] = None if value is None else parse_group_value(value)
                elif isinstance(key, ConsumerKey):
                    try:
                        self._consumer_groups.add(key, value)
                    except ValueError as exc:
                        raise RecordFormatError(str(exc)) from None
            except RecordFormatError as exc:
                log.warning(
                    "skipping unreadable record in %s-%d: %s", OFFSETS_TOPIC, self.index, exc
                )

    def _offset(self, batch: StoredBatch, key: OffsetKey, value: bytes | None) -> None:
        tp = (key.topic, key.partition)
        if batch.transactional:
            pending = self._pending.setdefault(batch.producer_id, {})
            if value is None:
                pending.pop((key.group, tp), None)
            else:
                committed = parse_offset_value(value)
                committed.record_offset = batch.base_offset
                pending[(key.group, tp)] = committed
        elif value is None:
            self._offsets[key.group].pop(tp, None)
        else:
            committed = parse_offset_value(value)
            committed.record_offset = batch.base_offset
            self._offsets[key.group][tp] = committed

    def _end_transaction(self, producer_id: int, commit: bool) -> None:
        pending = self._pending.pop(producer_id, None)
        if not commit or not pending:
            return
        for (group_id, tp), committed in pending.items():
            offsets = self._offsets[group_id]
            current = offsets.get(tp)
            if current is None or current.older_than(committed):
                offsets[tp] = committed

    def groups(self, now_ms: int) -> list[Group]:
        """The groups replayed so far, with their offsets and pending transactions."""
        pending_by_group: dict[str, dict[int, dict[TopicPartitionKey, CommittedOffset]]] = (
            defaultdict(dict)
        )
        for producer_id, pending in self._pending.items():
            for (group_id, tp), committed in pending.items():
                pending_by_group[group_id].setdefault(producer_id, {})[tp] = committed
        out = []
        consumer_groups = self._consumer_groups.groups()
        candidates = (
            set(self._records)
            | {g for g, o in self._offsets.items() if o}
            | set(pending_by_group)
            | set(consumer_groups)
        )
        for group_id in sorted(candidates):
            record = self._records.get(group_id)
            group = (
                Group.from_record(group_id, record, now_ms)
                if record is not None
                else Group(group_id, now_ms)
            )
            group.offsets = dict(self._offsets.get(group_id, {}))
            group.pending_txn_offsets = pending_by_group.get(group_id, {})
            group.consumer = consumer_groups.get(group_id)
            if record is None and not group.has_offsets and group.consumer is None:
                continue
            out.append(group)
        return out
