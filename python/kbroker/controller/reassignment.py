"""Partition reassignment (KIP-455): a partition's replicas moved to other brokers, with
the rules of Kafka 3.9's ZooKeeper controller and without I/O.

A partition being reassigned has three lists in its topic's znode: ``replicas``
(RS), ``adding_replicas`` (AR) and ``removing_replicas`` (RR). The replicas it
had before (ORS) are RS - AR, the ones it is moving to (TRS) are RS - RR, and
RS lists TRS first, in the order asked for, then the rest of ORS, so the first
target replica is the preferred leader throughout. A reassignment is complete
once every target replica is in the ISR; the replicas in RR then leave.

`Assignment` is one partition's three lists; `Assignment.reassign_to` is how a
request (a new target, or a cancellation, which targets ORS again) turns the
current lists into the next ones, and `check_target` and `plan_request` judge a
request with Kafka's codes and messages. The controller
(`kbroker.controller.controller`) does the writing and the telling; the new
partition states it writes are planned by `ControllerContext.plan_epoch_bump`,
`plan_reassignment_completion` and `plan_replicas_dropped`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from kbroker.protocol import ErrorCode
from kbroker.protocol.errors import KafkaError


@dataclass(frozen=True, slots=True)
class Assignment:
    """One partition's replicas and, while it is reassigned, those being added and removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> tuple[int, ...]:
        """ORS: the replicas before the reassignment (all of them when none runs)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: the replicas once the reassignment completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Sequence[int]) -> Assignment:
        """The lists while moving from this assignment's ORS to ``target``: RS is the target
        and then the rest of ORS (so a cancellation, ``target`` = ORS, is not moving)."""
        origin = self.origin
        replicas = tuple(dict.fromkeys([*target, *origin]))
        return Assignment(
            replicas,
            tuple(r for r in replicas if r not in origin),
            tuple(r for r in replicas if r not in target),
        )

    def is_complete(self, isr: Collection[int]) -> bool:
        """True when nothing is moving or every target replica is in ``isr``."""
        return not self.moving or set(self.target) <= set(isr)


def check_target(
    current: Assignment, target: Sequence[int], live: Collection[int]
) -> KafkaError | None:
    """Kafka's checks of a requested replica list (INVALID_REPLICA_ASSIGNMENT): not empty,
    no broker twice, no negative id, and every replica it adds registered now."""
    if not target:
        return KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(target)) != len(target):
        return KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
        )
    if any(r < 0 for r in target):
        return KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Invalid broker id in replica list: {list(target)}",
        )
    adding = current.reassign_to(target).adding
    if not set(adding) <= set(live):
        return KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
            f"live broker list: {sorted(live)}",
        )
    return None


def plan_request(
    current: Assignment, target: Sequence[int] | None, live: Collection[int], deleting: bool
) -> Assignment | KafkaError:
    """The assignment one partition of an AlterPartitionReassignments asks for, or its
    refusal, checked in Kafka's order. ``current`` has no replicas for an unknown
    partition; ``target`` None cancels the reassignment in progress."""
    if target is not None:
        refused = check_target(current, target, live)
        if refused is not None:
            return refused
    if target is None and not current.moving:
        return KafkaError(
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No ongoing reassignment for this partition."
        )
    if deleting or not current.replicas:
        return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
    return current.reassign_to(current.origin if target is None else target)
