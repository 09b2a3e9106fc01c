"""The group coordinator driven directly, in-process, on a real broker's storage.

Each test runs on its own event loop with a Broker whose storage is open
(no network): the state machine, timers, persistence to ``__consumer_offsets``
and loading are real; only the clock used for offset ages may be faked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from kbroker.broker import Broker
from kbroker.config import BrokerConfig
from kbroker.coordinator import GroupCoordinator, GroupState, JoinRequest, JoinResult, SyncResult
from kbroker.coordinator.consumer_protocol import encode_assignment, encode_subscription
from kbroker.coordinator.group import Group, Member
from kbroker.log.log import now_ms
from kbroker.protocol import ErrorCode
from kbroker.replication.purgatory import Scheduler

E = ErrorCode
SUB_T = encode_subscription(["t"])


@contextlib.asynccontextmanager
async def running(
    data: Path,
    *settings: tuple[str, str],
    clock: Callable[[], int] | None = None,
    scheduler: Scheduler | None = None,
) -> AsyncIterator[Broker]:
    """A broker's storage and group coordinator in process (no listener); ``clock`` and
    ``scheduler`` replace the coordinator's time."""
    config = BrokerConfig.from_strings(
        [
            ("log.dirs", str(data)),
            ("group.initial.rebalance.delay.ms", "0"),
            ("group.min.session.timeout.ms", "10"),
            ("offsets.topic.num.partitions", "4"),
            *settings,
        ]
    )
    broker = Broker(config)
    if clock is not None or scheduler is not None:
        broker.coordinator = GroupCoordinator(broker, clock=clock or now_ms, scheduler=scheduler)
    broker.open_storage()
    await broker.coordinator.start()
    try:
        yield broker
    finally:
        await broker.coordinator.stop()
        broker.replica_manager.shutdown()
        broker.logs.close()


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def join_req(
    group: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    session: int = 5000,
    rebalance: int = 5000,
    v4: bool = False,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        require_known_member_id=v4,
        client_id="client",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance,
        session_timeout_ms=session,
        protocol_type="consumer",
        protocols=protocols if protocols is not None else [("range", SUB_T)],
    )


async def done(result: Any) -> Any:
    if isinstance(result, JoinResult | SyncResult):
        return result
    return await asyncio.wait_for(asyncio.shield(result), 5)


async def wait_loaded(broker: Broker) -> None:
    for _ in range(500):
        if not broker.coordinator.loading:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("coordinator never finished loading")


async def stable_group(broker: Broker, group: str, n: int, **kw: Any) -> list[JoinResult]:
    """n members join and sync; returns their join results (leader first)."""
    co = broker.coordinator
    pending = [co.join_group(join_req(group, **kw)) for _ in range(n)]
    joined = [await done(p) for p in pending]
    assert all(j.error == E.NONE for j in joined), joined
    leader = next(j for j in joined if j.members)
    others = [j for j in joined if j is not leader]
    assignments = [(m, encode_assignment({"t": [i]})) for i, (m, _, _) in enumerate(leader.members)]
    waits = [
        co.sync_group(group, j.generation_id, j.member_id, None, None, None, []) for j in others
    ]
    lead_sync = await done(
        co.sync_group(
            group, leader.generation_id, leader.member_id, None, "consumer", "range", assignments
        )
    )
    assert lead_sync.error == E.NONE
    for w in waits:
        assert (await done(w)).error == E.NONE
    return [leader, *others]


def test_members_join_rebalance_and_get_their_assignment(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 4, 1)
            co = broker.coordinator
            a = await done(co.join_group(join_req("g")))
            assert (a.error, a.generation_id, a.leader_id, a.protocol_name) == (
                E.NONE,
                1,
                a.member_id,
                "range",
            )
            assert [m[0] for m in a.members] == [a.member_id]
            assert (
                await done(
                    co.sync_group("g", 1, a.member_id, None, None, None, [(a.member_id, b"A")])
                )
            ).assignment == b"A"
            assert co.groups["g"].state is GroupState.STABLE

            b_pending = co.join_group(join_req("g"))
            assert not isinstance(b_pending, JoinResult)
            assert co.heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
            a2 = await done(co.join_group(join_req("g", a.member_id)))
            b = await done(b_pending)
            assert a2.generation_id == b.generation_id == 2
            assert a2.leader_id == b.leader_id == a.member_id
            assert {m[0] for m in a2.members} == {a.member_id, b.member_id}
            assert b.members == []
            # The follower waits for the leader; an unlisted member gets an empty assignment.
            follower = co.sync_group("g", 2, b.member_id, None, None, None, [])
            assert not isinstance(follower, SyncResult)
            lead = await done(
                co.sync_group("g", 2, a.member_id, None, None, None, [(a.member_id, b"A2")])
            )
            assert lead.assignment == b"A2"
            got = await done(follower)
            assert (got.error, got.assignment) == (E.NONE, b"")
            assert co.heartbeat("g", b.member_id, None, 2) == E.NONE
            assert co.heartbeat("g", b.member_id, None, 1) == E.ILLEGAL_GENERATION
            assert co.heartbeat("g", "nobody", None, 2) == E.UNKNOWN_MEMBER_ID
            assert co.heartbeat("nogroup", "nobody", None, 2) == E.UNKNOWN_MEMBER_ID

            commit = {("t", 0): (10, 0, "m")}
            assert (await co.offsets.commit_offsets("g", b.member_id, None, 2, commit)) == {
                ("t", 0): E.NONE
            }
            assert (await co.offsets.commit_offsets("g", b.member_id, None, 1, commit)) == {
                ("t", 0): E.ILLEGAL_GENERATION
            }
            assert (await co.offsets.commit_offsets("g", "nobody", None, 2, commit)) == {
                ("t", 0): E.UNKNOWN_MEMBER_ID
            }
            assert (await co.offsets.commit_offsets("other", "x", None, 3, commit)) == {
                ("t", 0): E.ILLEGAL_GENERATION
            }
            assert (
                await co.offsets.commit_offsets(
                    "g", b.member_id, None, 2, {("nope", 0): (1, -1, None), ("t", 9): (1, -1, None)}
                )
            ) == {("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
            assert (
                await co.offsets.commit_offsets(
                    "g", b.member_id, None, 2, {("t", 1): (1, -1, "x" * 5000)}
                )
            ) == {("t", 1): E.OFFSET_METADATA_TOO_LARGE}
            error, fetched = co.offsets.fetch_offsets("g", [("t", 0), ("t", 1)])
            assert error == E.NONE
            assert [
                (f.partition, f.committed and (f.committed.offset, f.committed.metadata))
                for f in fetched
            ] == [(0, (10, "m")), (1, None)]

    run(body())


def test_protocol_selection_and_inconsistent_protocols() -> None:
    def member(mid: str, *names: str) -> Member:
        return Member(mid, None, "c", "h", 1000, 1000, "consumer", [(n, b"") for n in names])

    group = Group("g", 0)
    group.add(member("a", "roundrobin", "range"))
    group.add(member("b", "roundrobin", "range"))
    group.add(member("c", "range", "roundrobin"))
    assert group.select_protocol() == "roundrobin"
    group.add(member("d", "range"))
    assert group.select_protocol() == "range"
    assert group.supports_protocols("consumer", ["range", "sticky"])
    assert not group.supports_protocols("consumer", ["roundrobin"])
    assert not group.supports_protocols("connect", ["range"])


def test_inconsistent_protocol_and_bad_joins(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(
            tmp_path, ("group.max.size", "1"), ("group.member.metadata.max.bytes", "100")
        ) as broker:
            co = broker.coordinator
            await stable_group(broker, "g", 1)
            other = await done(co.join_group(join_req("g", protocols=[("roundrobin", SUB_T)])))
            assert other.error == E.INCONSISTENT_GROUP_PROTOCOL
            full = await done(co.join_group(join_req("g")))
            assert full.error == E.GROUP_MAX_SIZE_REACHED
            assert (await done(co.join_group(join_req("")))).error == E.INVALID_GROUP_ID
            assert (
                await done(co.join_group(join_req("h", session=5)))
            ).error == E.INVALID_SESSION_TIMEOUT
            assert (
                await done(co.join_group(join_req("h", protocols=[])))
            ).error == E.INCONSISTENT_GROUP_PROTOCOL
            big = [("range", b"x" * 200)]
            assert (
                await done(co.join_group(join_req("h", protocols=big)))
            ).error == E.INVALID_REQUEST
            assert (
                await done(co.join_group(join_req("h", "made-up-id")))
            ).error == E.UNKNOWN_MEMBER_ID

    run(body())


def test_member_id_required_round_trip(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            co = broker.coordinator
            [a] = await stable_group(broker, "g", 1)
            first = await done(co.join_group(join_req("g", v4=True)))
            assert first.error == E.MEMBER_ID_REQUIRED
            assert first.member_id.startswith("client-")
            # Not a member yet: no rebalance until it comes back with its id.
            assert co.heartbeat("g", a.member_id, None, a.generation_id) == E.NONE
            again = co.join_group(join_req("g", first.member_id, v4=True))
            assert co.heartbeat("g", a.member_id, None, a.generation_id) == E.REBALANCE_IN_PROGRESS
            a2 = co.join_group(join_req("g", a.member_id, v4=True))
            b, a2r = await done(again), await done(a2)
            assert b.member_id == first.member_id and b.error == E.NONE
            assert a2r.generation_id == b.generation_id == a.generation_id + 1

    run(body())


def test_pending_member_that_never_returns_does_not_block(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            co = broker.coordinator
            [a] = await stable_group(broker, "g", 1)
            pending = await done(co.join_group(join_req("g", v4=True, session=200)))
            assert pending.error == E.MEMBER_ID_REQUIRED
            loop = asyncio.get_running_loop()
            started = loop.time()
            b = co.join_group(join_req("g"))
            a2 = await done(co.join_group(join_req("g", a.member_id)))
            # The rebalance waited for the pending member until its session ran out.
            assert loop.time() - started >= 0.15
            assert {m[0] for m in a2.members} == {a.member_id, (await done(b)).member_id}
            assert not co.groups["g"].pending_members

    run(body())


def test_session_expiry_removes_member_and_rebalances(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            co = broker.coordinator
            a, b = await stable_group(broker, "g", 2, session=300)
            # Only a heartbeats; b's session runs out.
            state = E.NONE
            for _ in range(40):
                state = co.heartbeat("g", a.member_id, None, a.generation_id)
                if state != E.NONE:
                    break
                await asyncio.sleep(0.05)
            assert state == E.REBALANCE_IN_PROGRESS
            assert b.member_id not in co.groups["g"].members
            again = await done(co.join_group(join_req("g", a.member_id, session=300)))
            assert again.generation_id == a.generation_id + 1
            assert [m[0] for m in again.members] == [a.member_id]
            assert co.heartbeat("g", b.member_id, None, again.generation_id) == E.UNKNOWN_MEMBER_ID

    run(body())


def test_member_that_does_not_rejoin_is_dropped_after_rebalance_timeout(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            co = broker.coordinator
            a, b = await stable_group(broker, "g", 2, session=5000, rebalance=300)
            c_pending = co.join_group(join_req("g", session=5000, rebalance=300))
            a2 = await done(co.join_group(join_req("g", a.member_id, session=5000, rebalance=300)))
            c = await done(c_pending)
            # b never rejoined within the rebalance timeout.
            assert a2.generation_id == c.generation_id == a.generation_id + 1
            assert {m[0] for m in (a2.members or c.members)} == {a.member_id, c.member_id}
            assert b.member_id not in co.groups["g"].members

    run(body())


def test_static_member_rejoins_without_rebalance(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            co = broker.coordinator
            joined = [co.join_group(join_req("g", instance=f"i{n}")) for n in range(2)]
            x, y = [await done(j) for j in joined]
            leader, follower = (x, y) if x.members else (y, x)
            assignments = [(leader.member_id, b"L"), (follower.member_id, b"F")]
            await done(co.sync_group("g", 1, leader.member_id, None, None, None, assignments))
            assert (
                await done(co.sync_group("g", 1, follower.member_id, None, None, None, []))
            ).assignment == b"F"
            instance = next(m[1] for m in leader.members if m[0] == follower.member_id)
            # The follower restarts: new process, same instance id, no member id.
            back = await done(co.join_group(join_req("g", instance=instance)))
            assert back.error == E.NONE and back.member_id != follower.member_id
            assert back.generation_id == 1 and back.members == []
            assert co.groups["g"].state is GroupState.STABLE
            assert (
                await done(co.sync_group("g", 1, back.member_id, instance, None, None, []))
            ).assignment == b"F"
            assert co.heartbeat("g", leader.member_id, None, 1) == E.NONE
            assert co.heartbeat("g", follower.member_id, instance, 1) == E.FENCED_INSTANCE_ID
            # Batch leave by instance id; a wrong member id for an instance is fenced.
            top, errors = co.leave_group(
                "g", [(follower.member_id, instance), ("", "nope"), ("", instance)]
            )
            assert (top, errors) == (E.NONE, [E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID, E.NONE])
            assert co.heartbeat("g", leader.member_id, None, 1) == E.REBALANCE_IN_PROGRESS

    run(body())


def test_commit_while_completing_rebalance_is_refused(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1)
            co = broker.coordinator
            a = await done(co.join_group(join_req("g")))
            assert co.groups["g"].state is GroupState.COMPLETING_REBALANCE
            commit = {("t", 0): (1, -1, None)}
            assert (await co.offsets.commit_offsets("g", a.member_id, None, 1, commit)) == {
                ("t", 0): E.REBALANCE_IN_PROGRESS
            }
            # A consumer outside the group may not commit to an active group.
            assert (await co.offsets.commit_offsets("g", "", None, -1, commit)) == {
                ("t", 0): E.REBALANCE_IN_PROGRESS
            }

    run(body())


def test_groups_and_offsets_survive_restart_and_load_in_progress(tmp_path: Path) -> None:
    async def first() -> tuple[str, int]:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 2, 1)
            co = broker.coordinator
            [a] = await stable_group(broker, "live", 1)
            assert (
                await co.offsets.commit_offsets(
                    "live", a.member_id, None, a.generation_id, {("t", 0): (5, 3, "meta")}
                )
            )[("t", 0)] == E.NONE
            assert (
                await co.offsets.commit_offsets("simple", "", None, -1, {("t", 1): (7, -1, None)})
            )[("t", 1)] == E.NONE
            assert (
                await co.offsets.commit_offsets("gone", "", None, -1, {("t", 1): (9, -1, None)})
            )[("t", 1)] == E.NONE
            assert (await co.delete_groups(["gone"])) == {"gone": E.NONE}
            assert (await co.offsets.delete_offsets("simple", [("t", 0)])) == (
                E.NONE,
                {("t", 0): E.NONE},
            )
            return a.member_id, a.generation_id

    async def second(member_id: str, generation: int) -> None:
        async with running(tmp_path) as broker:
            co = broker.coordinator
            assert (
                co.heartbeat("live", member_id, None, generation) == E.COORDINATOR_LOAD_IN_PROGRESS
            )
            assert co.list_groups()[0] == E.COORDINATOR_LOAD_IN_PROGRESS
            await wait_loaded(broker)
            assert co.heartbeat("live", member_id, None, generation) == E.NONE
            assert co.describe_group("live").state == "Stable"
            assert co.describe_group("live").members[0].assignment  # type: ignore[index]
            _, fetched = co.offsets.fetch_offsets("live", None)
            assert [
                (
                    f.topic,
                    f.partition,
                    f.committed.offset,
                    f.committed.leader_epoch,
                    f.committed.metadata,
                )
                for f in fetched
                if f.committed
            ] == [("t", 0, 5, 3, "meta")]
            _, simple = co.offsets.fetch_offsets("simple", None)
            assert [(f.partition, f.committed and f.committed.offset) for f in simple] == [(1, 7)]
            assert co.describe_group("gone").state == "Dead"
            listed = {g.group_id: g.state for g in co.list_groups()[1]}
            assert listed == {"live": "Stable", "simple": "Empty"}
            assert [g.group_id for g in co.list_groups(["empty"])[1]] == ["simple"]

    async def both() -> None:
        member_id, generation = await first()
        await second(member_id, generation)

    run(both())


def test_offsets_expire_for_empty_and_standalone_groups(tmp_path: Path) -> None:
    now = [1_000_000]

    async def body() -> None:
        async with running(
            tmp_path, ("offsets.retention.minutes", "1"), clock=lambda: now[0]
        ) as broker:
            broker.create_topic("t", 2, 1)
            co = broker.coordinator
            assert (
                await co.offsets.commit_offsets(
                    "standalone", "", None, -1, {("t", 0): (1, -1, None)}
                )
            )[("t", 0)] == E.NONE
            [a] = await stable_group(broker, "consumers", 1)
            (
                await co.offsets.commit_offsets(
                    "consumers", a.member_id, None, a.generation_id, {("t", 1): (2, -1, None)}
                )
            )
            now[0] += 30_000
            assert co.leave_group("consumers", [(a.member_id, None)]) == (E.NONE, [E.NONE])
            await asyncio.sleep(0.05)
            assert co.groups["consumers"].state is GroupState.EMPTY
            now[0] += 35_000  # 65 s after the commits, 35 s after the group emptied
            assert (await co.offsets.expire_offsets()) == 1
            assert "standalone" not in co.groups
            assert co.offsets.fetch_offsets("consumers", [("t", 1)])[1][0].committed is not None
            now[0] += 30_000
            assert (await co.offsets.expire_offsets()) == 1
            assert "consumers" not in co.groups
        async with running(tmp_path) as broker:
            await wait_loaded(broker)
            assert broker.coordinator.groups == {}

    run(body())


def test_delete_groups_and_offsets(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1)
            broker.create_topic("u", 1, 1)
            co = broker.coordinator
            [a] = await stable_group(broker, "g", 1)
            (
                await co.offsets.commit_offsets(
                    "g",
                    a.member_id,
                    None,
                    a.generation_id,
                    {("t", 0): (1, -1, None), ("u", 0): (2, -1, None)},
                )
            )
            assert (await co.offsets.delete_offsets("g", [("t", 0), ("u", 0)])) == (
                E.NONE,
                {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE},
            )
            assert (await co.delete_groups(["g", "missing"])) == {
                "g": E.NON_EMPTY_GROUP,
                "missing": E.GROUP_ID_NOT_FOUND,
            }
            assert (await co.offsets.delete_offsets("missing", [("t", 0)])) == (
                E.GROUP_ID_NOT_FOUND,
                {},
            )
            co.leave_group("g", [(a.member_id, None)])
            await asyncio.sleep(0.05)
            assert (await co.delete_groups(["g"])) == {"g": E.NONE}
            assert co.offsets.fetch_offsets("g", [("t", 0)])[1][0].committed is None

    run(body())


def test_topic_changes_reach_groups(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 2, 1)
            broker.create_topic("other", 1, 1)
            co = broker.coordinator
            [a] = await stable_group(broker, "g", 1)
            await broker.add_partitions("other", 2)
            assert co.heartbeat("g", a.member_id, None, a.generation_id) == E.NONE
            await broker.add_partitions("t", 4)
            assert co.heartbeat("g", a.member_id, None, a.generation_id) == E.REBALANCE_IN_PROGRESS
            (await co.offsets.commit_offsets("simple", "", None, -1, {("other", 0): (3, -1, None)}))
            assert await broker.delete_topics(["other"]) == {"other": None}
            # The offsets' removal, then the empty group's, is written in the background.
            for _ in range(500):
                if "simple" not in co.groups:
                    break
                await asyncio.sleep(0.01)
            assert "simple" not in co.groups

    run(body())


def test_stop_answers_waiting_members(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(tmp_path, ("group.initial.rebalance.delay.ms", "10000")) as broker:
            waiting = broker.coordinator.join_group(join_req("g"))
            assert not isinstance(waiting, JoinResult)
            await broker.coordinator.stop()
            assert (await done(waiting)).error == E.NOT_COORDINATOR
            assert broker.coordinator.heartbeat("g", "m", None, 1) == E.COORDINATOR_NOT_AVAILABLE

    run(body())


@pytest.mark.parametrize("delay", [0, 200])
def test_initial_rebalance_delay_gathers_members(tmp_path: Path, delay: int) -> None:
    async def body() -> None:
        async with running(tmp_path, ("group.initial.rebalance.delay.ms", str(delay))) as broker:
            co = broker.coordinator
            first = co.join_group(join_req("g", rebalance=500))
            await asyncio.sleep(0.05)
            second = co.join_group(join_req("g", rebalance=500))
            a, b = await done(first), await done(second)
            if delay:
                # Both made the first generation.
                assert a.generation_id == b.generation_id == 1
            else:
                # The first generation formed before the second member came.
                assert a.generation_id == 1 and b.generation_id == 2

    run(body())
