"""The controller's leader elections, rule by rule."""

from __future__ import annotations

from kbroker.controller import leader_election as elect
from kbroker.controller.leader_election import Elected


def test_offline_takes_the_first_live_isr_replica_in_replica_order() -> None:
    assert elect.offline([1, 2, 3], isr=[3, 2], live={2, 3}, allow_unclean=False) == Elected(
        2, [3, 2]
    )
    # Dead ISR members leave the ISR.
    assert elect.offline([1, 2, 3], isr=[1, 2, 3], live={2}, allow_unclean=False) == Elected(2, [2])


def test_offline_without_a_live_isr_replica() -> None:
    assert elect.offline([1, 2, 3], isr=[1], live={2, 3}, allow_unclean=False) is None
    assert elect.offline([1, 2, 3], isr=[1], live={3, 2}, allow_unclean=True) == Elected(
        2, [2], unclean=True
    )
    assert elect.offline([1, 2], isr=[1], live=set(), allow_unclean=True) is None


def test_preferred_only_elects_the_first_replica() -> None:
    assert elect.preferred([1, 2], isr=[2, 1], live={1, 2}) == Elected(1, [2, 1])
    assert elect.preferred([1, 2], isr=[2], live={1, 2}) is None
    assert elect.preferred([1, 2], isr=[1, 2], live={2}) is None


def test_reassignment_elects_from_the_target_replicas() -> None:
    assert elect.reassignment([4, 5], isr=[1, 5, 4], live={4, 5}) == Elected(4, [1, 5, 4])
    assert elect.reassignment([4, 5], isr=[1, 5], live={4, 5}) == Elected(5, [1, 5])
    assert elect.reassignment([4, 5], isr=[1], live={1, 4, 5}) is None


def test_controlled_shutdown_moves_leadership_off_and_out_of_the_isr() -> None:
    assert elect.controlled_shutdown(
        [1, 2, 3], isr=[1, 2, 3], live={1, 2, 3}, shutting_down={1}
    ) == Elected(2, [2, 3])
    assert elect.controlled_shutdown([1, 2], isr=[1], live={1, 2}, shutting_down={1}) is None
