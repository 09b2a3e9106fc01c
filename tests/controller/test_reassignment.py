"""Partition reassignment planned without I/O: the replica lists Kafka writes (RS, adding,
removing), the checks of a request and their codes, and the states that start, end or
cut short a reassignment."""

from __future__ import annotations

import uuid

from kbroker.controller.context import NO_LEADER, ControllerContext, LiveBroker, TopicAssignment
from kbroker.controller.reassignment import Assignment, check_target, plan_request
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ErrorCode
from kbroker.protocol.errors import KafkaError

T0 = TopicPartition("t", 0)


def context(live: set[int], replicas: list[int], isr: list[int], leader: int) -> ControllerContext:
    ctx = ControllerContext(controller_id=1, epoch=5)
    ctx.live = {b: LiveBroker(b, 100 + b, "127.0.0.1", 9000 + b) for b in live}
    ctx.topics["t"] = TopicAssignment("t", uuid.uuid4(), {0: list(replicas)})
    ctx.states[T0] = PartitionState(list(replicas), leader, 7, list(isr), 4, version=12)
    return ctx


def code(result: object) -> ErrorCode | None:
    return result.code if isinstance(result, KafkaError) else None


def test_the_lists_kafka_writes_while_moving_and_after_a_cancellation() -> None:
    ors = Assignment((1, 2, 3))
    moving = ors.reassign_to([2, 3, 4])
    # RS is the target, then what is left of ORS; the first target replica is preferred.
    assert moving == Assignment((2, 3, 4, 1), adding=(4,), removing=(1,))
    assert (moving.origin, moving.target, moving.moving) == ((2, 3, 1), (2, 3, 4), True)
    assert not moving.is_complete([1, 2, 3]) and moving.is_complete([2, 1, 3, 4])
    # disjoint sets (Kafka's own example): every replica of ORS goes
    assert ors.reassign_to([4, 5, 6]) == Assignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    # a new target replaces the one in progress: ORS stays what it was
    assert moving.reassign_to([3, 5]) == Assignment((3, 5, 2, 1), adding=(5,), removing=(2, 1))
    # cancelling targets ORS again: nothing moves, ORS in the order RS kept it (not 1, 2, 3)
    assert moving.reassign_to(moving.origin) == Assignment((2, 3, 1))
    # the same replicas in another order move nothing either
    assert ors.reassign_to([3, 1, 2]) == Assignment((3, 1, 2))


def test_requests_are_checked_in_kafkas_order_with_its_codes() -> None:
    ors = Assignment((1, 2, 3))
    live = {1, 2, 3, 4}
    invalid = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert code(plan_request(ors, [], live, False)) is invalid
    assert code(plan_request(ors, [2, 2], live, False)) is invalid
    assert code(plan_request(ors, [2, -1], live, False)) is invalid
    refused = check_target(ors, [2, 9], live)
    assert refused is not None and refused.code is invalid and "not alive" in str(refused)
    # a replica the partition has already may be down; only the ones added must be up
    assert plan_request(ors, [3, 2], {2}, False) == Assignment((3, 2, 1), removing=(1,))
    none = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert code(plan_request(ors, None, live, False)) is none
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert code(plan_request(Assignment(()), [1, 2], live, False)) is unknown
    assert code(plan_request(Assignment(()), [1, 9], live, False)) is invalid  # checked first
    assert code(plan_request(Assignment(()), None, live, False)) is none
    assert code(plan_request(ors, [2, 3, 4], live, True)) is unknown  # topic being deleted
    moving = ors.reassign_to([2, 3, 4])
    assert plan_request(moving, None, live, False) == Assignment((2, 3, 1))


def test_a_reassignment_starts_with_a_new_leader_epoch_and_nothing_else() -> None:
    ctx = context({1, 2, 3, 4}, [1, 2, 3], [1, 2, 3], leader=1)
    ctx.set_assignment(T0, Assignment((1, 2, 3)).reassign_to([2, 3, 4]))
    assert ctx.reassigning() == [T0]
    assert ctx.topics["t"].adding == {0: [4]} and ctx.topics["t"].removing == {0: [1]}
    bump = ctx.plan_epoch_bump(T0, "start")
    assert bump is not None
    assert bump.state == PartitionState([2, 3, 4, 1], 1, 8, [1, 2, 3], 5, version=12)


def test_completion_moves_the_lead_into_the_target_and_drops_the_removed_replicas() -> None:
    ctx = context({1, 2, 3, 4}, [4, 2, 1, 3], [1, 2, 3, 4], leader=1)
    ctx.set_assignment(T0, Assignment((4, 2)))  # the target alone, as the controller sets it
    done = ctx.plan_reassignment_completion(T0, [1, 3])
    assert done is not None
    # the first target replica in the ISR leads, not the first one left of ORS
    assert done.state == PartitionState([4, 2], 4, 8, [2, 4], 5, version=12)
    # a leader in the target that can lead keeps the lead (a new epoch all the same)
    ctx = context({1, 2, 3}, [2, 1, 3], [1, 2, 3], leader=1)
    ctx.set_assignment(T0, Assignment((2, 1)))
    kept = ctx.plan_reassignment_completion(T0, [3])
    assert kept is not None and (kept.state.leader, kept.state.isr) == (1, [1, 2])
    # ... unless it is shutting down
    ctx.shutting_down.add(1)
    moved = ctx.plan_reassignment_completion(T0, [3])
    assert moved is not None and (moved.state.leader, moved.state.isr) == (2, [1, 2])
    # no target replica can lead: the reassignment waits
    ctx = context({1}, [2, 1], [1, 2], leader=1)
    ctx.set_assignment(T0, Assignment((2,)))
    assert ctx.plan_reassignment_completion(T0, [1]) is None


def test_replicas_dropped_by_a_cancellation_leave_the_isr_and_the_lead() -> None:
    # [1, 2, 3] -> [2, 3, 4] cancelled after 4 joined the ISR and took the lead
    ctx = context({1, 2, 3, 4}, [2, 3, 1], [4, 2, 3, 1], leader=4)
    dropped = ctx.plan_replicas_dropped(T0, [4])
    assert dropped is not None
    assert (dropped.state.leader, dropped.state.leader_epoch, dropped.state.isr) == (
        2,
        8,
        [2, 3, 1],
    )
    # one that never joined: a new epoch, so it takes its StopReplica
    ctx = context({1, 2, 3, 4}, [2, 3, 1], [1, 2, 3], leader=1)
    quiet = ctx.plan_replicas_dropped(T0, [4])
    assert quiet is not None and (quiet.state.leader, quiet.state.isr) == (1, [1, 2, 3])
    # the last ISR member stays; nobody left to lead
    ctx = context({4}, [1], [4], leader=4)
    alone = ctx.plan_replicas_dropped(T0, [4])
    assert alone is not None and (alone.state.leader, alone.state.isr) == (NO_LEADER, [4])
