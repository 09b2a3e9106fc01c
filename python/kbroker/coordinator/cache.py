"""The groups this coordinator owns, by ``__consumer_offsets`` partition, and their writes.

A group lives in partition ``abs(java_hashcode(group_id)) % partitions`` of
``__consumer_offsets`` (as in Kafka; the count is fixed once known) and is
served by that partition's leader. `GroupCache` owns (Kafka's
GroupMetadataManager does the same):

- which partitions are this coordinator's, at which coordinator epoch:
  `on_elected` loads a partition's groups in the background (its groups get
  COORDINATOR_LOAD_IN_PROGRESS meanwhile; a partition with nothing to read
  is loaded at once) and `on_resigned` drops them (NOT_COORDINATOR then).
  Calls with an epoch older than the last one seen are ignored;
- the loaded groups (`groups`), and `forget`, which drops an empty group
  once its tombstones are stored;
- the order of writes: `append` starts each at once, so records reach the
  log in the order the coordinator decided them, and `spawn` runs what
  follows a write in a task no requester can cancel, which `drain` awaits;
- when a transaction's marker on one of its partitions counts
  (`on_txn_marker`): at once for a loaded partition; for one being loaded,
  once loaded, and only if the load did not read it already; never for a
  partition it does not own (a follower's).

What loading and unloading mean for members (sessions to arm, waiters to
answer) is the membership side's, and what a marker means for a group's
offsets the transactional side's: they pass the callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kbroker.coordinator import consumer_records
from kbroker.coordinator.group import Group, GroupState
from kbroker.coordinator.records import OFFSETS_TOPIC, group_key, offset_key, partition_for
from kbroker.coordinator.replay import PartitionReplay
from kbroker.coordinator.store import OffsetsStore, Record, Stored, TxnProducer
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

E = ErrorCode
T = TypeVar("T")


class GroupCache:
    def __init__(
        self,
        store: OffsetsStore,
        clock: Callable[[], int],
        on_loaded: Callable[[Group], None],
        on_unloaded: Callable[[Group, ErrorCode], None],
        on_txn_completed: Callable[[int, int, bool], None] = lambda _i, _p, _c: None,
    ) -> None:
        """``on_txn_completed(partition, producer_id, commit)``: a transaction's marker
        counts for the groups of that partition."""
        self.store = store
        self.clock = clock
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self._on_txn_completed = on_txn_completed
        # Markers written while their partition loads: (producer id, commit, offset).
        self._markers_while_loading: dict[int, list[tuple[int, bool, int]]] = {}
        self.groups: dict[str, Group] = {}
        self._partitions: int | None = None
        self._epochs: dict[int, int] = {}
        self._owned: set[int] = set()
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- partitions ------------------------------------------------------------------

    def partition_count(self) -> int | None:
        """Partitions groups map to; None while ``__consumer_offsets`` does not exist."""
        if self._partitions is None:
            self._partitions = self.store.partition_count()
        return self._partitions

    def partition_of(self, group_id: str) -> int:
        count = self.partition_count()
        assert count is not None
        return partition_for(group_id, count)

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def is_loading(self, group_id: str) -> bool:
        return self.partition_count() is not None and self.partition_of(group_id) in self._loading

    def ownership_error(self, group_id: str) -> ErrorCode:
        """NONE when the group's partition is this coordinator's and loaded."""
        index = self.partition_of(group_id)
        if index in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if index not in self._owned:
            return E.NOT_COORDINATOR
        return E.NONE

    def _is_stale(self, index: int, epoch: int) -> bool:
        """Older than the last epoch seen for ``index`` (else that epoch becomes it)."""
        current = self._epochs.get(index)
        if current is not None and epoch < current:
            log.info(
                "%s-%d: ignoring coordinator epoch %d, older than %d",
                OFFSETS_TOPIC,
                index,
                epoch,
                current,
            )
            return True
        self._epochs[index] = epoch
        return False

    def on_elected(self, index: int, epoch: int) -> None:
        """This broker leads partition ``index``: its groups are loaded in the background."""
        if self._is_stale(index, epoch) or index in self._owned or index in self._loading:
            return
        self.partition_count()
        if self.store.is_empty(index):
            self._owned.add(index)
            return
        log.info("%s-%d: loading groups (coordinator epoch %d)", OFFSETS_TOPIC, index, epoch)
        self._loading[index] = asyncio.ensure_future(self._load(index))

    def on_resigned(self, index: int, epoch: int) -> None:
        """This broker no longer leads partition ``index``: its groups go."""
        if self._is_stale(index, epoch):
            return
        task = self._loading.pop(index, None)
        if task is not None:
            task.cancel()
        self._markers_while_loading.pop(index, None)
        if index in self._owned or task is not None:
            log.info("%s-%d: unloading groups (coordinator epoch %d)", OFFSETS_TOPIC, index, epoch)
        self._owned.discard(index)
        for group in [g for g in self.groups.values() if self.partition_of(g.group_id) == index]:
            self._unload(group, E.NOT_COORDINATOR)

    async def stop(self) -> None:
        """Drops every partition (waiters told NOT_COORDINATOR); waits for writes under way."""
        loads = list(self._loading.values())
        self._loading.clear()
        self._markers_while_loading.clear()
        for task in loads:
            task.cancel()
        for task in loads:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._owned.clear()
        self._epochs.clear()
        for group in list(self.groups.values()):
            self._unload(group, E.NOT_COORDINATOR)

    def _unload(self, group: Group, error: ErrorCode) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        self._on_unloaded(group, error)

    # -- loading ----------------------------------------------------------------------

    async def _load(self, index: int) -> None:
        end = self.store.log_end_offset(index)
        try:
            groups = await self._read(index, end)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, index)
            groups = []
        if self._loading.get(index) is not asyncio.current_task():
            return  # resigned meanwhile
        del self._loading[index]
        self._owned.add(index)
        for group in groups:
            if group.group_id not in self.groups:
                self.groups[group.group_id] = group
                self._on_loaded(group)
        log.info("%s-%d: loaded %d groups", OFFSETS_TOPIC, index, len(groups))
        # Markers the load did not read (written after it began) count now.
        for producer_id, commit, offset in self._markers_while_loading.pop(index, []):
            if offset >= end:
                self._on_txn_completed(index, producer_id, commit)

    async def _read(self, index: int, end: int) -> list[Group]:
        replay = PartitionReplay(index)
        async for chunk in self.store.read_partition(index, end):
            for batch in chunk:
                replay.add(batch)
            await asyncio.sleep(0)
        return replay.groups(self.clock())

    # -- transactions --------------------------------------------------------------------

    def on_txn_marker(self, index: int, producer_id: int, commit: bool, offset: int) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` was written at ``offset`` of
        partition ``index`` (on a leader or a follower)."""
        if index in self._loading:
            self._markers_while_loading.setdefault(index, []).append((producer_id, commit, offset))
        elif index in self._owned:
            self._on_txn_completed(index, producer_id, commit)

    # -- groups and writes -----------------------------------------------------------------

    def is_current(self, group: Group) -> bool:
        """Still a group of this coordinator (not dead, unloaded or replaced)."""
        return self.groups.get(group.group_id) is group and group.state is not GroupState.DEAD

    def append(self, group: Group, records: list[Record]) -> asyncio.Future[ErrorCode]:
        """Appends ``records`` to the group's partition now (writes keep their order); the
        future is done once they are committed."""
        return self.store.append(self.partition_of(group.group_id), records, self.clock())

    def append_batch(
        self, group: Group, records: list[Record], producer: TxnProducer | None = None
    ) -> asyncio.Future[Stored]:
        """`append`, telling where the batch went (a transactional batch of ``producer``)."""
        return self.store.append_batch(
            self.partition_of(group.group_id), records, self.clock(), producer
        )

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Runs what follows a write as a task of its own: no requester can cancel it
        (hand it out through `asyncio.shield`), and `drain` waits for it."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self, timeout_s: float) -> None:
        """Waits (at most ``timeout_s``) for what follows the writes under way."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    def forget(self, group: Group, why: str) -> asyncio.Future[ErrorCode]:
        """Writes the tombstones of an empty group and its offsets, then drops it.

        Until the write is done the group is `Group.gone`: nobody joins or
        commits (they are told to retry), so what is dropped is what was
        tombstoned. Offsets still being committed get tombstones too: they
        are written after the commit.
        """
        group.pending_delete = True
        gid = group.group_id
        records: list[Record] = [
            (offset_key(gid, t, p), None) for t, p in {**group.offsets, **group.pending_commits}
        ]
        records.append((group_key(gid), None))
        if group.consumer is not None:
            records.extend(consumer_records.tombstones(group.consumer))
        write = self.append(group, records)

        async def forgotten() -> ErrorCode:
            error = await write
            group.pending_delete = False
            if error == E.NONE and self.is_current(group):
                self._unload(group, E.COORDINATOR_NOT_AVAILABLE)
                log.info("group %s %s", gid, why)
            return error

        return self.spawn(forgotten())
