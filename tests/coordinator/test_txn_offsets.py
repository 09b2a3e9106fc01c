"""Transactional offset commits in the group coordinator, in process, on real log files.

The batches a transactional producer's offset commits and its transaction's
markers leave in ``__consumer_offsets`` are written into the partition's real
log in Kafka's format (a transactional batch of the producer; a control batch
whose record key says COMMIT or ABORT), then:

- loading replays them as Kafka's GroupMetadataManager does (pending until the
  marker; the later record of a partition wins; aborted offsets dropped; an open
  transaction stays pending), after a restart of the broker's storage;
- the marker listener (`GroupCoordinator.on_txn_marker`) ends a loaded group's
  pending commits the way the replay would, and a marker written while its
  partition loads counts once, after the load, unless the load read it;
- OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile;
- TxnOffsetCommit's own checks (group, member, generation, instance) answer
  before anything is written.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

from kbroker._kbroker import build_batch, crc32c
from kbroker.broker import Broker
from kbroker.coordinator.records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    offset_key,
    offset_value,
)
from kbroker.coordinator.store import StoredBatch
from kbroker.log import Log, TopicPartition
from kbroker.log.log import now_ms
from kbroker.protocol import ErrorCode
from tests.coordinator.test_coordinator import run, running, stable_group, wait_loaded

E = ErrorCode

# A v2 batch header: the attributes (int16) at 21, the CRC (uint32) over what follows them.
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


def offsets_batch(
    group: str,
    offsets: dict[tuple[str, int], int | None],
    producer: tuple[int, int] | None = None,
) -> bytes:
    """One batch of offset commits (None: a tombstone); with ``producer`` (id, epoch), a
    transactional batch of that producer, as a TxnOffsetCommit writes it."""
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (
            offset_key(group, t, p),
            None if o is None else offset_value(CommittedOffset(o, -1, "", now_ms())),
            [],
        )
        for (t, p), o in offsets.items()
    ]
    if producer is None:
        return build_batch(records, 0, 0, now_ms())
    return build_batch(
        records,
        0,
        0,
        now_ms(),
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=0,
        transactional=True,
    )


def marker_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> bytes:
    """A transaction's marker as Kafka writes it: a transactional control batch of one
    record, key (version 0, type 1 COMMIT / 0 ABORT), value (version 0, coordinator
    epoch)."""
    record: tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]] = (
        struct.pack(">hh", 0, 1 if commit else 0),
        struct.pack(">hi", 0, coordinator_epoch),
        [],
    )
    data = bytearray(
        build_batch(
            [record],
            0,
            0,
            now_ms(),
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=-1,
            transactional=True,
        )
    )
    (attributes,) = struct.unpack_from(">h", data, _ATTRIBUTES_AT)
    struct.pack_into(">h", data, _ATTRIBUTES_AT, attributes | _CONTROL | _TRANSACTIONAL)
    struct.pack_into(">I", data, _CRC_AT, crc32c(bytes(data[_ATTRIBUTES_AT:])))
    return bytes(data)


def offsets_log(broker: Broker, group: str) -> tuple[TopicPartition, Log]:
    co = broker.coordinator
    assert co.ensure_offsets_topic()
    tp = TopicPartition(OFFSETS_TOPIC, co.cache.partition_of(group))
    partition = broker.replica_manager.get_partition(tp)
    assert partition is not None
    return tp, partition.log


def stored(broker: Broker, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], object]:
    """What OffsetFetch gives: the offset, or the error (require_stable)."""
    error, fetched = broker.coordinator.offsets.fetch_offsets(group, tps, require_stable=True)
    assert error == E.NONE
    return {
        (f.topic, f.partition): f.error
        if f.error != E.NONE
        else (None if f.committed is None else f.committed.offset)
        for f in fetched
    }


def test_the_format_of_the_marker_batches_is_the_one_loading_reads(tmp_path: Path) -> None:
    """The hand-made marker is what store.read_partition decodes as a marker (the helper
    would otherwise prove nothing)."""

    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1)
            _, log = offsets_log(broker, "g")
            log.append(offsets_batch("g", {("t", 0): 4}, producer=(7, 2)))
            log.append(marker_batch(7, 2, commit=True, coordinator_epoch=5))
            log.append(marker_batch(8, 0, commit=False))
            index = broker.coordinator.cache.partition_of("g")
            batches: list[StoredBatch] = []
            async for chunk in broker.coordinator.store.read_partition(index, log.log_end_offset):
                batches.extend(chunk)
            assert [(b.base_offset, b.producer_id, b.transactional, b.marker) for b in batches] == [
                (0, 7, True, None),
                (1, 7, True, True),
                (2, 8, True, False),
            ]
            assert len(batches[0].records) == 1 and batches[1].records == []

    run(body())


def test_loading_replays_transactional_offsets_and_their_markers(tmp_path: Path) -> None:
    """One partition's history, replayed after a restart the way Kafka 3.9 replays it."""
    t0, t1, t2, t3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)

    async def write() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 4, 1)
            _, log = offsets_log(broker, "g")
            log.append(offsets_batch("g", {t0: 5}))
            # Producer 1 commits t0 at 10 in its transaction ...
            log.append(offsets_batch("g", {t0: 10, t1: 11}, producer=(1, 0)))
            # ... and a consumer commits t0 at 6 after that record, before the marker:
            # the later record wins, whatever the marker says.
            log.append(offsets_batch("g", {t0: 6}))
            log.append(offsets_batch("g", {t2: 20}, producer=(2, 0)))
            log.append(marker_batch(1, 0, commit=True))
            log.append(marker_batch(2, 0, commit=False))
            # Producer 3's transaction is still open; producer 4 committed a tombstone
            # inside its transaction after an offset (it counts as not committed).
            log.append(offsets_batch("g", {t3: 30}, producer=(3, 0)))
            log.append(offsets_batch("h", {t1: 40}, producer=(4, 0)))
            log.append(offsets_batch("h", {t1: None}, producer=(4, 0)))
            log.append(marker_batch(4, 0, commit=True))

    async def load() -> None:
        async with running(tmp_path) as broker:
            await wait_loaded(broker)
            co = broker.coordinator
            assert stored(broker, "g", [t0, t1, t2, t3]) == {
                t0: 6,
                t1: 11,
                t2: None,
                t3: E.UNSTABLE_OFFSET_COMMIT,
            }
            # Without require_stable, the committed offset (none yet for t3).
            _, fetched = co.offsets.fetch_offsets("g", [t3])
            assert fetched[0].committed is None and fetched[0].error == E.NONE
            assert co.txn_offsets.open_producers("g") == [3]
            # Producer 4's transaction committed nothing; its group has no offsets at all.
            assert "h" not in co.groups

    run(write())
    run(load())


def test_a_marker_heard_by_the_coordinator_ends_the_pending_offsets(tmp_path: Path) -> None:
    """The live path (the replica manager's marker listener) gives what a reload gives."""
    t0, t1 = ("t", 0), ("t", 1)

    async def first() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 2, 1)
            _, log = offsets_log(broker, "g")
            log.append(offsets_batch("g", {t0: 1}, producer=(5, 0)))
            log.append(offsets_batch("g", {t1: 2}, producer=(6, 0)))

    async def second() -> None:
        async with running(tmp_path) as broker:
            await wait_loaded(broker)
            co = broker.coordinator
            tp, log = offsets_log(broker, "g")
            assert stored(broker, "g", [t0, t1]) == {
                t0: E.UNSTABLE_OFFSET_COMMIT,
                t1: E.UNSTABLE_OFFSET_COMMIT,
            }
            # A marker of another partition, or of a producer with nothing here: no change.
            co.on_txn_marker(TopicPartition(OFFSETS_TOPIC, tp.partition + 1), 5, True, 0)
            co.on_txn_marker(TopicPartition("t", tp.partition), 5, True, 0)
            co.on_txn_marker(tp, 99, True, 0)
            assert stored(broker, "g", [t0])[t0] == E.UNSTABLE_OFFSET_COMMIT
            commit_at = log.append(marker_batch(5, 0, commit=True)).first_offset
            co.on_txn_marker(tp, 5, True, commit_at)
            abort_at = log.append(marker_batch(6, 0, commit=False)).first_offset
            co.on_txn_marker(tp, 6, False, abort_at)
            assert stored(broker, "g", [t0, t1]) == {t0: 1, t1: None}
            assert co.txn_offsets.open_producers("g") == []

    async def third() -> None:
        async with running(tmp_path) as broker:
            await wait_loaded(broker)
            assert stored(broker, "g", [t0, t1]) == {t0: 1, t1: None}

    run(first())
    run(second())
    run(third())


def test_a_marker_written_while_its_partition_loads_counts_once_loaded(tmp_path: Path) -> None:
    t0, t1 = ("t", 0), ("t", 1)

    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 2, 1)
            co = broker.coordinator
            tp, log = offsets_log(broker, "g")
            await wait_loaded(broker)
            log.append(offsets_batch("g", {t0: 3}, producer=(1, 0)))
            log.append(offsets_batch("g", {t1: 4}, producer=(2, 0)))
            # Producer 1's marker is in the log before the next load starts, and so is its
            # next transaction's commit: the load reads both, and hearing of that marker
            # during the load must not end the next transaction.
            before = log.append(marker_batch(1, 0, commit=False)).first_offset
            log.append(offsets_batch("g", {t0: 9}, producer=(1, 0)))
            gate = asyncio.Event()
            real_read = co.store.read_partition

            async def gated_read(index: int, end: int) -> AsyncIterator[list[StoredBatch]]:
                await gate.wait()
                async for chunk in real_read(index, end):
                    yield chunk

            co.store.read_partition = gated_read  # type: ignore[method-assign]
            co.on_resigned(tp.partition, 1)
            co.on_elected(tp.partition, 2)
            for _ in range(5):
                await asyncio.sleep(0)  # the load has begun: its end is fixed
            assert co.cache.is_loading("g")
            co.on_txn_marker(tp, 1, False, before)
            # Producer 2's marker comes after the load began: it counts once loaded.
            after = log.append(marker_batch(2, 0, commit=True)).first_offset
            co.on_txn_marker(tp, 2, True, after)
            assert co.offsets.fetch_offsets("g", [t1])[0] == E.COORDINATOR_LOAD_IN_PROGRESS
            gate.set()
            await wait_loaded(broker)
            assert stored(broker, "g", [t0, t1]) == {t0: E.UNSTABLE_OFFSET_COMMIT, t1: 4}
            co.on_txn_marker(tp, 1, True, log.append(marker_batch(1, 0, commit=True)).first_offset)
            assert stored(broker, "g", [t0]) == {t0: 9}

            # Resigning while loading forgets the markers heard meanwhile.
            log.append(offsets_batch("g", {t0: 8}, producer=(3, 0)))
            gate.clear()
            co.on_resigned(tp.partition, 3)
            co.on_elected(tp.partition, 4)
            for _ in range(5):
                await asyncio.sleep(0)
            co.on_txn_marker(tp, 3, True, log.log_end_offset)
            co.on_resigned(tp.partition, 5)
            co.on_elected(tp.partition, 6)
            gate.set()
            await wait_loaded(broker)
            assert stored(broker, "g", [t0])[t0] == E.UNSTABLE_OFFSET_COMMIT

    run(body())


def test_a_follower_ignores_markers(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1)
            co = broker.coordinator
            tp, log = offsets_log(broker, "g")
            await wait_loaded(broker)
            log.append(offsets_batch("g", {("t", 0): 3}, producer=(1, 0)))
            co.on_resigned(tp.partition, 7)
            co.on_txn_marker(tp, 1, True, log.log_end_offset)
            assert co.offsets.fetch_offsets("g", [("t", 0)])[0] == E.NOT_COORDINATOR

    run(body())


def test_txn_offset_commit_checks_the_group_before_writing(tmp_path: Path) -> None:
    """Kafka's checks of a transactional commit, answered before anything is written."""

    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1)
            co = broker.coordinator
            txn = co.txn_offsets
            offsets = {("t", 0): (1, -1, None)}
            [a, b] = await stable_group(broker, "g", 2)
            _, log = offsets_log(broker, "g")
            end = log.log_end_offset

            async def commit(group: str, member: str, instance: str | None, gen: int) -> object:
                result = await txn.commit_offsets(group, "tx", 1, 0, member, instance, gen, offsets)
                return result[("t", 0)]

            assert await commit("", "", None, -1) == E.INVALID_GROUP_ID
            assert await commit("g", "nobody", None, a.generation_id) == E.UNKNOWN_MEMBER_ID
            assert await commit("g", a.member_id, None, a.generation_id + 1) == (
                E.ILLEGAL_GENERATION
            )
            # A generation without a member, in a group with members: not a member.
            assert await commit("g", "", None, a.generation_id) == E.UNKNOWN_MEMBER_ID
            # A group the coordinator does not know has no members either.
            assert await commit("other", "m", None, 1) == E.UNKNOWN_MEMBER_ID
            assert "other" not in co.groups
            assert (await txn.commit_offsets("g", "tx", -1, 0, "", None, -1, offsets)) == {
                ("t", 0): E.INVALID_PRODUCER_ID_MAPPING
            }
            assert log.log_end_offset == end  # nothing written
            assert b.member_id in co.groups["g"].members

    run(body())


def test_static_members_are_checked_by_instance(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1)
            txn = broker.coordinator.txn_offsets
            [a] = await stable_group(broker, "g", 1, instance="i-1")
            offsets = {("t", 0): (1, -1, None)}

            async def commit(member: str, instance: str) -> object:
                result = await txn.commit_offsets(
                    "g", "tx", 1, 0, member, instance, a.generation_id, offsets
                )
                return result[("t", 0)]

            assert await commit("someone-else", "i-1") == E.FENCED_INSTANCE_ID
            assert await commit(a.member_id, "i-2") == E.UNKNOWN_MEMBER_ID

    run(body())
