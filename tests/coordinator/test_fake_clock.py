"""The coordinator on a fake clock and scheduler: timers, write ordering, election.

Each test opens a real broker's storage (no network) and gives its
coordinator a `FakeClock` as both clock and scheduler: time moves only when
a test calls `advance`, so session expiry, rebalance timeouts and the
initial rebalance delay are checked to the millisecond without sleeping.
`GatedStore` holds or fails appends to ``__consumer_offsets``, to check that
a group changes only once its record is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from kbroker.broker import Broker
from kbroker.coordinator import GroupCoordinator, GroupState, JoinRequest, JoinResult, SyncResult
from kbroker.coordinator.consumer_protocol import encode_subscription
from kbroker.coordinator.records import OFFSETS_TOPIC
from kbroker.coordinator.store import Record, Stored, TxnProducer
from kbroker.log import TopicPartition
from kbroker.protocol import ErrorCode
from tests.coordinator.test_coordinator import run, running

E = ErrorCode
SUB_T = encode_subscription(["t"])


class FakeHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock (milliseconds) and a `Scheduler` whose timers fire in `advance`."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms
        self._timers: list[tuple[int, int, FakeHandle, Callable[[], object]]] = []
        self._seq = itertools.count()

    def now(self) -> int:
        return self.now_ms

    def call_later(self, delay: float, callback: Callable[[], object]) -> FakeHandle:
        handle = FakeHandle()
        due = self.now_ms + round(delay * 1000)
        heapq.heappush(self._timers, (due, next(self._seq), handle, callback))
        return handle

    def advance(self, ms: int = 0) -> None:
        """Moves time on by ``ms``, firing every timer due by then, in order."""
        target = self.now_ms + ms
        while self._timers and self._timers[0][0] <= target:
            due, _, handle, callback = heapq.heappop(self._timers)
            self.now_ms = due
            if not handle.cancelled:
                callback()
        self.now_ms = target


class GatedStore:
    """Wraps the store's appends: ``hold`` makes them wait, ``failure`` makes them fail."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.real = coordinator.store.append_batch
        self.gate = asyncio.Event()
        self.gate.set()
        self.failure = E.NONE
        self.appended: list[list[Record]] = []
        coordinator.store.append_batch = self.append_batch  # type: ignore[method-assign]

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def append_batch(
        self, index: int, records: list[Record], now_ms: int, producer: TxnProducer | None = None
    ) -> asyncio.Future[Stored]:
        async def gated() -> Stored:
            await self.gate.wait()
            if self.failure != E.NONE:
                return Stored(self.failure)
            self.appended.append(records)
            return await self.real(index, records, now_ms, producer)

        return asyncio.ensure_future(gated())


@contextlib.asynccontextmanager
async def coordinator(
    data: Path, *settings: tuple[str, str]
) -> AsyncIterator[tuple[GroupCoordinator, FakeClock, Broker]]:
    clock = FakeClock()
    # Writes on the event loop: each is done when its request is (`settle` waits for no
    # I/O thread); what the writes themselves do is tested elsewhere.
    settings = (("num.io.threads", "0"), *settings)
    async with running(data, *settings, clock=clock.now, scheduler=clock) as broker:
        yield broker.coordinator, clock, broker


async def settle() -> None:
    """Lets the tasks that follow writes run (no time passes on the fake clock)."""
    for _ in range(20):
        await asyncio.sleep(0)


def join_req(
    group: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    session: int = 1000,
    rebalance: int = 3000,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        require_known_member_id=False,
        client_id="client",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance,
        session_timeout_ms=session,
        protocol_type="consumer",
        protocols=[("range", SUB_T)],
    )


def result(pending: Any) -> Any:
    """The answer of a join/sync/write that must be done by now."""
    if isinstance(pending, JoinResult | SyncResult):
        return pending
    assert pending.done(), "still waiting"
    return pending.result()


async def form_group(
    co: GroupCoordinator, clock: FakeClock, group: str, n: int, **kw: Any
) -> list[JoinResult]:
    """n members join together and sync; returns their join results, leader first."""
    pending = [co.join_group(join_req(group, **kw)) for _ in range(n)]
    clock.advance(0)  # the initial rebalance delay (0 ms) passes
    joined = [result(p) for p in pending]
    leader = next(j for j in joined if j.members)
    others = [j for j in joined if j is not leader]
    syncs = [
        co.sync_group(group, j.generation_id, j.member_id, None, None, None, []) for j in others
    ]
    lead = co.sync_group(
        group, leader.generation_id, leader.member_id, None, None, None,
        [(m, m.encode()) for m, _, _ in leader.members],
    )  # fmt: skip
    await settle()
    assert result(lead).error == E.NONE
    assert all(result(s).error == E.NONE for s in syncs)
    assert co.groups[group].state is GroupState.STABLE
    return [leader, *others]


# -- timers -------------------------------------------------------------------------


def test_session_expires_exactly_at_its_timeout_and_heartbeats_renew_it(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            a, b = await form_group(co, clock, "g", 2, session=1000)
            for _ in range(3):
                clock.advance(600)
                assert co.heartbeat("g", a.member_id, None, 1) == E.NONE
                assert co.heartbeat("g", b.member_id, None, 1) == E.NONE
            # Only a keeps heartbeating: b's session ends 1000 ms after its last one.
            clock.advance(600)
            assert co.heartbeat("g", a.member_id, None, 1) == E.NONE
            clock.advance(399)
            assert b.member_id in co.groups["g"].members
            clock.advance(1)
            assert b.member_id not in co.groups["g"].members
            assert co.groups["g"].state is GroupState.PREPARING_REBALANCE
            assert co.heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
            # a rejoins: everyone known has joined, so the rebalance completes at once.
            again = result(co.join_group(join_req("g", a.member_id, session=1000)))
            assert (again.generation_id, [m[0] for m in again.members]) == (2, [a.member_id])
            assert co.heartbeat("g", b.member_id, None, 2) == E.UNKNOWN_MEMBER_ID

    run(body())


def test_member_waiting_in_join_outlives_its_session_and_the_absent_one_goes(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            a, b = await form_group(co, clock, "g", 2, session=1000, rebalance=5000)
            waiting = co.join_group(join_req("g", a.member_id, session=1000, rebalance=5000))
            # b neither heartbeats nor rejoins: its session ends first and it is dropped.
            clock.advance(1000)
            assert b.member_id not in co.groups["g"].members
            # Everyone left has rejoined: the rebalance completes without waiting 5 s.
            assert result(waiting).generation_id == 2
            # a, answered, must heartbeat again within its session.
            clock.advance(999)
            assert co.heartbeat("g", a.member_id, None, 2) == E.NONE

    run(body())


def test_rebalance_timeout_drops_members_that_do_not_rejoin(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            a, b = await form_group(co, clock, "g", 2, session=10_000, rebalance=3000)
            waiting = co.join_group(join_req("g", a.member_id, session=10_000, rebalance=3000))
            clock.advance(2999)
            assert not waiting.done()  # type: ignore[union-attr]
            assert co.heartbeat("g", b.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
            clock.advance(1)
            assert [m[0] for m in result(waiting).members] == [a.member_id]
            assert b.member_id not in co.groups["g"].members

    run(body())


def test_initial_rebalance_delay_is_extended_by_new_members_up_to_the_timeout(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        async with coordinator(tmp_path, ("group.initial.rebalance.delay.ms", "100")) as (
            co,
            clock,
            _,
        ):
            first = co.join_group(join_req("g", rebalance=500))
            clock.advance(50)
            second = co.join_group(join_req("g", rebalance=500))
            clock.advance(50)  # t=100: somebody came during the delay, so it waits again
            assert not first.done()  # type: ignore[union-attr]
            clock.advance(99)
            assert not first.done()  # type: ignore[union-attr]
            clock.advance(1)  # t=200: nobody came this time
            assert result(first).generation_id == result(second).generation_id == 1
            assert len(result(first).members or result(second).members) == 2

            # A member arriving every 100 ms keeps extending, but not past the rebalance timeout.
            start = clock.now_ms
            pending = [co.join_group(join_req("h", rebalance=500))]
            for _ in range(5):
                clock.advance(50)
                pending.append(co.join_group(join_req("h", rebalance=500)))
                clock.advance(49)
                assert not pending[0].done()  # type: ignore[union-attr]
                clock.advance(1)
            # Completed at 500 ms with the six that came by then.
            assert clock.now_ms - start == 500
            assert {result(p).generation_id for p in pending} == {1}
            assert len(co.groups["h"].members) == 6

    run(body())


def test_pending_member_id_expires_after_its_session(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            [a] = await form_group(co, clock, "g", 1, session=1000)
            req = join_req("g", session=300)
            req.require_known_member_id = True
            told = result(co.join_group(req))
            assert told.error == E.MEMBER_ID_REQUIRED
            assert told.member_id in co.groups["g"].pending_members
            waiting = co.join_group(join_req("g", a.member_id, session=1000))
            clock.advance(299)
            assert not waiting.done()  # type: ignore[union-attr]
            clock.advance(1)
            assert not co.groups["g"].pending_members
            assert [m[0] for m in result(waiting).members] == [a.member_id]

    run(body())


# -- writes before changes ------------------------------------------------------------


def test_sync_group_is_stable_only_once_the_assignment_is_stored(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            store = GatedStore(co)
            pending = [co.join_group(join_req("g")) for _ in range(2)]
            clock.advance(0)
            leader, follower = sorted((result(p) for p in pending), key=lambda j: not j.members)
            store.hold()
            waits = co.sync_group("g", 1, follower.member_id, None, None, None, [])
            lead = co.sync_group(
                "g", 1, leader.member_id, None, None, None, [(follower.member_id, b"F")]
            )
            await settle()
            group = co.groups["g"]
            assert group.state is GroupState.COMPLETING_REBALANCE
            assert not lead.done() and not waits.done()  # type: ignore[union-attr]
            assert all(m.assignment == b"" for m in group.members.values())
            store.release()
            await settle()
            assert group.state is GroupState.STABLE
            assert result(waits).assignment == b"F"
            assert (result(lead).error, result(lead).assignment) == (E.NONE, b"")

    run(body())


def test_failed_assignment_store_answers_the_error_and_rebalances(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            store = GatedStore(co)
            pending = [co.join_group(join_req("g")) for _ in range(2)]
            clock.advance(0)
            leader, follower = sorted((result(p) for p in pending), key=lambda j: not j.members)
            store.failure = E.KAFKA_STORAGE_ERROR
            waits = co.sync_group("g", 1, follower.member_id, None, None, None, [])
            lead = co.sync_group("g", 1, leader.member_id, None, None, None, [])
            await settle()
            assert result(lead).error == result(waits).error == E.NOT_COORDINATOR
            assert co.groups["g"].state is GroupState.PREPARING_REBALANCE
            assert co.heartbeat("g", leader.member_id, None, 1) == E.REBALANCE_IN_PROGRESS

    run(body())


def test_offsets_change_only_once_the_commit_is_stored(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, _, broker):
            broker.create_topic("t", 2, 1)
            store = GatedStore(co)
            store.hold()
            commit = co.offsets.commit_offsets("solo", "", None, -1, {("t", 0): (5, -1, None)})
            await settle()
            assert not commit.done()
            assert co.offsets.fetch_offsets("solo", [("t", 0)])[1][0].committed is None
            store.release()
            assert await commit == {("t", 0): E.NONE}
            assert co.offsets.fetch_offsets("solo", [("t", 0)])[1][0].committed is not None

            store.failure = E.KAFKA_STORAGE_ERROR
            failed = co.offsets.commit_offsets("solo", "", None, -1, {("t", 0): (9, -1, None)})
            assert await failed == {("t", 0): E.NOT_COORDINATOR}
            committed = co.offsets.fetch_offsets("solo", [("t", 0)])[1][0].committed
            assert committed is not None and committed.offset == 5

    run(body())


def test_a_group_being_deleted_is_fenced_until_its_tombstones_are_stored(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, _, broker):
            broker.create_topic("t", 1, 1)
            await co.offsets.commit_offsets("g", "", None, -1, {("t", 0): (1, -1, None)})
            store = GatedStore(co)
            store.hold()
            deleting = co.delete_groups(["g"])
            await settle()
            assert "g" in co.groups and not deleting.done()
            assert result(co.join_group(join_req("g"))).error == E.COORDINATOR_NOT_AVAILABLE
            late = co.offsets.commit_offsets("g", "", None, -1, {("t", 0): (2, -1, None)})
            assert result(late) == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
            store.release()
            assert await deleting == {"g": E.NONE}
            assert "g" not in co.groups

            # A failed deletion leaves the group as it was.
            await co.offsets.commit_offsets("h", "", None, -1, {("t", 0): (1, -1, None)})
            store.failure = E.KAFKA_STORAGE_ERROR
            assert await co.delete_groups(["h"]) == {"h": E.NOT_COORDINATOR}
            assert not co.groups["h"].gone and co.groups["h"].offsets

    run(body())


def test_static_member_takes_its_place_once_its_new_id_is_stored(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, _):
            [a] = await form_group(co, clock, "g", 1, instance="i1")
            store = GatedStore(co)
            store.hold()
            back = co.join_group(join_req("g", instance="i1"))
            await settle()
            assert not back.done()  # type: ignore[union-attr]
            assert a.member_id in co.groups["g"].members  # the old id is still the member
            assert co.heartbeat("g", a.member_id, "i1", 1) == E.NONE
            store.release()
            await settle()
            new = result(back)
            assert new.error == E.NONE and new.member_id != a.member_id
            assert list(co.groups["g"].members) == [new.member_id]
            assert co.heartbeat("g", a.member_id, "i1", 1) == E.FENCED_INSTANCE_ID
            assert co.groups["g"].state is GroupState.STABLE

            # If the store fails, the old member stays and the joiner gets the error.
            store.failure = E.KAFKA_STORAGE_ERROR
            failed = co.join_group(join_req("g", instance="i1"))
            await settle()
            assert result(failed).error == E.NOT_COORDINATOR
            assert list(co.groups["g"].members) == [new.member_id]

    run(body())


# -- election and resignation -----------------------------------------------------------


def test_resignation_unloads_and_election_loads_a_partitions_groups(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, clock, broker):
            broker.create_topic("t", 1, 1)
            [a] = await form_group(co, clock, "g", 1, session=1000)
            assert await co.offsets.commit_offsets(
                "g", a.member_id, None, 1, {("t", 0): (7, -1, None)}
            ) == {("t", 0): E.NONE}
            index = co.cache.partition_of("g")
            other = next(
                g for g in (f"x{i}" for i in range(100)) if co.cache.partition_of(g) != index
            )
            await co.offsets.commit_offsets(other, "", None, -1, {("t", 0): (1, -1, None)})
            epoch = broker.partition(OFFSETS_TOPIC, index).leader_epoch  # type: ignore[union-attr]
            joiner = co.join_group(join_req("g", session=1000))  # waits for a to rejoin

            co.on_resigned(index, epoch + 1)
            assert result(joiner).error == E.NOT_COORDINATOR
            assert "g" not in co.groups and other in co.groups
            assert co.heartbeat("g", a.member_id, None, 1) == E.NOT_COORDINATOR
            assert co.offsets.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR
            assert co.offsets.fetch_offsets(other, None)[0] == E.NONE
            clock.advance(10_000)  # the unloaded group's timers were cancelled
            assert len(co._heartbeats) == 0 and len(co._joins) == 0

            co.on_elected(index, epoch)  # stale: ignored
            assert co.heartbeat("g", a.member_id, None, 1) == E.NOT_COORDINATOR
            co.on_elected(index, epoch + 2)
            assert co.heartbeat("g", a.member_id, None, 1) == E.COORDINATOR_LOAD_IN_PROGRESS
            assert co.list_groups()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
            await settle()
            assert co.heartbeat("g", a.member_id, None, 1) == E.NONE
            committed = co.offsets.fetch_offsets("g", [("t", 0)])[1][0].committed
            assert committed is not None and committed.offset == 7
            # The loaded member's session runs again.
            clock.advance(1000)
            assert "g" not in co.groups or a.member_id not in co.groups["g"].members

            co.on_resigned(index, epoch + 1)  # stale: ignored
            assert co.heartbeat("g", "", None, 2) != E.NOT_COORDINATOR

    run(body())


def test_leadership_moves_of_offsets_partitions_reach_the_coordinator(tmp_path: Path) -> None:
    """The replica manager's transitions of a ``__consumer_offsets`` partition (its
    leader epoch the coordinator epoch) unload and load the partition's groups; other
    topics' transitions do not touch them."""

    async def body() -> None:
        async with coordinator(tmp_path) as (co, _, broker):
            broker.create_topic("t", 1, 1)
            await co.offsets.commit_offsets("g", "", None, -1, {("t", 0): (4, -1, None)})
            index = co.cache.partition_of("g")
            tp = TopicPartition(OFFSETS_TOPIC, index)
            rm = broker.replica_manager
            state = rm.get_partition(tp).state  # type: ignore[union-attr]

            moved = dataclasses.replace(state, leader=1, leader_epoch=state.leader_epoch + 1)
            rm.make_follower(tp, moved)
            assert co.offsets.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR
            # Another topic's partition changing leader leaves the groups alone.
            t0 = TopicPartition("t", 0)
            t_state = rm.get_partition(t0).state  # type: ignore[union-attr]
            rm.make_follower(t0, dataclasses.replace(t_state, leader=1, leader_epoch=9))
            assert co.offsets.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR

            back = dataclasses.replace(state, leader=0, leader_epoch=state.leader_epoch + 2)
            rm.make_leader(tp, back)
            assert co.offsets.fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
            await settle()
            assert co.offsets.fetch_offsets("g", None)[1][0].committed.offset == 4  # type: ignore[union-attr]

    run(body())


def test_resigning_while_loading_discards_the_load(tmp_path: Path) -> None:
    async def body() -> None:
        async with coordinator(tmp_path) as (co, _, broker):
            broker.create_topic("t", 1, 1)
            await co.offsets.commit_offsets("g", "", None, -1, {("t", 0): (3, -1, None)})
            index = co.cache.partition_of("g")
            co.on_resigned(index, 5)
            co.on_elected(index, 6)
            assert co.cache.is_loading("g")
            co.on_resigned(index, 6)
            await settle()
            assert "g" not in co.groups and not co.loading
            assert co.offsets.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR
            co.on_elected(index, 7)
            await settle()
            assert co.offsets.fetch_offsets("g", None)[1][0].committed.offset == 3  # type: ignore[union-attr]

    run(body())
