"""Where the replicas of new partitions go.

The placement spreads leaders and followers evenly over the brokers (the
scheme Kafka uses, so clusters made by either look alike):

- The brokers are put in a list: by id, or, when every broker has a rack,
  alternating racks (each rack's first broker, then each rack's second, ...).
- Partition ``p``'s first replica (its preferred leader) is the list's
  ``(start + p) mod n``-th broker, so leaders go round the brokers.
- Its followers come after the first at a distance that depends on
  ``shift``, which grows each time the partitions go once more round the
  brokers, so a broker's followers are not always the same brokers.
- With racks, a partition takes a follower on a rack it already has only
  once it has every rack, and a broker it already has never.

``start`` and ``shift`` are random for a new topic (so that many small topics
do not all lead on one broker) and derived from partition 0 when partitions
are added to a topic (`continue_assignment`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class AssignmentError(Exception):
    """A placement that cannot be made (answered INVALID_REPLICATION_FACTOR and the like)."""


@dataclass(frozen=True, slots=True)
class BrokerPlacement:
    broker_id: int
    rack: str | None = None


def broker_order(brokers: Sequence[BrokerPlacement]) -> list[int]:
    """The broker list placements index into (see the module's docstring)."""
    if not any(b.rack is not None for b in brokers):
        return sorted(b.broker_id for b in brokers)
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers, key=lambda b: b.broker_id):
        if b.rack is None:
            raise AssignmentError(
                f"broker {b.broker_id} has no rack while others have one: set broker.rack on "
                "every broker or on none"
            )
        by_rack.setdefault(b.rack, []).append(b.broker_id)
    racks = [by_rack[r] for r in sorted(by_rack)]
    return [r[i] for i in range(max(map(len, racks))) for r in racks if i < len(r)]


def assign_replicas(
    brokers: Sequence[BrokerPlacement],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start: int | None = None,
    shift: int | None = None,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replicas (the first is the preferred leader) of partitions ``first_partition`` on."""
    if partitions <= 0:
        raise AssignmentError("the number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise AssignmentError("the replication factor must be larger than 0")
    if replication_factor > len(brokers):
        raise AssignmentError(
            f"replication factor {replication_factor} is larger than the {len(brokers)} "
            "available brokers"
        )
    order = broker_order(brokers)
    n = len(order)
    rng = rng or random.Random()
    start = rng.randrange(n) if start is None else start
    shift = rng.randrange(n) if shift is None else shift
    rack_of = {b.broker_id: b.rack for b in brokers}
    racks = len(set(rack_of.values())) if rack_of[order[0]] is not None else 0
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        # One more step each time the partitions have gone round the brokers again.
        grown = shift + p // n - first_partition // n
        first = (p + start) % n
        if racks:
            out[p] = _rack_aware(order, rack_of, racks, replication_factor, first, grown * racks)
        else:
            out[p] = [order[first]] + [
                order[_follower(first, grown, j, n)] for j in range(replication_factor - 1)
            ]
    return out


def _follower(first: int, shift: int, j: int, n: int) -> int:
    """The j-th candidate after ``first``: never ``first``, and every other index once
    in any ``n - 1`` consecutive ``j``."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_aware(
    order: list[int],
    rack_of: Mapping[int, str | None],
    racks: int,
    replication_factor: int,
    first: int,
    shift: int,
) -> list[int]:
    n = len(order)
    replicas = [order[first]]
    racks_used = {rack_of[order[first]]}
    j = 0
    while len(replicas) < replication_factor:
        # Ends: while a rack is unused its brokers are all free, and once every rack
        # is used any free broker will do; the candidates cover every broker in n - 1 steps.
        candidate = order[_follower(first, shift, j, n)]
        j += 1
        if candidate in replicas:
            continue
        if rack_of[candidate] in racks_used and len(racks_used) < racks:
            continue
        replicas.append(candidate)
        racks_used.add(rack_of[candidate])
    return replicas


def continue_assignment(
    brokers: Sequence[BrokerPlacement],
    existing: Mapping[int, Sequence[int]],
    new_partitions: int,
) -> dict[int, list[int]]:
    """Replicas for ``new_partitions`` added to a topic with the ``existing`` placement:
    the same replication factor, leaders continuing round the brokers from partition 0's."""
    if 0 not in existing:
        raise AssignmentError("the topic has no partition 0 to continue from")
    first = existing[0]
    order = broker_order(brokers)
    start = order.index(first[0]) if first[0] in order else 0
    return assign_replicas(
        brokers,
        new_partitions,
        len(first),
        first_partition=len(existing),
        start=start,
        shift=start,
    )
