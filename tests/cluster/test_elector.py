"""ControllerElector against a real ZooKeeper: of two brokers exactly one runs the
controller; when its session expires, the controller it ran is stopped and exactly
one broker runs a controller in the new epoch; a clean stop resigns, so the other
broker takes over at once."""

from __future__ import annotations

import asyncio

from kbroker.cluster.controller_election import (
    ControllerEpoch,
    read_controller,
    read_controller_epoch,
)
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.controller.controller import Controller
from kbroker.controller.elector import ControllerElector
from tests.cluster.conftest import expire_session, run, until
from tests.zookeeper import ZooKeeperServer


def elector(zk: ZkClient, broker_id: int, epochs: list[int]) -> ControllerElector:
    def make(epoch: ControllerEpoch) -> Controller:
        epochs.append(epoch.epoch)
        return Controller(zk, broker_id, epoch)

    return ControllerElector(zk, broker_id, make)


def test_one_controller_and_takeover(zk_settings: ZkSettings, zookeeper: ZooKeeperServer) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk1, ZkClient(zk_settings) as zk2:
            epochs: list[int] = []
            e1, e2 = elector(zk1, 1, epochs), elector(zk2, 2, epochs)
            await e1.start()
            await e2.start()
            try:
                await until(lambda: e1.is_controller or e2.is_controller, "a controller")
                first, second = (e1, e2) if e1.is_controller else (e2, e1)
                first_zk = zk1 if first is e1 else zk2
                assert not second.is_controller and epochs == [1]
                found = await read_controller(zk1)
                assert found is not None and found[0].broker_id == first.broker_id

                # The controller's session expires: its controller stops, and a broker
                # takes over in a newer epoch (the other, or the first in its new session).
                old = first.controller
                await asyncio.to_thread(expire_session, first_zk, zookeeper.connect)
                assert old is not None
                await until(
                    lambda: (
                        old.stopped and len(epochs) == 2 and e1.is_controller != e2.is_controller
                    ),
                    "the old controller stopped, one controller in a new epoch",
                    20,
                )
                assert first.controller is not old
                await until(lambda: zk1.connected and zk2.connected, "both sessions up", 15)
                now = await read_controller_epoch(zk2 if first_zk is zk1 else zk1)
                assert now is not None and now.epoch == 2
                await asyncio.sleep(1)
                assert e1.is_controller != e2.is_controller

                # A clean stop resigns: the other broker takes over at once.
                leader, other = (e1, e2) if e1.is_controller else (e2, e1)
                other_zk = zk2 if other is e2 else zk1
                await leader.stop()
                await until(lambda: other.is_controller, "takeover after resignation", 5)
                assert epochs == [1, 2, 3]
                found = await read_controller(other_zk)
                assert found is not None and found[0].broker_id == other.broker_id
            finally:
                await e1.stop()
                await e2.stop()

    run(main(), timeout=90)
