"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, their expiry.

`OffsetManager` owns the offsets of the coordinator's groups: the checks an
OffsetCommit passes (generation, member, rebalance state), storing commits
and changing the group's offsets once stored (unless a later record committed
the partition meanwhile), OffsetFetch (UNSTABLE_OFFSET_COMMIT for a stable
read of a partition with a commit pending), tombstones for offsets deleted
(OffsetDelete, a deleted topic) or past ``offsets.retention.minutes``, and
forgetting a group left empty without offsets. Groups and their writes are
the `cache`'s; a commit keeps its member's session alive through the
membership side (``keep_alive``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.config import as_int
from kbroker.coordinator.cache import GroupCache
from kbroker.coordinator.group import Group, GroupState, Member
from kbroker.coordinator.records import CommittedOffset, offset_key, offset_value
from kbroker.coordinator.store import OFFSET_ERRORS, Record, answered, api_error
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.purgatory import Scheduler, TimerHandle

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost
    from kbroker.metadata.model import TopicMetadata

log = logging.getLogger(__name__)

E = ErrorCode
TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    committed: CommittedOffset | None
    error: ErrorCode = E.NONE


class OffsetManager:
    def __init__(
        self,
        broker: CoordinatorHost,
        cache: GroupCache,
        check: Callable[[str, bool], ErrorCode],
        keep_alive: Callable[[Group, Member], None],
        clock: Callable[[], int],
    ) -> None:
        self._broker = broker
        self._config = broker.config
        self._cache = cache
        self._check = check
        self._keep_alive = keep_alive
        self._clock = clock
        self._scheduler: Scheduler | None = None
        self._expiry: TimerHandle | None = None

    def consumer_member_error(
        self, group: Group, member_id: str, epoch: int, committing: bool, version: int
    ) -> ErrorCode:
        """Whether a member of a consumer group (KIP-848) may commit or fetch; the
        coordinator sets it (`ConsumerGroups.member_error`)."""
        return E.NONE

    def start(self, scheduler: Scheduler) -> None:
        """Expires offsets every ``offsets.retention.check.interval.ms`` from now on."""
        self._scheduler = scheduler
        self._schedule_expiry()

    def stop(self) -> None:
        self._scheduler = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _schedule_expiry(self) -> None:
        if self._scheduler is not None:
            interval_ms = as_int(self._config["offsets.retention.check.interval.ms"])
            self._expiry = self._scheduler.call_later(interval_ms / 1000, self._expire_now)

    def _expire_now(self) -> None:
        self._expiry = None
        done = self._cache.spawn(self.expire_offsets())
        done.add_done_callback(self._expired)

    def _expired(self, done: asyncio.Task[int]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error("offset expiry failed", exc_info=done.exception())
        self._schedule_expiry()

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartitionKey, tuple[int, int, str | None]],
        retention_ms: int = -1,
        version: int = 9,
    ) -> asyncio.Future[dict[TopicPartitionKey, ErrorCode]]:
        """OffsetCommit: (offset, leader epoch, metadata) per partition; an error per partition.

        The group's offsets change once the commit is stored.
        """
        error = self._check(group_id, True)
        if error != E.NONE:
            return answered(dict.fromkeys(offsets, error))
        group = self._cache.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation the coordinator does not know.
                return answered(dict.fromkeys(offsets, E.ILLEGAL_GENERATION))
            # Offsets of a consumer that assigns itself partitions.
            group = self._cache.groups[group_id] = Group(group_id, self._clock())
        if group.consumer is not None and not group.gone:
            error = self.consumer_member_error(group, member_id, generation_id, True, version)
        else:
            error = self._check_commit(group, member_id, group_instance_id, generation_id)
        if error != E.NONE:
            return answered(dict.fromkeys(offsets, error))
        return self._store_offsets(group, offsets, retention_ms)

    def _check_commit(
        self, group: Group, member_id: str, instance: str | None, generation_id: int
    ) -> ErrorCode:
        if group.gone:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, instance):
            return E.FENCED_INSTANCE_ID
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return E.NONE
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Its JoinGroup answer arrived, its SyncGroup has not: it may retry after.
            return E.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._keep_alive(group, member)
        return E.NONE

    def _store_offsets(
        self,
        group: Group,
        offsets: Mapping[TopicPartitionKey, tuple[int, int, str | None]],
        retention_ms: int,
    ) -> asyncio.Future[dict[TopicPartitionKey, ErrorCode]]:
        now = self._clock()
        results, accepted = checked_offsets(
            self._broker.metadata_cache.topics(),
            as_int(self._config["offset.metadata.max.bytes"]),
            offsets,
            now,
            now + retention_ms if retention_ms >= 0 else None,
        )
        if not accepted:
            return answered(results)
        records: list[Record] = [
            (offset_key(group.group_id, t, p), offset_value(c)) for (t, p), c in accepted.items()
        ]
        write = self._cache.append_batch(group, records)
        group.pending_commits.update(accepted.keys())

        async def stored() -> dict[TopicPartitionKey, ErrorCode]:
            outcome = await write
            error = api_error(outcome.error, OFFSET_ERRORS)
            group.pending_commits.subtract(accepted.keys())
            for tp in accepted:
                if group.pending_commits[tp] <= 0:
                    del group.pending_commits[tp]
            if error == E.NONE and self._cache.is_current(group):
                for tp, committed in accepted.items():
                    committed.record_offset = outcome.base_offset
                    group.apply_offset(tp, committed)
            results.update(dict.fromkeys(accepted, error))
            return results

        return asyncio.shield(self._cache.spawn(stored()))

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartitionKey] | None,
        require_stable: bool = False,
        member: tuple[str | None, int] | None = None,
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """OffsetFetch: the committed offsets of ``partitions`` (None: all the group has).
        ``member`` (id, epoch) is who asks, from OffsetFetch v9 on."""
        error = self._check(group_id, True)
        if error != E.NONE:
            return error, []
        group = self._cache.groups.get(group_id)
        if group is None or group.gone:
            return E.NONE, [FetchedOffset(t, p, None) for t, p in partitions or []]
        if member is not None and group.consumer is not None:
            # (A classic group answers a member's fetch without checking it, as Kafka's.)
            error = self.consumer_member_error(group, member[0] or "", member[1], False, 9)
            if error != E.NONE:
                return error, []
        if partitions is None:
            partitions = sorted(group.offsets)
        # KIP-447: a consumer asking for stable offsets retries while a commit of the
        # partition is being written or waits for its transaction.
        return E.NONE, [
            FetchedOffset(t, p, None, E.UNSTABLE_OFFSET_COMMIT)
            if require_stable and group.has_pending_offset_commit((t, p))
            else FetchedOffset(t, p, group.offsets.get((t, p)))
            for t, p in partitions
        ]

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartitionKey]
    ) -> asyncio.Future[tuple[ErrorCode, dict[TopicPartitionKey, ErrorCode]]]:
        """OffsetDelete: only for topics the group does not consume right now."""
        error = self._check(group_id, True)
        if error != E.NONE:
            return answered((error, {}))
        group = self._cache.groups.get(group_id)
        if group is None or group.gone:
            return answered((E.GROUP_ID_NOT_FOUND, {}))
        if group.state is not GroupState.EMPTY and group.protocol_type != "consumer":
            return answered((E.NON_EMPTY_GROUP, {}))
        results: dict[TopicPartitionKey, ErrorCode] = {}
        doomed: list[TopicPartitionKey] = []
        for tp in partitions:
            if group.state is not GroupState.EMPTY and group.is_subscribed_to(tp[0]):
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = E.NONE
                if tp in group.offsets or tp in group.pending_commits:
                    doomed.append(tp)
        # Transactional commits of these partitions are forgotten too (as Kafka does).
        group.remove_pending_txn_offsets(tp for tp, error in results.items() if error == E.NONE)
        write = self._remove_offsets(group, doomed)

        async def deleted() -> tuple[ErrorCode, dict[TopicPartitionKey, ErrorCode]]:
            error = await write
            if error != E.NONE:
                return error, {}
            self._maybe_drop_empty_group(group)
            return E.NONE, results

        return asyncio.shield(self._cache.spawn(deleted()))

    def _remove_offsets(
        self, group: Group, doomed: list[TopicPartitionKey]
    ) -> asyncio.Future[ErrorCode]:
        """Writes tombstones for ``doomed``; once stored, the group forgets them."""
        if not doomed:
            return answered(E.NONE)
        records: list[Record] = [(offset_key(group.group_id, t, p), None) for t, p in doomed]
        write = self._cache.append(group, records)

        async def removed() -> ErrorCode:
            error = await write
            if error != E.NONE:
                return api_error(error, OFFSET_ERRORS)
            if self._cache.is_current(group):
                for tp in doomed:
                    group.offsets.pop(tp, None)
            return E.NONE

        return self._cache.spawn(removed())

    def _maybe_drop_empty_group(self, group: Group) -> asyncio.Future[ErrorCode] | None:
        """An empty group with no offsets left is forgotten (and tombstoned)."""
        if (
            group.state is not GroupState.EMPTY
            or group.gone
            or group.has_offsets
            or group.pending_members
            or group.consumer is not None
            or not self._cache.is_current(group)
        ):
            return None
        return self._cache.forget(group, "is empty and has no offsets: removed")

    # -- expiry and topic changes --------------------------------------------------------

    async def expire_offsets(self) -> int:
        """Removes offsets past ``offsets.retention.minutes``; returns how many went."""
        now = self._clock()
        retention_ms = as_int(self._config["offsets.retention.minutes"]) * 60_000
        removed = 0
        for group in list(self._cache.groups.values()):
            if (
                not self._cache.is_current(group)
                or group.gone
                or self._cache.is_loading(group.group_id)
            ):
                continue
            # Offsets being committed are about to be fresh: left alone (as Kafka does).
            expired = [
                tp
                for tp in self._expired_offsets(group, now, retention_ms)
                if tp not in group.pending_commits
            ]
            if expired and await self._remove_offsets(group, expired) == E.NONE:
                removed += len(expired)
                log.info("group %s: %d offsets expired", group.group_id, len(expired))
            dropped = self._maybe_drop_empty_group(group)
            if dropped is not None:
                await dropped
        return removed

    @staticmethod
    def _expired_offsets(group: Group, now: int, retention_ms: int) -> list[TopicPartitionKey]:
        subscribed: set[str] = set()
        if group.consumer is not None:
            # A consumer group (KIP-848): what its members consume now never expires; the
            # rest ages from each commit, as Kafka's modern groups do.
            if group.consumer.members:
                subscribed = set(group.consumer.subscription)
            base: Callable[[CommittedOffset], int] = lambda c: c.commit_timestamp  # noqa: E731
        elif group.protocol_type is None:
            # Offsets of consumers that assign themselves: age from each commit.
            base = lambda c: c.commit_timestamp  # noqa: E731
        elif group.state is GroupState.EMPTY:
            # Nobody consumes: age from when the group became empty.
            base = lambda c: group.state_timestamp  # noqa: E731
        elif group.state is GroupState.STABLE and group.protocol_type == "consumer":
            topics = group.subscribed_topics()
            if topics is None:
                return []
            # Topics the members stopped consuming age from their last commit.
            subscribed = topics
            base = lambda c: c.commit_timestamp  # noqa: E731
        else:
            return []
        out = []
        for tp, c in group.offsets.items():
            if tp[0] in subscribed:
                continue
            if c.expire_timestamp is not None:
                if now >= c.expire_timestamp:
                    out.append(tp)
            elif now - base(c) >= retention_ms:
                out.append(tp)
        return out

    def on_topic_deleted(self, topic: str) -> None:
        """A topic is gone: its committed offsets go too (written in the background)."""
        for group in list(self._cache.groups.values()):
            if self._cache.is_loading(group.group_id) or group.gone:
                continue
            group.remove_pending_txn_offsets(
                tp
                for table in (group.pending_txn_offsets, group.txn_offsets_committed_unwritten)
                for offsets in table.values()
                for tp in offsets
                if tp[0] == topic
            )
            doomed = [tp for tp in {**group.offsets, **group.pending_commits} if tp[0] == topic]
            if doomed:
                self._cache.spawn(
                    self._topic_offsets_removed(group, self._remove_offsets(group, doomed))
                )

    async def _topic_offsets_removed(self, group: Group, write: asyncio.Future[ErrorCode]) -> None:
        if await write == E.NONE:
            dropped = self._maybe_drop_empty_group(group)
            if dropped is not None:
                await dropped


def checked_offsets(
    topics: Mapping[str, TopicMetadata],
    max_metadata: int,
    offsets: Mapping[TopicPartitionKey, tuple[int, int, str | None]],
    now: int,
    expire_at: int | None,
) -> tuple[dict[TopicPartitionKey, ErrorCode], dict[TopicPartitionKey, CommittedOffset]]:
    """What OffsetCommit and TxnOffsetCommit refuse before anything is written (a partition
    that does not exist, metadata over ``offset.metadata.max.bytes``), and what they take."""
    refused: dict[TopicPartitionKey, ErrorCode] = {}
    accepted: dict[TopicPartitionKey, CommittedOffset] = {}
    for tp, (offset, epoch, metadata) in offsets.items():
        topic = topics.get(tp[0])
        if topic is None or tp[1] not in topic.partitions:
            refused[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif metadata is not None and len(metadata.encode()) > max_metadata:
            refused[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
        else:
            accepted[tp] = CommittedOffset(offset, epoch, metadata or "", now, expire_at)
    return refused, accepted
