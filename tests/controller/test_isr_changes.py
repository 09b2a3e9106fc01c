"""A leader's ISR changes (AlterPartition) judged against the ControllerContext, without
I/O: each refusal's code (Kafka's), the answer repeated for a change already made, and
the state written for one accepted."""

from __future__ import annotations

import uuid

import pytest

from kbroker.controller.context import ControllerContext, LiveBroker, TopicAssignment, Transition
from kbroker.controller.isr_changes import IsrChange, plan_isr_change, resolve
from kbroker.log import TopicPartition
from kbroker.metadata_types import PartitionState
from kbroker.protocol import ErrorCode

TID = uuid.uuid4()
T0 = TopicPartition("t", 0)


def context() -> ControllerContext:
    """t-0 on [1, 2, 3], led by 1 in leader epoch 4 with ISR [1, 2] at znode version 7;
    brokers 1-3 live (broker b in epoch 100 + b), broker 3 shutting down."""
    ctx = ControllerContext(controller_id=9, epoch=5)
    ctx.live = {b: LiveBroker(b, 100 + b, "127.0.0.1", 9000 + b) for b in (1, 2, 3, 4)}
    ctx.shutting_down = {3}
    ctx.topics["t"] = TopicAssignment("t", TID, {0: [1, 2, 3], 1: [2, 1]})
    ctx.states[T0] = PartitionState([1, 2, 3], 1, 4, [1, 2], 2, version=7)
    return ctx


def change(
    isr: list[int], leader_epoch: int = 4, partition_epoch: int = 7, **kw: object
) -> IsrChange:
    return IsrChange("t", 0, leader_epoch, isr, partition_epoch, **kw)  # type: ignore[arg-type]


def test_a_shrink_is_planned_in_the_same_leader_epoch() -> None:
    plan = plan_isr_change(context(), 1, 3, T0, change([1]))
    assert isinstance(plan, Transition)
    # same leader and leader epoch, this controller's epoch, the version it is written over
    assert plan.state == PartitionState([1, 2, 3], 1, 4, [1], 5, version=7)
    assert not plan.new and not plan.unclean


def test_the_same_isr_again_is_answered_with_the_current_state() -> None:
    ctx = context()
    # even naming an older partition epoch (the answer to a retry that was written)
    assert plan_isr_change(ctx, 1, 3, T0, change([1, 2], partition_epoch=6)) is ctx.states[T0]


@pytest.mark.parametrize(
    ("broker", "version", "asked", "code"),
    [
        (1, 3, change([1], leader_epoch=5), ErrorCode.NOT_CONTROLLER),
        (1, 3, change([1], partition_epoch=8), ErrorCode.NOT_CONTROLLER),
        (1, 3, change([1], leader_epoch=3), ErrorCode.FENCED_LEADER_EPOCH),
        (2, 3, change([2]), ErrorCode.INVALID_REQUEST),  # not the leader
        (1, 3, change([1], partition_epoch=6), ErrorCode.INVALID_UPDATE_VERSION),
        (1, 3, change([]), ErrorCode.INVALID_REQUEST),
        (1, 3, change([1, 1]), ErrorCode.INVALID_REQUEST),
        (1, 3, change([1, 4]), ErrorCode.INVALID_REQUEST),  # 4 is no replica
        (1, 3, change([2]), ErrorCode.INVALID_REQUEST),  # without the leader
        (1, 3, change([1], leader_recovery_state=1), ErrorCode.INVALID_REQUEST),
        (1, 3, change([1, 2, 3]), ErrorCode.INELIGIBLE_REPLICA),  # 3 is shutting down
        (1, 1, change([1, 2, 3]), ErrorCode.OPERATION_NOT_ATTEMPTED),
        (1, 3, change([1, 2], isr_epochs=[101, 999]), ErrorCode.INELIGIBLE_REPLICA),
        (1, 3, change([1, 2], isr_epochs=[101]), ErrorCode.INVALID_REQUEST),
    ],
)
def test_refusals(broker: int, version: int, asked: IsrChange, code: ErrorCode) -> None:
    ctx = context()
    if asked.isr_epochs is not None:  # an expansion
        ctx.states[T0] = PartitionState([1, 2, 3], 1, 4, [1], 2, version=7)
    assert plan_isr_change(ctx, broker, version, T0, asked) == code


def test_ineligible_unless_live_in_the_epoch_named() -> None:
    ctx = context()
    ctx.states[T0] = PartitionState([1, 2, 3], 1, 4, [1], 2, version=7)
    assert isinstance(
        plan_isr_change(ctx, 1, 3, T0, change([1, 2], isr_epochs=[101, 102])), Transition
    )
    assert isinstance(
        plan_isr_change(ctx, 1, 3, T0, change([1, 2], isr_epochs=[-1, -1])), Transition
    )
    del ctx.live[2]
    assert plan_isr_change(ctx, 1, 3, T0, change([1, 2])) == ErrorCode.INELIGIBLE_REPLICA


def test_unknown_partitions_and_topic_ids() -> None:
    ctx = context()
    by_id = IsrChange("", 0, 4, [1], 7, topic_id=TID)
    assert resolve(ctx, by_id) == T0
    assert resolve(ctx, IsrChange("", 0, 4, [1], 7, topic_id=uuid.uuid4())) == (
        ErrorCode.UNKNOWN_TOPIC_ID
    )
    for tp in (TopicPartition("t", 1), TopicPartition("t", 2), TopicPartition("u", 0)):
        # t-1 has no state yet, t-2 and u-0 do not exist
        assert plan_isr_change(ctx, 1, 3, tp, change([1])) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
