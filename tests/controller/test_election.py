"""The controller's leader elections, rule by rule."""

from __future__ import annotations

from kbroker.controller import election
from kbroker.controller.election import Elected


def test_offline_takes_the_first_live_isr_replica_in_replica_order() -> None:
    assert election.offline([1, 2, 3], isr=[3, 2], live={2, 3}, allow_unclean=False) == Elected(
        2, [3, 2]
    )
    # Dead ISR members leave the ISR.
    assert election.offline([1, 2, 3], isr=[1, 2, 3], live={2}, allow_unclean=False) == Elected(
        2, [2]
    )


def test_offline_without_a_live_isr_replica() -> None:
    assert election.offline([1, 2, 3], isr=[1], live={2, 3}, allow_unclean=False) is None
    assert election.offline([1, 2, 3], isr=[1], live={3, 2}, allow_unclean=True) == Elected(
        2, [2], unclean=True
    )
    assert election.offline([1, 2], isr=[1], live=set(), allow_unclean=True) is None


def test_preferred_only_elects_the_first_replica() -> None:
    assert election.preferred([1, 2], isr=[2, 1], live={1, 2}) == Elected(1, [2, 1])
    assert election.preferred([1, 2], isr=[2], live={1, 2}) is None
    assert election.preferred([1, 2], isr=[1, 2], live={2}) is None


def test_reassignment_elects_from_the_target_replicas() -> None:
    assert election.reassignment([4, 5], isr=[1, 5, 4], live={4, 5}) == Elected(4, [1, 5, 4])
    assert election.reassignment([4, 5], isr=[1, 5], live={4, 5}) == Elected(5, [1, 5])
    assert election.reassignment([4, 5], isr=[1], live={1, 4, 5}) is None


def test_controlled_shutdown_moves_leadership_off_and_out_of_the_isr() -> None:
    assert election.controlled_shutdown(
        [1, 2, 3], isr=[1, 2, 3], live={1, 2, 3}, shutting_down={1}
    ) == Elected(2, [2, 3])
    assert election.controlled_shutdown([1, 2], isr=[1], live={1, 2}, shutting_down={1}) is None
