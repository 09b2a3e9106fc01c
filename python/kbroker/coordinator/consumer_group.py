"""The state of a consumer group of the consumer group protocol (KIP-848), and its rules.

A group of this protocol is driven by its members' heartbeats
(ConsumerGroupHeartbeat) and assigned by the coordinator itself:

- the **group epoch** grows whenever what the group must consume changes (a
  member joins or leaves, a subscription changes, a subscribed topic appears,
  disappears or grows);
- for each group epoch an **assignor** (`uniform` or `range`) computes the
  **target assignment**: which partitions each member should own;
- each member then **reconciles** towards its target on its own, one
  heartbeat at a time (`reconcile`): it first gives up (revokes) the
  partitions it must lose, keeping its epoch; only then does it move to the
  target epoch and get the partitions it must gain, and of those only the
  ones no other member still holds (a partition is owned by one member at a
  time: until the other member has revoked it, it stays "unreleased").

Everything here is plain data and pure functions over it; the coordinator
(`consumer_coordinator`) applies them, stores the result as records
(`consumer_records`) and answers the requests. Members are immutable:
a change makes a new one, so the coordinator can compute a change, store it,
and only then install it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Any

import re2

# topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = MappingProxyType({})

# Member epochs a heartbeat may carry besides the member's own.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

ASSIGNORS = ("uniform", "range")


class MemberState(IntEnum):
    """Where a member is in its reconciliation (Kafka's values, as stored)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A subscribed topic as the group last saw it."""

    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMembership:
    """How a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat)
    inside a consumer group joined: its session timeout and its protocols (name and
    subscription bytes), in its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    # What the member told (its metadata record).
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMembership | None = None
    # Where it is (its current assignment record).
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)
    pending_revocation: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)

    def same_metadata(self, other: ConsumerMember) -> bool:
        return _metadata(self) == _metadata(other)

    def same_assignment(self, other: ConsumerMember) -> bool:
        return _assignment_state(self) == _assignment_state(other)

    def with_epoch(self, epoch: int) -> ConsumerMember:
        return dataclasses.replace(
            self, member_epoch=epoch, previous_member_epoch=self.member_epoch
        )

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


def _metadata(m: ConsumerMember) -> tuple[object, ...]:
    return (
        m.instance_id,
        m.rack_id,
        m.client_id,
        m.client_host,
        m.subscribed_topic_names,
        m.subscribed_topic_regex,
        m.rebalance_timeout_ms,
        m.server_assignor,
        m.classic,
    )


def _assignment_state(m: ConsumerMember) -> tuple[object, ...]:
    return (
        m.member_epoch,
        m.previous_member_epoch,
        m.state,
        dict(m.assigned),
        dict(m.pending_revocation),
    )


def freeze(assignment: Mapping[uuid.UUID, Iterable[int]]) -> Assignment:
    """An assignment without empty topics, immutable."""
    frozen = {t: frozenset(ps) for t, ps in assignment.items()}
    return MappingProxyType({t: ps for t, ps in frozen.items() if ps})


def is_subset(owned: Mapping[uuid.UUID, Iterable[int]] | None, of: Assignment) -> bool:
    if owned is None:
        return False
    return all(set(ps) <= of.get(t, frozenset()) for t, ps in owned.items())


@dataclass(slots=True)
class ConsumerGroup:
    """The stored state of one consumer group (what its records say)."""

    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    # Subscribed topics that exist, by name.
    subscription: dict[str, TopicInfo] = field(default_factory=dict)

    def copy(self) -> ConsumerGroup:
        return ConsumerGroup(
            self.group_id,
            self.epoch,
            self.assignment_epoch,
            dict(self.members),
            dict(self.targets),
            dict(self.subscription),
        )

    @property
    def state(self) -> str:
        """Kafka's names: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.epoch != self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def classic_protocols_supported(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a classic member with these protocols may join: the consumer protocol
        type, and a protocol every classic member already in the group also has."""
        if protocol_type != "consumer":
            return False
        wanted = set(names)
        for m in self.members.values():
            if m.classic is not None:
                wanted &= {name for name, _ in m.classic.protocols}
        return bool(wanted)

    def all_classic_except(self, member_id: str) -> bool:
        return all(m.classic is not None for m in self.members.values() if m.member_id != member_id)

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def owners(self, excluding: str) -> dict[tuple[uuid.UUID, int], int]:
        """(topic id, partition) -> epoch of the member holding it (assigned or being
        revoked), for every member but ``excluding``."""
        held: dict[tuple[uuid.UUID, int], int] = {}
        for m in self.members.values():
            if m.member_id == excluding:
                continue
            for assignment in (m.assigned, m.pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        held[(topic_id, p)] = m.member_epoch
        return held

    def subscribed_names(
        self, topics: Mapping[str, object], matches: RegexMatches | None = None
    ) -> set[str]:
        """Which of ``topics`` (existing ones, by name) some member subscribes to."""
        out: set[str] = set()
        for m in self.members.values():
            out.update(member_topics(m, topics, matches))
        return out

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (ties: by name), else ``default``."""
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not asked:
            return default
        return min(asked.items(), key=lambda kv: (-kv[1], kv[0]))[0]


_regex_cache: dict[str, Any] = {}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad regex is its error, answered, not logged

RegexError = re2.error


def regex_error_text(exc: Exception) -> str:
    """RE2's reason for refusing a pattern (it gives bytes)."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def compile_regex(pattern: str) -> Any:
    """A subscription regex, compiled by RE2 as Kafka's RE2J compiles it: matching takes
    time linear in the topic name whatever the pattern (a backtracking engine can take
    exponential time on patterns such as ``(a+)+b``). Raises `RegexError` when it is not
    one."""
    compiled = _regex_cache.get(pattern)
    if compiled is None:
        compiled = re2.compile(pattern, _RE2_OPTIONS)
        if len(_regex_cache) > 1024:
            _regex_cache.clear()
        _regex_cache[pattern] = compiled
    return compiled


def member_topics(
    m: ConsumerMember, existing: Mapping[str, object], matches: RegexMatches | None = None
) -> set[str]:
    """The ``existing`` topics ``m`` subscribes to, by name or by its regex (whole names;
    internal topics never match)."""
    out = {t for t in m.subscribed_topic_names if t in existing}
    if m.subscribed_topic_regex:
        out.update((matches or RegexMatches()).get(m.subscribed_topic_regex, existing))
    return out


class RegexMatches:
    """The topics each subscription regex matches, kept while the topic names stay the same:
    ``version()`` grows whenever they change (without it nothing is kept)."""

    def __init__(self, version: Callable[[], int] | None = None) -> None:
        self._version_of = version
        self._version: int | None = None
        self._matched: dict[str, frozenset[str]] = {}

    def get(self, pattern: str, existing: Mapping[str, object]) -> frozenset[str]:
        version = self._version_of() if self._version_of is not None else None
        if version is None or version != self._version:
            self._matched.clear()
            self._version = version
        found = self._matched.get(pattern)
        if found is None:
            try:
                rx = compile_regex(pattern)
            except RegexError:
                return frozenset()
            found = frozenset(t for t in existing if not t.startswith("__") and rx.fullmatch(t))
            if version is not None:
                self._matched[pattern] = found
        return found


# -- reconciliation -------------------------------------------------------------------------


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
    partition_owner: Callable[[uuid.UUID, int], bool],
) -> ConsumerMember:
    """The member's next step towards ``target`` (of ``target_epoch``).

    ``owned`` is what the member says it owns (None: it did not say);
    ``partition_owner(topic, p)`` tells whether another member still holds p.
    """
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(
            member, member.member_epoch, target_epoch, target, owned, partition_owner
        )
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(
            member, member.member_epoch + 1, target_epoch, target, owned, partition_owner
        )
    # UNRELEASED_PARTITIONS, or a state this coordinator does not know (restart from scratch).
    return _next_assignment(
        member, member.member_epoch, target_epoch, target, owned, partition_owner
    )


def _owns_any(owned: Mapping[uuid.UUID, Iterable[int]] | None, partitions: Assignment) -> bool:
    if owned is None:
        return True  # it did not say: assume it still does
    return any(set(ps) & partitions.get(t, frozenset()) for t, ps in owned.items())


def _next_assignment(
    member: ConsumerMember,
    epoch_if_revoking: int,
    target_epoch: int,
    target: Assignment,
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
    partition_owner: Callable[[uuid.UUID, int], bool],
) -> ConsumerMember:
    keep: dict[uuid.UUID, set[int]] = {}
    revoke: dict[uuid.UUID, set[int]] = {}
    gain: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep[topic_id] = set(current & wanted)
        revoke[topic_id] = set(current - wanted)
        free = set()
        for p in wanted - current:
            if partition_owner(topic_id, p):
                unreleased = True
            else:
                free.add(p)
        gain[topic_id] = free
    revoking = freeze(revoke)
    if revoking and _owns_any(owned, revoking):
        # Give up first, in the current epoch.
        return dataclasses.replace(
            member.with_epoch(epoch_if_revoking),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=freeze(keep),
            pending_revocation=revoking,
        )
    for topic_id, ps in gain.items():
        keep.setdefault(topic_id, set()).update(ps)
    return dataclasses.replace(
        member.with_epoch(target_epoch),
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        assigned=freeze(keep),
        pending_revocation=EMPTY_ASSIGNMENT,
    )


# -- assignors ---------------------------------------------------------------------------------


def assign(
    assignor: str,
    members: Mapping[str, set[str]],
    topics: Mapping[str, TopicInfo],
    previous: Mapping[str, Assignment],
    instances: Mapping[str, str | None] | None = None,
) -> dict[str, Assignment]:
    """The target assignment: ``members`` maps each member id to the topic names it
    subscribes to (existing ones), ``topics`` every subscribed topic, ``previous`` the
    last target (which `uniform` keeps where it can), ``instances`` the static members'
    instance ids (which `range` orders first)."""
    if assignor == "range":
        return _assign_range(members, topics, instances or {})
    return _assign_uniform(members, topics, previous)


def _assign_range(
    members: Mapping[str, set[str]],
    topics: Mapping[str, TopicInfo],
    instances: Mapping[str, str | None],
) -> dict[str, Assignment]:
    """Per topic, its subscribers each get one contiguous range, in Kafka's order: static
    members first by instance id, then the others by member id; the first ones one
    partition more when they do not divide evenly."""

    def order(member_id: str) -> tuple[int, str]:
        instance = instances.get(member_id)
        return (0, instance) if instance is not None else (1, member_id)

    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for name, info in sorted(topics.items()):
        subscribers = sorted((m for m, s in members.items() if name in s), key=order)
        if not subscribers:
            continue
        quota, extra = divmod(info.partitions, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            count = quota + (1 if i < extra else 0)
            if count:
                out[m][info.topic_id] = set(range(start, start + count))
            start += count
    return {m: freeze(a) for m, a in out.items()}


def _assign_uniform(
    members: Mapping[str, set[str]],
    topics: Mapping[str, TopicInfo],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Every partition to one subscriber, as evenly as the subscriptions allow, keeping
    each partition where it was when that stays balanced (sticky)."""
    by_id = {info.topic_id: name for name, info in topics.items()}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    held: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    partitions = [
        (info.topic_id, p) for _, info in sorted(topics.items()) for p in range(info.partitions)
    ]
    can_take = {tp: [m for m in sorted(members) if by_id[tp[0]] in members[m]] for tp in partitions}
    total = sum(1 for tp in partitions if can_take[tp])
    ceiling = -(-total // len(members)) if members else 0
    # Keep previous owners up to the even share.
    for m in sorted(members):
        for topic_id, ps in sorted(previous.get(m, EMPTY_ASSIGNMENT).items()):
            name = by_id.get(topic_id)
            if name is None or name not in members[m]:
                continue
            for p in sorted(ps):
                tp = (topic_id, p)
                if p < topics[name].partitions and tp not in owner and len(held[m]) < ceiling:
                    owner[tp] = m
                    held[m].add(tp)
    # The rest to the least loaded subscriber.
    for tp in partitions:
        if tp in owner or not can_take[tp]:
            continue
        m = min(can_take[tp], key=lambda c: (len(held[c]), c))
        owner[tp] = m
        held[m].add(tp)
    # Even out what subscriptions allow: move from the most to the least loaded.
    for _ in range(total):
        moved = False
        for tp in sorted(owner, key=lambda tp: (-len(held[owner[tp]]), owner[tp], tp)):
            current = owner[tp]
            target = min(can_take[tp], key=lambda c: (len(held[c]), c))
            if len(held[current]) - len(held[target]) > 1:
                held[current].discard(tp)
                held[target].add(tp)
                owner[tp] = target
                moved = True
                break
        if not moved:
            break
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for (topic_id, p), m in owner.items():
        out[m].setdefault(topic_id, set()).add(p)
    return {m: freeze(a) for m, a in out.items()}
