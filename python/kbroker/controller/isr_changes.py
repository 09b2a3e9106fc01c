"""ISR changes a partition's leader asks the controller for (AlterPartition), judged
without I/O.

A leader shrinks its ISR when a follower falls behind and expands it when one
catches up; in Kafka 3.9's ZooKeeper mode it asks the controller, which alone
writes partition states. `plan_isr_change` judges one partition of the request
against the `ControllerContext` and returns either the code it is refused with,
the current state (already as asked: the answer is repeated, not written again),
or the `Transition` to write. The checks and their codes are Kafka's (its ZooKeeper
controller's, and its KRaft controller's stricter ones where the ZooKeeper one
checks nothing), in this order:

- UNKNOWN_TOPIC_ID (v2+) / UNKNOWN_TOPIC_OR_PARTITION: not a partition with a state;
- NOT_CONTROLLER: the leader knows a newer leader or partition epoch than this
  controller (another controller must have written it);
- FENCED_LEADER_EPOCH: an older leader epoch (leadership moved since);
- INVALID_REQUEST: not from the partition's leader;
- (the ISR already as asked: the current state, even for an older partition epoch);
- INVALID_UPDATE_VERSION: an older partition epoch (the znode version; the state
  changed since the leader last heard of it);
- INVALID_REQUEST: an ISR that is empty, repeats a broker, names a broker that is
  not a replica, or leaves the leader out; a leader recovering from an unclean
  election (this controller writes every state as recovered);
- INELIGIBLE_REPLICA (OPERATION_NOT_ATTEMPTED before v2): an ISR member that is not
  registered, is shutting down, or (v3) registered under another broker epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kbroker.controller.context import ControllerContext, Transition
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ErrorCode

# LeaderRecoveryState: recovered, or recovering from an unclean election (KIP-704).
RECOVERED = 0
RECOVERING = 1
# A broker epoch an ISR member is named with when the leader does not know it.
UNKNOWN_EPOCH = -1


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request: the ISR its leader asks for."""

    # The topic: by id from v2 (then `topic` is ignored), by name before.
    topic: str
    partition: int
    leader_epoch: int
    isr: Sequence[int]
    # The partition epoch (znode version) of the state the leader changes.
    partition_epoch: int
    leader_recovery_state: int = RECOVERED
    topic_id: uuid.UUID | None = None
    # v3: each ISR member's broker epoch as the leader knows it (UNKNOWN_EPOCH: unchecked).
    isr_epochs: Sequence[int] | None = None


@dataclass(frozen=True, slots=True)
class IsrAnswer:
    """The answer for one `IsrChange`: NONE with the partition's state now, or a code."""

    change: IsrChange
    error: ErrorCode
    # The partition (its name known) and, with NONE, its state now.
    tp: TopicPartition | None = None
    state: PartitionState | None = None


def resolve(ctx: ControllerContext, change: IsrChange) -> TopicPartition | ErrorCode:
    """The partition a change names, or UNKNOWN_TOPIC_ID for an id no topic has."""
    if change.topic_id is None:
        return TopicPartition(change.topic, change.partition)
    for topic in ctx.topics.values():
        if topic.topic_id == change.topic_id:
            return TopicPartition(topic.name, change.partition)
    return ErrorCode.UNKNOWN_TOPIC_ID


def _ineligible(ctx: ControllerContext, change: IsrChange) -> list[int]:
    epochs = change.isr_epochs or [UNKNOWN_EPOCH] * len(change.isr)
    out = []
    for r, epoch in zip(change.isr, epochs, strict=False):
        live = ctx.live.get(r)
        if (
            live is None
            or r in ctx.shutting_down
            or (epoch != UNKNOWN_EPOCH and epoch != live.epoch)
        ):
            out.append(r)
    return out


def plan_isr_change(
    ctx: ControllerContext, broker_id: int, version: int, tp: TopicPartition, change: IsrChange
) -> ErrorCode | PartitionState | Transition:
    """Judges ``change`` (from ``broker_id``, an AlterPartition of ``version``) of ``tp``:
    the code it is refused with, the current state when it already has the ISR asked
    for, or the transition to write (same leader and leader epoch, the new ISR)."""
    current = ctx.states.get(tp)
    replicas = ctx.replicas(tp)
    if current is None or not replicas:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if change.leader_epoch > current.leader_epoch or change.partition_epoch > current.version:
        return ErrorCode.NOT_CONTROLLER
    if change.leader_epoch < current.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if broker_id != current.leader:
        return ErrorCode.INVALID_REQUEST
    isr = list(change.isr)
    if isr == current.isr and change.leader_recovery_state == RECOVERED:
        return current
    if change.partition_epoch < current.version:
        return ErrorCode.INVALID_UPDATE_VERSION
    if (
        not isr
        or len(set(isr)) != len(isr)
        or not set(isr) <= set(replicas)
        or current.leader not in isr
        or change.leader_recovery_state != RECOVERED
        or (change.isr_epochs is not None and len(change.isr_epochs) != len(isr))
    ):
        return ErrorCode.INVALID_REQUEST
    if _ineligible(ctx, change):
        return ErrorCode.INELIGIBLE_REPLICA if version >= 2 else ErrorCode.OPERATION_NOT_ATTEMPTED
    state = PartitionState(
        replicas=list(replicas),
        leader=current.leader,
        leader_epoch=current.leader_epoch,
        isr=isr,
        controller_epoch=ctx.epoch,
        version=current.version,
    )
    grew = sorted(set(isr) - set(current.isr))
    shrank = sorted(set(current.isr) - set(isr))
    why = (
        f"AlterPartition from leader {broker_id}"
        + (f": +{grew}" if grew else "")
        + (f" -{shrank}" if shrank else "")
    )
    return Transition(tp, state, why)
