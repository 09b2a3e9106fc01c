"""Controller election and fencing on a real ZooKeeper: one winner per epoch, and a deposed
controller's writes refused."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.cluster.controller_election import (
    ControllerEpoch,
    ControllerWatcher,
    fenced_multi,
    read_controller,
    read_controller_epoch,
    resign,
    try_become_controller,
)
from kbroker.cluster.errors import ControllerMovedError, ZkMultiError, ZkNodeExistsError
from kbroker.cluster.zk import CreateOp, SetDataOp, ZkClient, ZkSettings
from tests.cluster.conftest import expire_session, run, until
from tests.zookeeper import ZooKeeperServer


def test_two_contenders_one_controller_and_the_deposed_one_is_fenced(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as a, ZkClient(zk_settings) as b:
            await a.create("/brokers/topics/t/partitions/0/state", b"s0", makepath=True)
            seen: list[int | None] = []
            watcher = ControllerWatcher(b, seen.append)
            await watcher.start()
            await until(lambda: seen == [None], "no controller at first")

            won = await asyncio.gather(try_become_controller(a, 1), try_become_controller(b, 2))
            winners = [(i, e) for i, e in enumerate(won) if e is not None]
            assert len(winners) == 1
            index, epoch = winners[0]
            assert epoch.epoch == 1
            leader, other = (a, b) if index == 0 else (b, a)
            leader_id, other_id = (1, 2) if index == 0 else (2, 1)
            found = await read_controller(other)
            assert found is not None and found[0].broker_id == leader_id
            assert found[1].ephemeral_owner == leader.session_id
            assert await read_controller_epoch(other) == epoch
            await until(lambda: seen[-1] == leader_id, "the watcher sees the controller")

            # The controller writes, fenced by its epoch.
            path = "/brokers/topics/t/partitions/0/state"
            assert await fenced_multi(leader, epoch, [SetDataOp(path, b"s1", 0)]) != []
            # The loser cannot become controller while the winner lives.
            assert await try_become_controller(other, other_id) is None
            assert not await resign(other)

            # The controller's session expires: /controller goes, another broker is elected.
            await asyncio.to_thread(expire_session, leader, zookeeper.connect)
            await until(lambda: seen[-1] is None, "the watcher sees no controller", 20)
            new = await try_become_controller(other, other_id)
            assert new is not None and new.epoch == 2 and new.zk_version > epoch.zk_version
            await until(lambda: seen[-1] == other_id, "the watcher sees the new controller")

            # The deposed controller (connected again, in a new session) is fenced.
            await leader.wait_connected(10)
            with pytest.raises(ControllerMovedError, match="epoch 1 is over"):
                await fenced_multi(leader, epoch, [SetDataOp(path, b"stale", -1)])
            data, _ = await other.get(path)
            assert data == b"s1"
            assert await fenced_multi(other, new, [SetDataOp(path, b"s2", -1)]) != []
            assert (await other.get(path))[0] == b"s2"
            watcher.stop()

    run(main())


def test_fenced_multi_reports_its_own_ops_failure_by_their_index(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            epoch = await try_become_controller(zk, 5)
            assert epoch == ControllerEpoch(1, 1)
            await zk.create("/exists")
            with pytest.raises(ZkMultiError) as refused:
                await fenced_multi(zk, epoch, [CreateOp("/new"), CreateOp("/exists")])
            assert refused.value.failed == 1
            assert isinstance(refused.value.cause, ZkNodeExistsError)
            assert await zk.exists("/new") is None
            assert await resign(zk)
            assert await read_controller(zk) is None
            again = await try_become_controller(zk, 5)
            assert again == ControllerEpoch(2, 2)

    run(main())
