"""Who leads a partition, and with which in-sync replicas: the controller's rules.

Each election picks, in the order of the partition's replicas (so the
preferred replica wins when it can), the first replica that qualifies:

- `offline`: the leader died or there was none: a live replica in the ISR;
  if none and unclean election is allowed, any live replica, which then
  forms the ISR alone and may lack acknowledged records (the caller logs it).
- `preferred`: moving leadership back to the first replica: only the first
  replica, live and in the ISR.
- `reassignment`: the target replicas of a reassignment, live and in the ISR.
- `controlled_shutdown`: a live ISR member that is not shutting down; the
  replicas shutting down leave the ISR.

An election that finds nobody returns None: the partition stays (or goes)
offline, and nothing is written.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass


class ElectionType(enum.IntEnum):
    """What an ElectLeaders request asks for (its election_type field)."""

    # Leadership back to each partition's first replica (`preferred`).
    PREFERRED = 0
    # A leader for partitions without a live one, from outside the ISR if need be.
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class Elected:
    leader: int
    isr: list[int]
    # Unclean: the new leader was not in the ISR; acknowledged records may be lost.
    unclean: bool = False


def offline(
    replicas: Sequence[int], isr: Collection[int], live: Collection[int], allow_unclean: bool
) -> Elected | None:
    for r in replicas:
        if r in live and r in isr:
            return Elected(r, [i for i in isr if i in live])
    if allow_unclean:
        for r in replicas:
            if r in live:
                return Elected(r, [r], unclean=True)
    return None


def preferred(
    replicas: Sequence[int], isr: Collection[int], live: Collection[int]
) -> Elected | None:
    if replicas and replicas[0] in live and replicas[0] in isr:
        return Elected(replicas[0], list(isr))
    return None


def reassignment(
    target: Sequence[int], isr: Collection[int], live: Collection[int]
) -> Elected | None:
    for r in target:
        if r in live and r in isr:
            return Elected(r, list(isr))
    return None


def controlled_shutdown(
    replicas: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> Elected | None:
    remaining = [i for i in isr if i not in shutting_down]
    for r in replicas:
        if r in live and r in isr and r not in shutting_down:
            return Elected(r, remaining)
    return None
