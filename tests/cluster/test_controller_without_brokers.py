"""The controller's timed and asked-for duties on a real ZooKeeper, with brokers that are
only registrations (nothing listens on their ports: the controller's orders to them are
retried in the background, and the test reads what it wrote to ZooKeeper).

Real brokers obeying these duties are in test_controller_duties (Kafka 3.9.1); here go
what is slow or awkward with them: the periodic leader rebalance, an unclean election,
a broker shutting down that registers again, and the answers once the controller
stopped.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kbroker.cluster import zk_data as zd
from kbroker.cluster.controller_election import try_become_controller
from kbroker.cluster.zk import CreateOp, ZkClient, ZkSettings
from kbroker.controller.controller import Controller, ControllerSettings
from kbroker.controller.leader_election import ElectionType
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ErrorCode
from kbroker.protocol.errors import KafkaError
from tests.cluster.conftest import run, until
from tests.helpers import free_port
from tests.zookeeper import ZooKeeperServer

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)
G0 = TopicPartition("g", 0)


async def register(zk: ZkClient, broker_id: int) -> int:
    """Registers a broker (ephemeral, as a broker does); returns its epoch (the czxid)."""
    endpoint = zd.EndPoint("PLAINTEXT", "127.0.0.1", free_port())
    data = zd.encode_broker_registration(
        zd.BrokerRegistration(broker_id, (endpoint,)), int(time.time() * 1000)
    )
    _, stat = await zk.create(zd.broker_path(broker_id), data, ephemeral=True, makepath=True)
    return stat.czxid


async def create_topic(zk: ZkClient, name: str, partitions: dict[int, list[int]]) -> None:
    assignment = zd.TopicAssignment.of(partitions, uuid.uuid4())
    await zk.create(zd.topic_path(name), zd.encode_topic_assignment(assignment), makepath=True)


async def state(zk: ZkClient, tp: TopicPartition) -> zd.LeaderAndIsr:
    data, stat = await zk.get(zd.partition_state_path(tp.topic, tp.partition))
    return zd.decode_partition_state(data, stat.version)


def code(error: KafkaError | None) -> ErrorCode:
    return ErrorCode.NONE if error is None else error.code


def test_settings_from_kafka_names() -> None:
    assert ControllerSettings.from_config({}) == ControllerSettings()
    settings = ControllerSettings.from_config(
        {
            "auto.leader.rebalance.enable": "false",
            "leader.imbalance.check.interval.seconds": "30",
            "leader.imbalance.per.broker.percentage": 25,
        }
    )
    assert not settings.auto_leader_rebalance
    assert settings.leader_imbalance_check_interval_s == 30
    assert settings.leader_imbalance_per_broker_percentage == 25
    with pytest.raises(ValueError, match="at least 1"):
        ControllerSettings.from_config({"leader.imbalance.check.interval.seconds": "0"})


def test_rebalance_on_a_timer_and_shutting_down_until_registered_again(
    zk_settings: ZkSettings,
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk, ZkClient(zk_settings) as brokers:
            epochs = {b: await register(brokers, b) for b in (1, 2)}
            # Broker 1 is the first replica of t's partitions but leads only t-1; g-0 was
            # left led by broker 3, alone in its ISR, and broker 3 is gone.
            await create_topic(zk, "t", {0: [1, 2], 1: [1, 2]})
            await create_topic(zk, "g", {0: [1, 3]})
            for tp, replicas, leader, isr in (
                (P0, [1, 2], 2, [1, 2]),
                (P1, [1, 2], 1, [1, 2]),
                (G0, [1, 3], 3, [3]),
            ):
                left = PartitionState(replicas, leader, 0, isr, 0)
                await zk.create(
                    zd.partition_state_path(tp.topic, tp.partition),
                    zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(left)),
                    makepath=True,
                )
            epoch = await try_become_controller(zk, 100)
            assert epoch is not None
            settings = ControllerSettings(
                leader_imbalance_check_interval_s=0.2, first_imbalance_check_delay_s=0.2
            )
            controller = Controller(zk, 100, epoch, settings=settings)

            def leader(tp: TopicPartition) -> int | None:
                known = controller.ctx.states.get(tp)
                return None if known is None else known.leader

            await controller.start()
            try:
                # 1 of broker 1's 2 partitions led elsewhere (50 % > 10 %): moved back.
                await until(lambda: leader(P0) == 1, "the rebalance")
                assert (await state(zk, P0)).leader == 1

                # ElectLeaders: g-0 needs an unclean election (its ISR is all dead; its
                # first replica is not in it).
                results = await controller.elect_leaders([G0], ElectionType.PREFERRED)
                assert code(results[G0]) is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                results = await controller.elect_leaders([G0, P1], ElectionType.UNCLEAN)
                assert {tp: code(e) for tp, e in results.items()} == {
                    G0: ErrorCode.NONE,
                    P1: ErrorCode.ELECTION_NOT_NEEDED,
                }
                g0 = await state(zk, G0)
                # Epoch 0 written, 1 when the controller found its leader dead at start
                # (leader -1, as Kafka does), 2 for the unclean election.
                assert (g0.leader, g0.isr, g0.leader_epoch) == (1, (1,), 2)

                # g-0 has nowhere to go (its other replica is dead): broker 1 still leads it.
                assert await controller.controlled_shutdown(1, epochs[1]) == {G0}
                assert [(await state(zk, tp)).leader for tp in (P0, P1)] == [2, 2]
                # Broker 1 is shutting down: a new partition is not led by it ...
                await create_topic(zk, "before", {0: [1, 2]})
                await until(lambda: leader(TopicPartition("before", 0)) is not None, "before")
                assert (await state(zk, TopicPartition("before", 0))).leader == 2
                # ... until it registers again (a new epoch).
                await brokers.delete(zd.broker_path(1))
                epochs[1] = await register(brokers, 1)
                await until(
                    lambda: 1 in controller.ctx.live and controller.ctx.live[1].epoch == epochs[1],
                    "re-registration",
                )
                assert controller.ctx.shutting_down == set()
                await create_topic(zk, "after", {0: [1, 2]})
                await until(lambda: leader(TopicPartition("after", 0)) is not None, "after")
                assert (await state(zk, TopicPartition("after", 0))).leader == 1

                # A registration the controller has not read yet is read first, not refused.
                await brokers.delete(zd.broker_path(2))
                newer = await register(brokers, 2)
                # (Broker 2 is alone in the ISR of what it leads: nothing can move.)
                before, after = TopicPartition("before", 0), TopicPartition("after", 0)
                assert await controller.controlled_shutdown(2, newer) == {P0, P1, before}
                assert (await state(zk, after)).isr == (1,)
                assert controller.ctx.live[2].epoch == newer
                with pytest.raises(KafkaError) as stale:
                    await controller.controlled_shutdown(2, epochs[2])
                assert stale.value.code is ErrorCode.STALE_BROKER_EPOCH
            finally:
                await controller.stop()
            with pytest.raises(KafkaError) as moved:
                await controller.elect_preferred_leaders([P0])
            assert moved.value.code is ErrorCode.NOT_CONTROLLER

    run(main(), timeout=60)


def test_a_new_controller_takes_over_many_partitions_in_few_requests(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    """1,100 partitions left by a previous controller, half led by broker 2, which is gone:
    the new controller reads them all and writes their new states (leaders elected, broker
    2 out of the ISRs) in a handful of ZooKeeper requests (multiRead, multis of many
    states). A state changed behind its back (a leader's ISR update) fails its batch,
    whose other states are then written one by one: only that one is left, and read
    again."""
    count = 1100
    tps = [TopicPartition("big", p) for p in range(count)]

    async def main() -> None:
        async with ZkClient(zk_settings) as zk, ZkClient(zk_settings) as brokers:
            for b in (1, 3):
                await register(brokers, b)
            await create_topic(zk, "big", {tp.partition: [1, 2] for tp in tps})
            ops: list[CreateOp] = [CreateOp(zd.partitions_path("big"))]
            for tp in tps:
                left = PartitionState([1, 2], 1 + tp.partition % 2, 0, [1, 2], 0)
                ops.append(CreateOp(zd.partition_path("big", tp.partition)))
                ops.append(
                    CreateOp(
                        zd.partition_state_path("big", tp.partition),
                        zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(left)),
                    )
                )
            for i in range(0, len(ops), 500):
                await zk.multi(ops[i : i + 500])
            epoch = await try_become_controller(zk, 100)
            assert epoch is not None
            settings = ControllerSettings(auto_leader_rebalance=False)
            controller = Controller(zk, 100, epoch, settings=settings)

            async def states() -> list[zd.LeaderAndIsr]:
                found = await zk.get_many([zd.partition_state_path("big", p) for p in range(count)])
                return [zd.decode_partition_state(f[0], f[1].version) for f in found if f]

            await zk.get_many(["/brokers"])  # (the servers' versions, asked once)
            before = zookeeper.packets_received()
            await controller.start()
            try:
                await controller.idle()
                sent = zookeeper.packets_received() - before
                # Broker 2's partitions elect broker 1, broker 1's lose broker 2 from the ISR.
                expected = (1, 1, (1,), epoch.epoch, 1)
                written = await states()
                assert {
                    (s.leader, s.leader_epoch, s.isr, s.controller_epoch, s.zk_version)
                    for s in written
                } == {expected}
                assert len(written) == count
                assert {controller.ctx.states[tp].version for tp in tps} == {1}
                assert sent < 100, f"{sent} requests to take over {count} partitions"

                # Partition 5's state changes behind the controller's back, then broker 1
                # leaves: every partition goes leaderless (its ISR keeps broker 1, its last
                # member) but partition 5, whose write is refused.
                p5 = TopicPartition("big", 5)
                outsider = PartitionState([1, 2], 1, 1, [1], epoch.epoch)
                await brokers.set(
                    zd.partition_state_path("big", 5),
                    zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(outsider)),
                    version=1,
                )
                await brokers.delete(zd.broker_path(1))
                await until(lambda: 1 not in controller.ctx.live, "broker 1 gone")
                await controller.idle()
                after = await states()
                assert after[5] == zd.LeaderAndIsr(1, 1, (1,), epoch.epoch, zk_version=2)
                others = {
                    (s.leader, s.leader_epoch, s.isr, s.zk_version)
                    for i, s in enumerate(after)
                    if i != 5
                }
                assert others == {(-1, 2, (1,), 2)}
                # What the controller knows is what ZooKeeper holds, partition 5 read again.
                assert [(s.leader, s.zk_version) for s in after] == [
                    (controller.ctx.states[tp].leader, controller.ctx.states[tp].version)
                    for tp in tps
                ]
                assert controller.ctx.states[p5].leader == 1
            finally:
                await controller.stop()

    run(main(), timeout=120)


def test_a_topic_created_among_many_is_taken_in_few_requests(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    """With 300 topics known, a new one is picked up (its partition led) after a handful of
    ZooKeeper requests: the controller reads every topic again in multiRead requests, not
    one get each."""

    async def main() -> None:
        async with ZkClient(zk_settings) as zk, ZkClient(zk_settings) as brokers:
            await register(brokers, 1)
            await asyncio.gather(*(create_topic(zk, f"t{i}", {0: [1]}) for i in range(300)))
            epoch = await try_become_controller(zk, 100)
            assert epoch is not None
            controller = Controller(zk, 100, epoch, settings=ControllerSettings(False))
            await controller.start()
            try:
                await controller.idle()
                assert len(controller.ctx.states) == 300
                late = TopicPartition("late", 0)
                before = zookeeper.packets_received()
                await create_topic(zk, "late", {0: [1]})
                await until(lambda: late in controller.ctx.states, "the new topic's leader")
                sent = zookeeper.packets_received() - before
                assert (await state(zk, late)).leader == 1
                assert sent < 60, f"{sent} requests to take one new topic among 300"
            finally:
                await controller.stop()

    run(main(), timeout=60)
