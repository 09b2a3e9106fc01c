"""One consumer group's in-memory state: members, generation, protocol, offsets.

Offsets are the committed ones (the later record of a partition wins) and
those still pending: being written, or committed in a transaction whose
marker has not come yet (by producer id).

`Group` owns the state machine of a classic (JoinGroup/SyncGroup) group:

  Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
  CompletingRebalance --leader's SyncGroup--> Stable
  Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
  PreparingRebalance --nobody rejoined--> Empty;  Empty --delete/expire--> Dead

It knows nothing of I/O or timers: the coordinator drives it, persists it
and completes the futures members wait on (`Member.join_waiter`,
`Member.sync_waiter`). Protocol selection lives here: among the protocols
every member supports, each member votes for the first one in its own
preference order and the most votes win.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kbroker.coordinator import consumer_protocol
from kbroker.coordinator.consumer_group import ConsumerGroup
from kbroker.coordinator.records import CommittedOffset, GroupRecord, MemberRecord
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.replication.purgatory import DelayedOperation


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
# state -> the states it may be entered from
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(slots=True)
class JoinRequest:
    """A JoinGroup request, as the coordinator needs it."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    require_known_member_id: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup waiter is answered with."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member_id, group_instance_id, metadata): only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (name, metadata) in the member's order of preference
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    # Joined but has not yet been through a completed rebalance.
    is_new: bool = False
    # The session (watched in the coordinator's heartbeat purgatory).
    heartbeat: DelayedOperation | None = None
    # Set while a sign of life completes the current session (Kafka's heartbeatSatisfied).
    heartbeat_satisfied: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def answer_join(self, result: JoinResult) -> None:
        waiter, self.join_waiter = self.join_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def answer_sync(self, result: SyncResult) -> None:
        waiter, self.sync_waiter = self.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)


class Group:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        # group.instance.id -> member id of static members
        self.static_members: dict[str, str] = {}
        # Members told MEMBER_ID_REQUIRED that have not joined yet, with their timers.
        self.pending_members: dict[str, DelayedOperation] = {}
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        # Set when a member joins while the initial rebalance delay runs.
        self.new_member_added = False
        # The DelayedJoin (or InitialDelayedJoin) of the rebalance in progress.
        self.join_timer: DelayedOperation | None = None
        # Its tombstone is being written: nobody may join or commit meanwhile.
        self.pending_delete = False
        # Partitions with a commit being written, and how many (expiry leaves them alone).
        self.pending_commits: Counter[tuple[str, int]] = Counter()
        # Transactional offset commits waiting for their transaction's marker, by producer
        # id (record_offset -1 while the commit's record is being written).
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = {}
        # Offsets of transactions committed while their record was still being written
        # (possible only when a client ends its transaction without waiting for its
        # TxnOffsetCommit): committed once the write is stored, by producer id.
        self.txn_offsets_committed_unwritten: dict[int, dict[tuple[str, int], CommittedOffset]] = {}
        # The group's state under the consumer group protocol (KIP-848), when it is one.
        self.consumer: ConsumerGroup | None = None

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
            f"{len(self.members)} members)"
        )

    # -- state ---------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def gone(self) -> bool:
        """Dead, or being deleted: requests must look the coordinator up again."""
        return self.state is GroupState.DEAD or self.pending_delete

    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value} "
                "is not a valid transition"
            )
        self.state = target
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # -- offsets ----------------------------------------------------------------

    def has_pending_offset_commit(self, tp: tuple[str, int]) -> bool:
        """A commit of ``tp`` is being written or waits for its transaction (OffsetFetch's
        require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile, as Kafka's does)."""
        return (
            tp in self.pending_commits
            or any(tp in offsets for offsets in self.pending_txn_offsets.values())
            or any(tp in offsets for offsets in self.txn_offsets_committed_unwritten.values())
        )

    @property
    def has_offsets(self) -> bool:
        """Offsets committed, being committed, or waiting for a transaction."""
        return bool(
            self.offsets
            or self.pending_commits
            or self.pending_txn_offsets
            or self.txn_offsets_committed_unwritten
        )

    def apply_offset(self, tp: tuple[str, int], committed: CommittedOffset) -> None:
        """``committed`` (stored) becomes the partition's offset unless a later record
        committed it already."""
        current = self.offsets.get(tp)
        if current is None or current.older_than(committed):
            self.offsets[tp] = committed

    def complete_txn_offsets(self, producer_id: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended (its marker is in the log): at COMMIT
        its offsets become the group's (those whose record is still being written once
        it is stored), at ABORT they are dropped."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not commit or not pending:
            return
        for tp, committed in pending.items():
            if committed.record_offset >= 0:
                self.apply_offset(tp, committed)
            else:
                self.txn_offsets_committed_unwritten.setdefault(producer_id, {})[tp] = committed

    def txn_offset_stored(
        self, producer_id: int, tp: tuple[str, int], committed: CommittedOffset, stored: bool
    ) -> None:
        """The write of a transactional offset commit ended: ``stored`` (its record offset
        set), it waits for its marker, or it is committed now if its transaction already
        was; failed, it is forgotten (the client retries or aborts)."""
        for table in (self.pending_txn_offsets, self.txn_offsets_committed_unwritten):
            offsets = table.get(producer_id)
            if offsets is None or offsets.get(tp) is not committed:
                continue  # replaced by a later commit, completed or removed meanwhile
            if stored and table is self.pending_txn_offsets:
                return
            del offsets[tp]
            if not offsets:
                del table[producer_id]
            if stored:
                self.apply_offset(tp, committed)
            return

    def remove_pending_txn_offsets(self, tps: Iterable[tuple[str, int]]) -> None:
        """Forgets the transactional commits of ``tps`` (their topic or offsets deleted)."""
        doomed = set(tps)
        for table in (self.pending_txn_offsets, self.txn_offsets_committed_unwritten):
            for producer_id in list(table):
                offsets = table[producer_id]
                for tp in doomed & offsets.keys():
                    del offsets[tp]
                if not offsets:
                    del table[producer_id]

    # -- members -------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """A static member came back with a new member id: same member, new id."""
        member = self.members.pop(old_id)
        fenced = JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id)
        member.answer_join(fenced)
        member.answer_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.is_leader(old_id):
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A request naming a static instance whose current member id is another one."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------

    def candidate_protocols(self, members: Iterable[Member] | None = None) -> set[str]:
        """Protocols every member (of ``members``, the group's by default) supports."""
        chosen = list(self.members.values() if members is None else members)
        counts = Counter(name for m in chosen for name in set(m.protocol_names()))
        return {name for name, n in counts.items() if n == len(chosen)}

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        wanted = set(names)
        if not self.members:
            return bool(protocol_type) and bool(wanted)
        return protocol_type == self.protocol_type and bool(wanted & self.candidate_protocols())

    def select_protocol(self, replacing: Mapping[str, Member] | None = None) -> str:
        """The protocol most members prefer (with members of ``replacing`` swapped in)."""
        swap = replacing or {}
        members = [swap.get(mid, m) for mid, m in self.members.items()]
        candidates = self.candidate_protocols(members)
        if not candidates:
            raise IllegalStateTransition(
                f"group {self.group_id}: no protocol every member supports"
            )
        votes = Counter(m.vote(candidates) for m in members)
        # Ties go to the protocol first in the leader's (or first member's) preferences.
        order = members[0].protocol_names()
        leader = self.members.get(self.leader_id or "")
        if leader is not None:
            order = swap.get(leader.member_id, leader).protocol_names()
        rank = {name: i for i, name in enumerate(order)}
        return min(votes, key=lambda name: (-votes[name], rank.get(name, len(rank))))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None when unknown."""
        if self.protocol_type != consumer_protocol.PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                found = consumer_protocol.subscribed_topics(m.metadata(self.protocol_name))
            except KeyError:
                return None
            if found is None:
                return None
            topics |= found
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.consumer is not None and self.consumer.members:
            return topic in self.consumer.subscription
        topics = self.subscribed_topics()
        return topics is None or topic in topics

    def member_list(self) -> list[tuple[str, str | None, bytes]]:
        """What the leader gets in its JoinGroup response."""
        assert self.protocol_name is not None
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    # -- generations -----------------------------------------------------------

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now_ms)
        for m in self.members.values():
            m.is_new = False

    def join_result(
        self, member: Member, with_members: bool, skip_assignment: bool = False
    ) -> JoinResult:
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id or "",
            members=self.member_list() if with_members else [],
            skip_assignment=skip_assignment,
        )

    # -- persistence -----------------------------------------------------------

    def to_record(
        self,
        assignments: Mapping[str, bytes] | None = None,
        replacing: Mapping[str, Member] | None = None,
    ) -> GroupRecord:
        """The group metadata record, as it would be with ``assignments`` instead of the
        current ones and the members of ``replacing`` (by current member id) swapped in."""
        protocol = self.protocol_name
        swap = replacing or {}
        leader = self.leader_id
        if leader is not None and leader in swap:
            leader = swap[leader].member_id
        chosen = [swap.get(mid, m) for mid, m in self.members.items()]
        members = [
            MemberRecord(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(protocol) if protocol is not None else b"",
                assignment=m.assignment
                if assignments is None
                else assignments.get(m.member_id, b""),
            )
            for m in chosen
        ]
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=leader,
            state_timestamp=self.state_timestamp,
            members=members,
        )

    @classmethod
    def from_record(cls, group_id: str, record: GroupRecord, now_ms: int) -> Group:
        """A group as loaded from ``__consumer_offsets``: Stable with its members, or Empty."""
        group = cls(group_id, record.state_timestamp if record.state_timestamp >= 0 else now_ms)
        group.load_record(record)
        return group

    def load_record(self, record: GroupRecord) -> None:
        """Takes the state a group metadata record holds: Stable with its members, or
        Empty (a group converted from the consumer group protocol takes it in place)."""
        group = self
        if record.state_timestamp >= 0:
            group.state_timestamp = record.state_timestamp
        group.protocol_type = record.protocol_type or None
        group.generation_id = record.generation
        group.protocol_name = record.protocol
        group.leader_id = record.leader
        for m in record.members:
            protocols = [(record.protocol or "", m.subscription)]
            group.add(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms
                    if m.rebalance_timeout_ms >= 0
                    else m.session_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=record.protocol_type,
                    protocols=protocols,
                    assignment=m.assignment,
                )
            )
        group.leader_id = (
            record.leader if record.leader in group.members else next(iter(group.members), None)
        )
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
