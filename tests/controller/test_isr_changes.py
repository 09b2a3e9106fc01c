"""A leader's ISR changes (AlterPartition) judged against the ControllerContext, without
I/O: each refusal's code (Kafka's), the answer repeated for a change already made, and
the state written for one accepted."""

from __future__ import annotations

import uuid

import pytest

from kbroker.controller.context import ControllerContext, LiveBroker, TopicAssignment, Transition
from kbroker.controller.isr_changes import IsrAnswer, IsrChange, plan_isr_change, resolve
from kbroker.handlers.inter_broker import alter_partition_changes, alter_partition_response
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ErrorCode
from kbroker.protocol.messages.inter_broker import AlterPartitionRequest

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


def test_the_handler_reads_every_version_and_answers_by_name_or_id() -> None:
    P = AlterPartitionRequest.Topic.Partition
    part = P(
        partition_index=0,
        leader_epoch=4,
        new_isr=[1, 2],
        new_isr_with_epochs=[P.BrokerState(broker_id=1, broker_epoch=101), P.BrokerState(2, -1)],
        leader_recovery_state=0,
        partition_epoch=7,
    )
    request = AlterPartitionRequest(
        broker_id=1,
        broker_epoch=101,
        topics=[AlterPartitionRequest.Topic(topic_name="t", topic_id=TID, partitions=[part])],
    )
    for version in range(4):
        [c] = alter_partition_changes(request, version)
        assert (c.partition, c.leader_epoch, list(c.isr), c.partition_epoch) == (0, 4, [1, 2], 7)
        assert (c.topic, c.topic_id) == (("t", None) if version < 2 else ("", TID))
        assert c.isr_epochs == ([101, -1] if version == 3 else None)
        state = PartitionState([1, 2, 3], 1, 4, [1, 2], 5, version=8)
        answers = [
            IsrAnswer(c, ErrorCode.NONE, T0, state),
            IsrAnswer(c, ErrorCode.FENCED_LEADER_EPOCH),
        ]
        resp = alter_partition_response(answers, version)
        assert resp.error_code == ErrorCode.NONE
        [topic] = resp.topics
        assert (topic.topic_name, topic.topic_id) == (
            ("t", uuid.UUID(int=0)) if version < 2 else ("", TID)
        )
        assert [
            (p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch)
            for p in topic.partitions
        ] == [(0, 1, 4, [1, 2], 8), (ErrorCode.FENCED_LEADER_EPOCH, -1, -1, [], -1)]
