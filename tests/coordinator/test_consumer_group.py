"""The rules of consumer groups (KIP-848) as pure functions: reconciliation, the two
assignors, and the records that store a group and read it back."""

from __future__ import annotations

import dataclasses
import uuid

from kbroker.coordinator.consumer_group import (
    ClassicMembership,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    RegexError,
    RegexMatches,
    TopicInfo,
    assign,
    compile_regex,
    freeze,
    member_topics,
    reconcile,
    regex_error_text,
)
from kbroker.coordinator.consumer_records import ConsumerGroupReplay, changes
from kbroker.coordinator.records import parse_key

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"a": TopicInfo(T1, "a", 4), "b": TopicInfo(T2, "b", 3)}


def _nobody_holds(topic_id: uuid.UUID, partition: int) -> bool:
    return False


def test_a_new_member_gets_its_target_at_once() -> None:
    m = reconcile(ConsumerMember("m"), 3, freeze({T1: {0, 1}}), {}, _nobody_holds)
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (3, 0, MemberState.STABLE)
    assert dict(m.assigned) == {T1: frozenset({0, 1})}


def test_a_member_revokes_before_it_moves_to_the_next_epoch() -> None:
    m = ConsumerMember("m", member_epoch=3, assigned=freeze({T1: {0, 1, 2, 3}}))
    target = freeze({T1: {0, 1}})
    step = reconcile(m, 4, target, {T1: [0, 1, 2, 3]}, _nobody_holds)
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert step.member_epoch == 3  # still in its epoch until it gave them up
    assert dict(step.assigned) == {T1: frozenset({0, 1})}
    assert dict(step.pending_revocation) == {T1: frozenset({2, 3})}
    # Still owning one of them: nothing moves.
    assert reconcile(step, 4, target, {T1: [0, 1, 3]}, _nobody_holds) is step
    # Not saying what it owns counts as still owning them.
    assert reconcile(step, 4, target, None, _nobody_holds) is step
    done = reconcile(step, 4, target, {T1: [0, 1]}, _nobody_holds)
    assert (done.member_epoch, done.state) == (4, MemberState.STABLE)
    assert dict(done.pending_revocation) == {}


def test_a_partition_another_member_still_holds_waits_until_released() -> None:
    held = {(T1, 2)}
    m = reconcile(ConsumerMember("m"), 5, freeze({T1: {2, 3}}), {}, lambda t, p: (t, p) in held)
    assert m.state is MemberState.UNRELEASED_PARTITIONS and m.member_epoch == 5
    assert dict(m.assigned) == {T1: frozenset({3})}
    held.clear()
    m = reconcile(m, 5, freeze({T1: {2, 3}}), {T1: [3]}, lambda t, p: (t, p) in held)
    assert m.state is MemberState.STABLE and dict(m.assigned) == {T1: frozenset({2, 3})}


def test_range_gives_each_subscriber_one_contiguous_range_per_topic() -> None:
    out = assign("range", {"m2": {"a", "b"}, "m1": {"a", "b"}}, TOPICS, {})
    assert dict(out["m1"]) == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert dict(out["m2"]) == {T1: frozenset({2, 3}), T2: frozenset({2})}
    # Static members come first, by instance id.
    static = assign("range", {"m2": {"a"}, "m1": {"a"}}, TOPICS, {}, {"m2": "i0", "m1": None})
    assert dict(static["m2"]) == {T1: frozenset({0, 1})}


def _all_once(out: dict[str, object], topics: dict[str, TopicInfo]) -> None:
    seen = [(t, p) for a in out.values() for t, ps in a.items() for p in ps]  # type: ignore[attr-defined]
    assert sorted(seen) == sorted(
        (info.topic_id, p) for info in topics.values() for p in range(info.partitions)
    )


def test_uniform_balances_and_keeps_partitions_where_they_were() -> None:
    members = {"m1": {"a", "b"}, "m2": {"a", "b"}, "m3": {"a", "b"}}
    first = assign("uniform", members, TOPICS, {})
    _all_once(first, TOPICS)
    assert sorted(sum(len(ps) for ps in a.values()) for a in first.values()) == [2, 2, 3]
    # m3 leaves: what m1 and m2 had stays with them.
    second = assign("uniform", {"m1": members["m1"], "m2": members["m2"]}, TOPICS, first)
    _all_once(second, TOPICS)
    for m in ("m1", "m2"):
        for t, ps in first[m].items():
            assert ps <= second[m].get(t, frozenset())
    assert sorted(sum(len(ps) for ps in a.values()) for a in second.values()) == [3, 4]


def test_uniform_with_different_subscriptions_gives_each_topic_to_its_subscribers() -> None:
    out = assign("uniform", {"m1": {"a"}, "m2": {"a", "b"}}, TOPICS, {})
    _all_once(out, TOPICS)
    assert T2 not in out["m1"]
    assert sum(len(ps) for ps in out["m1"].values()) >= 3  # it takes most of a


def _group() -> ConsumerGroup:
    m1 = ConsumerMember(
        "m1",
        instance_id="i1",
        client_id="c",
        client_host="/127.0.0.1",
        subscribed_topic_names=("a",),
        rebalance_timeout_ms=300000,
        server_assignor="range",
        member_epoch=2,
        previous_member_epoch=1,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned=freeze({T1: {0}}),
        pending_revocation=freeze({T1: {1}}),
    )
    m2 = ConsumerMember(
        "m2",
        subscribed_topic_regex="^b.*",
        member_epoch=2,
        classic=ClassicMembership(10000, (("range", b"\x00\x01sub"), ("roundrobin", b""))),
    )
    return ConsumerGroup(
        "g",
        epoch=3,
        assignment_epoch=3,
        members={"m1": m1, "m2": m2},
        targets={"m1": freeze({T1: {0}}), "m2": freeze({T1: {1}, T2: {0, 1, 2}})},
        subscription={"a": TOPICS["a"], "b": TOPICS["b"]},
    )


def _replay(records: list[tuple[bytes, bytes | None]]) -> dict[str, ConsumerGroup]:
    replay = ConsumerGroupReplay()
    for key, value in records:
        replay.add(parse_key(key), value)  # type: ignore[arg-type]
    return replay.groups()


def test_the_records_of_a_group_read_back_as_the_group() -> None:
    group = _group()
    records = changes(None, group)
    assert {k[:2] for k, _ in records} == {b"\x00" + bytes([v]) for v in range(3, 9)}
    assert _replay(records)["g"] == group


def test_only_what_changed_is_written_and_departures_are_tombstoned() -> None:
    before = _group()
    after = before.copy()
    del after.members["m1"]
    del after.targets["m1"]
    after.members["m2"] = dataclasses.replace(after.members["m2"], member_epoch=4)
    after.epoch = after.assignment_epoch = 4
    delta = changes(before, after)
    tombstoned = [k[1] for k, v in delta if v is None]
    assert tombstoned == [8, 7, 5]  # current assignment, target, metadata of m1
    # m2's metadata and target did not change: not written again.
    written = sorted(k[1] for k, v in delta if v is not None)
    assert written == [3, 6, 8]
    assert _replay(changes(None, before) + delta)["g"] == after
    assert _replay(changes(None, before) + changes(before, None)) == {}


def test_regex_matches_are_kept_until_the_topic_names_change() -> None:
    version = [1]
    matches = RegexMatches(lambda: version[0])
    topics: dict[str, object] = {"orders-eu": 1, "orders-us": 1, "__consumer_offsets": 1}
    m = ConsumerMember("m", subscribed_topic_names=("gone",), subscribed_topic_regex="orders-.*")
    assert member_topics(m, topics, matches) == {"orders-eu", "orders-us"}
    topics["orders-asia"] = 1
    # Same version: the names did not change as far as it knows.
    assert member_topics(m, topics, matches) == {"orders-eu", "orders-us"}
    version[0] = 2
    assert member_topics(m, topics, matches) == {"orders-eu", "orders-us", "orders-asia"}
    # A name is whole-matched, and internal topics never match.
    assert member_topics(ConsumerMember("x", subscribed_topic_regex="orders"), topics) == set()
    assert member_topics(ConsumerMember("y", subscribed_topic_regex=".*"), topics) == {
        "orders-eu",
        "orders-us",
        "orders-asia",
    }


def test_a_pathological_regex_matches_in_linear_time() -> None:
    """(a+)+b backtracks exponentially in Python's re (a 40-character name: hours); RE2,
    the engine Kafka uses, answers at once. A client's regex must not freeze the broker."""
    topics: dict[str, object] = {"a" * 249: 1, "ab": 1}
    m = ConsumerMember("m", subscribed_topic_regex="(a+)+b")
    assert member_topics(m, topics) == {"ab"}


def test_a_regex_re2_refuses_is_an_error_with_its_reason() -> None:
    for pattern, reason in (("(unclosed", "missing )"), (r"(a)\1", "invalid escape")):
        try:
            compile_regex(pattern)
        except RegexError as exc:
            assert reason in regex_error_text(exc)
        else:
            raise AssertionError(f"{pattern} compiled")
