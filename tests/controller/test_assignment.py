"""Replica placement for new partitions: the documented example, and properties over
random clusters (distinct replicas, leaders spread evenly, racks covered)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.controller.assignment import (
    AssignmentError,
    BrokerPlacement,
    assign_replicas,
    broker_order,
    continue_assignment,
)


def brokers(*ids: int, racks: str | None = None) -> list[BrokerPlacement]:
    """``racks``: one letter per broker, or None for no racks."""
    return [BrokerPlacement(b, None if racks is None else racks[i]) for i, b in enumerate(ids)]


def test_five_brokers_ten_partitions_three_replicas() -> None:
    # Leaders go round the brokers; the followers of the second round are shifted by one.
    placed = assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, start=0, shift=0)
    assert placed == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_broker_ids_need_not_be_contiguous() -> None:
    placed = assign_replicas(brokers(7, 3, 11), 3, 2, start=0, shift=0)
    assert placed == {0: [3, 7], 1: [7, 11], 2: [11, 3]}


def test_racks_alternate_in_the_broker_order() -> None:
    order = broker_order(brokers(0, 1, 2, 3, 4, 5, racks="aaabbc"))
    assert order == [0, 3, 5, 1, 4, 2]


@pytest.mark.parametrize(
    ("partitions", "rf", "message"),
    [
        (3, 3, "replication factor 3 is larger than the 2 available brokers"),
        (3, 0, "replication factor must be larger than 0"),
        (0, 1, "number of partitions must be larger than 0"),
    ],
)
def test_impossible_placements_are_refused(partitions: int, rf: int, message: str) -> None:
    with pytest.raises(AssignmentError, match=message):
        assign_replicas(brokers(0, 1), partitions, rf)


def test_racks_on_some_brokers_only_are_refused() -> None:
    mixed = [BrokerPlacement(0, "a"), BrokerPlacement(1, "b"), BrokerPlacement(2, None)]
    with pytest.raises(AssignmentError, match="broker 2 has no rack while others have one"):
        assign_replicas(mixed, 3, 1)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[BrokerPlacement], int, int, int, int]:
    n = draw(st.integers(1, 9))
    ids = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n, unique=True))
    racked = draw(st.booleans())
    placements = [BrokerPlacement(b, draw(st.sampled_from("abc")) if racked else None) for b in ids]
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 40))
    return placements, rf, partitions, draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_placements_are_valid_and_even(
    cluster: tuple[list[BrokerPlacement], int, int, int, int],
) -> None:
    placements, rf, partitions, start, shift = cluster
    placed = assign_replicas(placements, partitions, rf, start=start, shift=shift)
    ids = {b.broker_id for b in placements}
    rack_of = {b.broker_id: b.rack for b in placements}
    racks = {b.rack for b in placements}
    assert sorted(placed) == list(range(partitions))
    for replicas in placed.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= ids
        if None not in racks:
            # As many racks as the replicas can cover.
            assert len({rack_of[r] for r in replicas}) == min(rf, len(racks))
    leaders = Counter(r[0] for r in placed.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1


def test_followers_spread_over_brokers_without_racks() -> None:
    placed = assign_replicas(brokers(*range(6)), 60, 3, rng=random.Random(1))
    per_broker = Counter(r for replicas in placed.values() for r in replicas)
    assert set(per_broker.values()) == {30}


def test_added_partitions_continue_from_partition_zero() -> None:
    cluster = brokers(0, 1, 2, 3)
    existing = assign_replicas(cluster, 3, 2, start=2, shift=2)
    added = continue_assignment(cluster, existing, 5)
    assert sorted(added) == [3, 4, 5, 6, 7]
    assert all(len(r) == 2 and len(set(r)) == 2 for r in added.values())
    # Leaders carry on round the brokers after the existing ones.
    assert [added[p][0] for p in range(3, 8)] == [1, 2, 3, 0, 1]
    with pytest.raises(AssignmentError):
        continue_assignment(cluster, {}, 1)
