"""The controller's plans: first states, elections after failures, ISR removal, preferred
elections and controlled shutdown, computed from a ControllerContext without I/O."""

from __future__ import annotations

import uuid

from kbroker.controller.context import (
    NO_LEADER,
    ControllerContext,
    LiveBroker,
    TopicAssignment,
    Transition,
)
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def T(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def context(live: set[int], **partitions: list[int]) -> ControllerContext:
    """Topic "t" with partitions p0, p1, ... placed as given, controller epoch 5."""
    ctx = ControllerContext(controller_id=1, epoch=5)
    ctx.live = {b: LiveBroker(b, 100 + b, "127.0.0.1", 9000 + b) for b in live}
    ctx.topics["t"] = TopicAssignment(
        "t", uuid.uuid4(), {int(k[1:]): v for k, v in partitions.items()}
    )
    return ctx


def settle(ctx: ControllerContext, transitions: list[Transition]) -> None:
    for t in transitions:
        ctx.apply(t, (ctx.states[t.tp].version + 1) if t.tp in ctx.states else 0)


def test_new_partitions_lead_on_their_first_live_replica() -> None:
    ctx = context({2, 3}, p0=[1, 2, 3], p1=[4])
    plans = ctx.plan_new_partitions([T0, T1])
    assert [(t.tp, t.new) for t in plans] == [(T0, True)]  # p1 has no live replica
    assert plans[0].state == PartitionState([1, 2, 3], 2, 0, [2, 3], 5)


def test_a_dead_leader_is_replaced_from_the_isr_and_leaves_it() -> None:
    ctx = context({1, 2, 3}, p0=[1, 2, 3])
    settle(ctx, ctx.plan_new_partitions([T0]))
    del ctx.live[1]
    assert ctx.offline_partitions() == [T0]
    [elected] = ctx.plan_offline_elections(ctx.offline_partitions(), lambda _: False)
    assert (elected.state.leader, elected.state.leader_epoch, elected.state.isr) == (2, 1, [2, 3])
    assert elected.state.controller_epoch == 5 and not elected.unclean
    settle(ctx, [elected])
    assert ctx.offline_partitions() == []
    assert ctx.plan_remove_from_isr([1]) == []  # already out of the ISR


def test_with_no_isr_replica_alive_the_partition_stays_offline_unless_unclean() -> None:
    ctx = context({1, 2}, p0=[1, 2])
    ctx.states[T0] = PartitionState([1, 2], 1, 3, [1], 4, version=7)
    del ctx.live[1]
    assert ctx.plan_offline_elections([T0], lambda _: False) == []
    [offline] = ctx.plan_remove_from_isr([1])
    # No leader; the last ISR member stays in the ISR; a conditional write on version 7.
    assert offline.state == PartitionState([1, 2], NO_LEADER, 4, [1], 5, version=7)
    [unclean] = ctx.plan_offline_elections([T0], lambda topic: topic == "t")
    assert unclean.unclean and (unclean.state.leader, unclean.state.isr) == (2, [2])


def test_a_dead_follower_leaves_the_isr_with_a_new_leader_epoch() -> None:
    ctx = context({1, 2, 3}, p0=[1, 2, 3], p1=[2, 3, 1])
    settle(ctx, ctx.plan_new_partitions([T0, T1]))
    del ctx.live[3]
    plans = {t.tp: t.state for t in ctx.plan_remove_from_isr([3])}
    assert plans[T0].isr == [1, 2] and plans[T0].leader == 1 and plans[T0].leader_epoch == 1
    assert plans[T1].isr == [2, 1] and plans[T1].leader == 2


def test_preferred_election_moves_leadership_back_once_the_first_replica_is_in_sync() -> None:
    ctx = context({1, 2}, p0=[1, 2])
    ctx.states[T0] = PartitionState([1, 2], 2, 3, [2], 5)
    assert ctx.plan_preferred_elections([T0]) == []  # 1 is not in the ISR yet
    ctx.states[T0].isr = [2, 1]
    [moved] = ctx.plan_preferred_elections([T0])
    assert (moved.state.leader, moved.state.leader_epoch) == (1, 4)
    settle(ctx, [moved])
    assert ctx.plan_preferred_elections([T0]) == []


def test_controlled_shutdown_moves_leadership_and_leaves_single_replicas_alone() -> None:
    ctx = context({1, 2, 3}, p0=[1, 2, 3], p1=[1], p2=[1, 4])
    settle(ctx, ctx.plan_new_partitions([T0, T1, T(2)]))
    ctx.shutting_down.add(1)
    plan = ctx.plan_controlled_shutdown(1)
    assert [(t.tp, t.state.leader, t.state.isr) for t in plan.moves] == [(T0, 2, [2, 3])]
    assert plan.isr_removals == [] and plan.followed == []
    # The partition with one replica keeps its leader until the broker stops and is not
    # "remaining" (it can never move, as in Kafka); p2, its other replica dead, is.
    assert ctx.offline_partitions() == []
    settle(ctx, plan.moves)
    assert ctx.replicated_leaders_on(1) == {T(2)}


def test_controlled_shutdown_of_a_follower_takes_it_out_of_the_isr_but_never_empties_it() -> None:
    ctx = context({1, 2}, p0=[2, 1], p1=[2, 1])
    settle(ctx, ctx.plan_new_partitions([T0, T1]))
    ctx.states[T1].isr = [1]  # its last ISR member stays in (and is still told to stop)
    ctx.shutting_down.add(1)
    plan = ctx.plan_controlled_shutdown(1)
    assert plan.moves == [] and plan.followed == [T0, T1]
    [removal] = plan.isr_removals
    assert (removal.tp, removal.state.leader, removal.state.isr) == (T0, 2, [2])
    assert removal.state.leader_epoch == 1


def test_a_broker_shutting_down_is_elected_nowhere() -> None:
    ctx = context({1, 2}, p0=[1, 2], p1=[1, 2])
    ctx.shutting_down.add(1)
    plans = ctx.plan_new_partitions([T0])
    assert [(t.state.leader, t.state.isr) for t in plans] == [(2, [2])]
    ctx.states[T1] = PartitionState([1, 2], 2, 3, [2, 1], 5)
    assert ctx.plan_preferred_elections([T1]) == []


def test_imbalance_counts_per_preferred_broker_above_the_percentage() -> None:
    # Broker 1 is the first replica of p0..p3; broker 2 of p4.
    ctx = context({1, 2}, p0=[1, 2], p1=[1, 2], p2=[1, 2], p3=[1, 2], p4=[2, 1])
    settle(ctx, ctx.plan_new_partitions([T(p) for p in range(5)]))
    assert ctx.imbalanced_partitions(10) == []
    ctx.states[T(1)].leader = 2  # 1 of broker 1's 4 led elsewhere: 25 %
    assert ctx.imbalanced_partitions(25) == []
    assert ctx.imbalanced_partitions(10) == [T(1)]
    ctx.states[T(2)].leader, ctx.states[T(2)].isr = 2, [2]  # 1 cannot lead p2 (not in sync)
    assert ctx.imbalanced_partitions(10) == [T(1)]
    ctx.shutting_down.add(1)
    assert ctx.imbalanced_partitions(10) == []
