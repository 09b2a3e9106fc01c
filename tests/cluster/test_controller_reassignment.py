"""The controller's partition reassignments on a real ZooKeeper, with brokers that are
only registrations (nothing listens on their ports; the test plays the partition leader
by sending the controller the AlterPartition a leader would, and reads what the
controller wrote). Real brokers moving replicas are in test_reassignment.

- started: the topic's znode gets RS, adding and removing (version 3, Kafka's JSON),
  the partition a new leader epoch; completed once the leader adds every target
  replica to the ISR: the lead moves into the target, the removed replicas leave the
  ISR, the znode lists the target alone;
- a writer that rewrites the topic's znode from the replicas alone: the lists of a
  reassignment in progress are written back;
- ``/admin/reassign_partitions``: its refused partitions leave it at once, the others
  when they complete, and the znode goes with the last;
- a new controller (the first one stopped) carries on a reassignment in progress from
  what ZooKeeper holds, and cancels it: the replicas go back to ORS.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable

from kbroker.cluster import zk_data as zd
from kbroker.cluster.controller_election import resign, try_become_controller
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.controller.controller import Controller, ControllerSettings
from kbroker.controller.isr_changes import IsrChange
from kbroker.controller.reassignment import Assignment
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ErrorCode
from tests.cluster.conftest import run, until
from tests.cluster.test_controller_without_brokers import code, register, state

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)
U0, V0 = TopicPartition("u", 0), TopicPartition("v", 0)
QUIET = ControllerSettings(auto_leader_rebalance=False)


async def topic_json(zk: ZkClient, name: str) -> dict[str, object]:
    data, _ = await zk.get(zd.topic_path(name))
    return json.loads(data)  # type: ignore[no-any-return]


async def create_led_topic(zk: ZkClient, name: str, partitions: dict[int, list[int]]) -> None:
    """A topic whose partitions are led by their first replica, all replicas in sync."""
    assignment = zd.TopicAssignment.of(partitions, uuid.uuid4())
    await zk.create(zd.topic_path(name), zd.encode_topic_assignment(assignment), makepath=True)
    for p, replicas in partitions.items():
        led = PartitionState(replicas, replicas[0], 0, list(replicas), 0)
        await zk.create(
            zd.partition_state_path(name, p),
            zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(led)),
            makepath=True,
        )


async def grow_isr(
    controller: Controller, zk: ZkClient, epochs: dict[int, int], tp: TopicPartition, isr: list[int]
) -> None:
    """The partition's leader asks for ``isr`` (AlterPartition), and the controller has
    done what follows from it."""
    now = await state(zk, tp)
    change = IsrChange(tp.topic, tp.partition, now.leader_epoch, isr, now.zk_version)
    [answer] = await controller.alter_partition(now.leader, epochs[now.leader], [change])
    assert answer.error is ErrorCode.NONE
    await controller.idle()


async def eventually(
    controller: Controller, read: Callable[[], Awaitable[object]], want: object
) -> None:
    """Until ``read()`` gives ``want`` (the controller handling what its watches bring)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while (got := await read()) != want:
        assert loop.time() < deadline, f"still {got!r}, not {want!r}"
        await asyncio.sleep(0.05)
        await controller.idle()


def test_reassignments_start_complete_resume_and_cancel(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk, ZkClient(zk_settings) as brokers:
            epochs = {b: await register(brokers, b) for b in (1, 2, 3, 4)}
            await create_led_topic(zk, "t", {0: [1, 2, 3], 1: [1, 2, 3]})
            epoch = await try_become_controller(zk, 100)
            assert epoch is not None
            controller = Controller(zk, 100, epoch, settings=QUIET)
            await controller.start()
            await controller.idle()
            try:
                before = await state(zk, P0)
                results = await controller.alter_partition_reassignments(
                    {P0: [2, 3, 4], P1: [2, 3, 4]}
                )
                assert results == {P0: None, P1: None}
                topic = await topic_json(zk, "t")
                assert topic["partitions"] == {"0": [2, 3, 4, 1], "1": [2, 3, 4, 1]}
                assert topic["adding_replicas"] == {"0": [4], "1": [4]}
                assert topic["removing_replicas"] == {"0": [1], "1": [1]}
                assert topic["version"] == 3
                started = await state(zk, P0)
                assert (started.leader, started.isr) == (1, (1, 2, 3))
                assert started.leader_epoch == before.leader_epoch + 1
                moving = Assignment((2, 3, 4, 1), (4,), (1,))
                assert await controller.list_partition_reassignments() == {P0: moving, P1: moving}
                assert await controller.list_partition_reassignments([P1, U0]) == {P1: moving}

                # Broker 4 caught up on t-0: the lead moves to 2, 1 leaves.
                await grow_isr(controller, zk, epochs, P0, [1, 2, 3, 4])
                done = await state(zk, P0)
                assert (done.leader, done.isr) == (2, (2, 3, 4))
                assert done.leader_epoch == started.leader_epoch + 1
                topic = await topic_json(zk, "t")
                assert topic["partitions"] == {"0": [2, 3, 4], "1": [2, 3, 4, 1]}
                assert topic["adding_replicas"] == {"1": [4]}
                assert await controller.list_partition_reassignments() == {P1: moving}

                # A writer that knows nothing of reassignments rewrites the znode.
                data, _ = await zk.get(zd.topic_path("t"))
                plain = zd.decode_topic_assignment(data)
                bare = zd.TopicAssignment.of(plain.replicas(), plain.topic_id)
                await zk.set(zd.topic_path("t"), zd.encode_topic_assignment(bare))

                async def lists() -> tuple[object, object]:
                    topic = await topic_json(zk, "t")
                    return topic["adding_replicas"], topic["removing_replicas"]

                await eventually(controller, lists, ({"1": [4]}, {"1": [1]}))

                # /admin/reassign_partitions: v-0 names a broker that is not registered.
                await create_led_topic(zk, "u", {0: [1, 2]})
                await create_led_topic(zk, "v", {0: [1, 2]})
                await until(lambda: V0 in controller.ctx.states, "u and v known")
                plan = zd.encode_partition_reassignment({U0: [3, 4], V0: [1, 9]})
                await zk.create(zd.REASSIGN_PARTITIONS_PATH, plan, makepath=True)

                async def znode() -> dict[TopicPartition, tuple[int, ...]] | None:
                    found = await zk.exists(zd.REASSIGN_PARTITIONS_PATH)
                    if found is None:
                        return None
                    data, _ = await zk.get(zd.REASSIGN_PARTITIONS_PATH)
                    return zd.decode_partition_reassignment(data)

                await eventually(controller, znode, {U0: (3, 4)})
                assert (await topic_json(zk, "v"))["partitions"] == {"0": [1, 2]}
                assert (await topic_json(zk, "u"))["adding_replicas"] == {"0": [3, 4]}
                await grow_isr(controller, zk, epochs, U0, [1, 2, 3, 4])
                assert await znode() is None
                u0 = await state(zk, U0)
                assert (u0.leader, u0.isr) == (3, (3, 4))
                assert (await topic_json(zk, "u"))["partitions"] == {"0": [3, 4]}
            finally:
                await controller.stop()
            assert await resign(zk)

            # A new controller carries t-1's reassignment on (a new leader epoch) ...
            before = await state(zk, P1)
            second = await try_become_controller(zk, 101)
            assert second is not None and second.epoch == epoch.epoch + 1
            controller = Controller(zk, 101, second, settings=QUIET)
            await controller.start()
            await controller.idle()
            try:
                assert controller.ctx.reassigning() == [P1]
                resumed = await state(zk, P1)
                assert resumed.leader_epoch == before.leader_epoch + 1
                assert resumed.controller_epoch == second.epoch
                # ... and cancels it: the replicas go back to ORS, in the order RS kept.
                assert await controller.alter_partition_reassignments({P1: None}) == {P1: None}
                topic = await topic_json(zk, "t")
                assert topic["partitions"] == {"0": [2, 3, 4], "1": [2, 3, 1]}
                assert (topic["adding_replicas"], topic["removing_replicas"]) == ({}, {})
                back = await state(zk, P1)
                assert (back.leader, back.isr) == (1, (1, 2, 3))
                assert await controller.list_partition_reassignments() == {}
                again = await controller.alter_partition_reassignments({P1: None})
                assert code(again[P1]) is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
            finally:
                await controller.stop()

    run(main())
