"""The coordinator of consumer groups under the consumer group protocol (KIP-848).

`ConsumerGroups` serves ConsumerGroupHeartbeat and ConsumerGroupDescribe and
the member checks OffsetCommit/OffsetFetch make for such groups; the rules of
the protocol are `consumer_group`'s, the records `consumer_records`'.

A heartbeat computes the group's next state from its stored one (on a copy),
writes the records of the difference, and installs the new state only once
they are stored; heartbeats of one group take turns (a lock per group), so
each one starts from what is stored. A member that sends no heartbeat for its
session timeout is removed, and one that does not give up partitions within
its rebalance timeout too; both are changes like any other.

Coexistence with classic groups (``group.consumer.migration.policy``,
bidirectional by default as in Kafka 4): classic members join a consumer group
through JoinGroup, SyncGroup, Heartbeat and LeaveGroup and get the server's
assignment; a consumer-protocol member joining a classic group with members
turns it into a consumer group (upgrade, `consumer_conversion.from_classic`),
and the last one leaving turns it classic again (downgrade,
`consumer_conversion.to_classic`). With the direction disabled, the heartbeat
is refused with GROUP_ID_NOT_FOUND in Kafka's words. An empty group of either
kind becomes the other kind with its offsets.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kbroker.config import as_int
from kbroker.coordinator import consumer_protocol
from kbroker.coordinator.cache import GroupCache
from kbroker.coordinator.consumer_conversion import (
    ConversionError,
    assignment_bytes,
    from_classic,
    to_classic,
)
from kbroker.coordinator.consumer_group import (
    ASSIGNORS,
    EMPTY_ASSIGNMENT,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ClassicMembership,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    RegexError,
    RegexMatches,
    TopicInfo,
    assign,
    compile_regex,
    is_subset,
    member_topics,
    reconcile,
    regex_error_text,
)
from kbroker.coordinator.consumer_records import changes
from kbroker.coordinator.group import Group, GroupState, JoinRequest, JoinResult, SyncResult
from kbroker.coordinator.records import group_key, group_value
from kbroker.coordinator.store import GROUP_ERRORS, api_error
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost

T = TypeVar("T")

log = logging.getLogger(__name__)

E = ErrorCode

_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: dict[uuid.UUID, list[int]] | None
    client_id: str
    client_host: str
    version: int


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def new_member_id() -> str:
    """A member id as Kafka makes them in consumer groups: a random UUID in URL-safe base64
    without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ClassicGroups(Protocol):
    """What the classic group coordinator does for conversions between the protocols."""

    def stop_classic(self, group: Group) -> None:
        """The classic group becomes a consumer group: its waiters are told
        REBALANCE_IN_PROGRESS and its timers stop."""

    def start_classic(self, group: Group) -> None:
        """The group became classic again: its members' sessions start and it rebalances."""


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


def _static(work: ConsumerGroup, instance_id: str, member_id: str) -> ConsumerMember:
    """The static member of ``instance_id``, which must be ``member_id``."""
    member = work.static_member(instance_id)
    if member is None:
        raise _Refused(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if member.member_id != member_id:
        raise _Refused(
            E.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )
    return member


def _take_over(work: ConsumerGroup, existing: ConsumerMember, member_id: str) -> ConsumerMember:
    """A restarted static instance, joining as ``member_id``, takes its predecessor's place
    and target (in epoch 0, to reconcile from there)."""
    del work.members[existing.member_id]
    work.targets[member_id] = work.targets.pop(existing.member_id, EMPTY_ASSIGNMENT)
    return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)


class ConsumerGroups:
    def __init__(
        self,
        broker: CoordinatorHost,
        cache: GroupCache,
        check: Callable[[str], ErrorCode],
        clock: Callable[[], int],
        classic: ClassicGroups | None = None,
    ) -> None:
        self.broker = broker
        self.config = broker.config
        self._cache = cache
        self._check = check
        self._clock = clock
        self._classic = classic
        self._locks: dict[str, asyncio.Lock] = {}
        self._sessions: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._revocations: dict[tuple[str, str], tuple[int, asyncio.TimerHandle]] = {}
        self._regexes = RegexMatches(lambda: broker.metadata_cache.topics_version)
        # Classic members told to rejoin, or to sync, by when (else they are removed).
        self._deadlines: dict[tuple[str, str], asyncio.TimerHandle] = {}

    # -- settings ------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        # Both the config and the finalized group.version (KIP-584) must allow it.
        features = getattr(self.broker, "features", None)
        if features is not None and features.level("group.version") < 1:
            return False
        return "consumer" in self.config["group.coordinator.rebalance.protocols"]

    def _migration(self, direction: str) -> bool:
        policy = str(self.config["group.consumer.migration.policy"]).lower()
        return policy in ("bidirectional", direction)

    def assignors(self) -> list[str]:
        names = self.config["group.consumer.assignors"]
        return [_CLASS_NAMES.get(n, n) for n in names if _CLASS_NAMES.get(n, n) in ASSIGNORS]

    def session_timeout_ms(self, group_id: str) -> int:
        return self.broker.group_configs.consumer_session_timeout_ms(group_id)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.broker.group_configs.consumer_heartbeat_interval_ms(group_id)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        try:
            self._validate(req)
        except _Refused as refused:
            return HeartbeatResult(refused.error, refused.message)
        error = self._check(req.group_id)
        if error != E.NONE:
            return HeartbeatResult(error)
        lock = self._locks.setdefault(req.group_id, asyncio.Lock())
        async with lock:
            error = self._check(req.group_id)  # the coordinator may have moved meanwhile
            if error != E.NONE:
                return HeartbeatResult(error)
            try:
                return await self._heartbeat(req)
            except _Refused as refused:
                return HeartbeatResult(refused.error, refused.message)

    def _validate(self, req: HeartbeatRequest) -> None:
        bad = E.INVALID_REQUEST
        if not req.group_id:
            raise _Refused(bad, "GroupId can't be empty.")
        if req.instance_id == "":
            raise _Refused(bad, "InstanceId can't be empty.")
        if req.rack_id == "":
            raise _Refused(bad, "RackId can't be empty.")
        epoch = req.member_epoch
        if req.version >= 1 and not req.member_id:
            raise _Refused(bad, "MemberId can't be empty.")
        if epoch > 0 or epoch == LEAVE_EPOCH:
            if not req.member_id:
                raise _Refused(bad, "MemberId can't be empty.")
        elif epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise _Refused(bad, "RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                raise _Refused(bad, "TopicPartitions must be empty when (re-)joining.")
            if not req.subscribed_topic_names and req.subscribed_topic_regex is None:
                raise _Refused(
                    bad,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif epoch == STATIC_LEAVE_EPOCH:
            if not req.member_id:
                raise _Refused(bad, "MemberId can't be empty.")
            if req.instance_id is None:
                raise _Refused(bad, "InstanceId can't be null.")
        else:
            raise _Refused(bad, "MemberEpoch is invalid.")
        if req.subscribed_topic_regex is not None:
            try:
                compile_regex(req.subscribed_topic_regex)
            except RegexError as exc:
                raise _Refused(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {regex_error_text(exc)}.",
                ) from None
        known = self.assignors()
        if req.server_assignor is not None and req.server_assignor not in known:
            raise _Refused(
                E.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(known)}.",
            )

    async def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        gid = req.group_id
        group = self._cache.groups.get(gid)
        if group is not None and group.gone:
            return HeartbeatResult(E.COORDINATOR_NOT_AVAILABLE)
        extra: list[tuple[bytes, bytes | None]] = []
        stored = group.consumer if group is not None else None
        work = stored.copy() if stored is not None else ConsumerGroup(gid)
        if stored is None:
            if req.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(E.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
            if group is not None and (group.state is not GroupState.EMPTY or group.members):
                work = self._upgraded(group)
            if group is not None and group.protocol_type is not None:
                extra.append((group_key(gid), None))  # the classic group is replaced
        member_id = req.member_id or new_member_id()
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return await self._leave(group, work, req, member_id)
        member = self._member(work, req, member_id)
        max_size = as_int(self.config["group.consumer.max.size"])
        if member.member_id not in work.members and len(work.members) >= max_size:
            raise _Refused(
                E.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {max_size} members.",
            )
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor
            if req.server_assignor is not None
            else member.server_assignor,
            subscribed_topic_names=tuple(req.subscribed_topic_names)
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            subscribed_topic_regex=req.subscribed_topic_regex
            if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=req.client_id,
            client_host=req.client_host,
        )
        previous = work.members.get(updated.member_id)
        work.members[updated.member_id] = updated
        self._update_target(
            work,
            stored is None
            or previous is None
            or (
                previous.subscribed_topic_names != updated.subscribed_topic_names
                or previous.subscribed_topic_regex != updated.subscribed_topic_regex
            ),
        )
        updated = self._reconcile(work, updated, req.owned)
        group = self._shell(gid)
        upgrading = stored is None and bool(group.members)
        error = await self._store(group, stored, work, extra)
        if error != E.NONE:
            return HeartbeatResult(api_error(error, GROUP_ERRORS))
        if not self._cache.is_current(group):
            return HeartbeatResult(E.NOT_COORDINATOR)
        if upgrading and self._classic is not None:
            self._classic.stop_classic(group)
        self._install(group, work)
        if upgrading:
            log.info("group %s upgraded from classic to consumer", gid)
            for m in work.members.values():
                if m.classic is not None:
                    self._schedule_session(gid, m.member_id)
        self._after_change(group, updated)
        full = req.member_epoch == JOIN_EPOCH or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.owned is not None
        )
        changed = previous is None or dict(previous.assigned) != dict(updated.assigned)
        return HeartbeatResult(
            E.NONE,
            member_id=updated.member_id,
            member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(gid),
            assignment=updated.assigned if full or changed else None,
        )

    def _member(self, work: ConsumerGroup, req: HeartbeatRequest, member_id: str) -> ConsumerMember:
        """The member the heartbeat is from (new on a join), its epoch checked."""
        epoch = req.member_epoch
        if req.instance_id is not None:
            existing = work.static_member(req.instance_id)
            if epoch == JOIN_EPOCH:
                if existing is None or existing.member_id == member_id:
                    return self._joining(work, member_id)
                if existing.member_epoch != STATIC_LEAVE_EPOCH:
                    raise _Refused(
                        E.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {req.instance_id} cannot "
                        "join the group because the instance id is owned by another member.",
                    )
                return _take_over(work, existing, member_id)
            static = _static(work, req.instance_id, member_id)
            self._check_epoch(static, epoch, req.owned)
            return static
        if epoch == JOIN_EPOCH:
            return self._joining(work, member_id)
        member = work.members.get(member_id)
        if member is None:
            raise _Refused(
                E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {work.group_id}."
            )
        self._check_epoch(member, epoch, req.owned)
        return member

    @staticmethod
    def _joining(work: ConsumerGroup, member_id: str) -> ConsumerMember:
        member = work.members.get(member_id)
        if member is None:
            return ConsumerMember(member_id)
        if member.previous_member_epoch == 0 and member.member_epoch >= 0:
            # The answer to its join was lost: it joins again where it was (and is told).
            return member
        # Rejoining after it lost its place (fenced): it starts again with nothing.
        return replace(
            member,
            member_epoch=0,
            previous_member_epoch=0,
            state=MemberState.STABLE,
            assigned=EMPTY_ASSIGNMENT,
            pending_revocation=EMPTY_ASSIGNMENT,
        )

    @staticmethod
    def _check_epoch(
        member: ConsumerMember, epoch: int, owned: Mapping[uuid.UUID, Iterable[int]] | None
    ) -> None:
        if epoch > member.member_epoch:
            raise _Refused(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )
        if epoch < member.member_epoch and (
            epoch != member.previous_member_epoch or not is_subset(owned, member.assigned)
        ):
            raise _Refused(
                E.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )

    def _subscription(self, work: ConsumerGroup) -> dict[str, TopicInfo]:
        """The existing topics the group's members subscribe to, as they are now."""
        topics = self.broker.metadata_cache.topics()
        return {
            name: TopicInfo(topics[name].topic_id, name, len(topics[name].partitions))
            for name in sorted(work.subscribed_names(topics, self._regexes))
        }

    def _update_target(
        self, work: ConsumerGroup, subscriptions_changed: bool, assign_now: bool = True
    ) -> None:
        """Bumps the group epoch when what it consumes changed, and computes the target
        assignment of a new epoch (unless not ``assign_now``: a departure leaves that to the
        next heartbeat, as Kafka does)."""
        subscription = self._subscription(work)
        if subscription != work.subscription:
            work.subscription = subscription
            subscriptions_changed = True
        if subscriptions_changed:
            work.epoch += 1
            log.info("consumer group %s: epoch %d", work.group_id, work.epoch)
        if work.epoch <= work.assignment_epoch or not assign_now:
            return
        topics = self.broker.metadata_cache.topics()
        wanted = {
            m.member_id: member_topics(m, topics, self._regexes) & work.subscription.keys()
            for m in work.members.values()
        }
        default = (self.assignors() or ["uniform"])[0]
        instances = {m.member_id: m.instance_id for m in work.members.values()}
        targets = assign(
            work.preferred_assignor(default), wanted, work.subscription, work.targets, instances
        )
        work.targets = targets
        work.assignment_epoch = work.epoch

    def _reconcile(
        self,
        work: ConsumerGroup,
        member: ConsumerMember,
        owned: Mapping[uuid.UUID, Iterable[int]] | None,
    ) -> ConsumerMember:
        if member.member_epoch == STATIC_LEAVE_EPOCH:
            return member
        held = work.owners(member.member_id)
        updated = reconcile(
            member,
            work.assignment_epoch,
            work.targets.get(member.member_id, EMPTY_ASSIGNMENT),
            owned,
            lambda topic_id, p: (topic_id, p) in held,
        )
        work.members[member.member_id] = updated
        return updated

    # -- leaving and removal -------------------------------------------------------------

    async def _leave(
        self, group: Group | None, work: ConsumerGroup, req: HeartbeatRequest, member_id: str
    ) -> HeartbeatResult:
        stored = group.consumer if group is not None else None
        member = (
            work.members.get(member_id)
            if req.instance_id is None
            else _static(work, req.instance_id, member_id)
        )
        if member is None:
            raise _Refused(
                E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {req.group_id}."
            )
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member restarting: it keeps its assignment for its session timeout.
            work.members[member_id] = member.with_epoch(STATIC_LEAVE_EPOCH)
        else:
            self._remove(work, member_id)
        assert group is not None
        if req.member_epoch == LEAVE_EPOCH and stored and self._downgrades(stored, member_id):
            error = await self._downgrade(group, work)
            if error != E.NONE:
                return HeartbeatResult(api_error(error, GROUP_ERRORS))
            self._forget_timers(req.group_id, member_id)
            return HeartbeatResult(E.NONE, member_id=member_id, member_epoch=LEAVE_EPOCH)
        error = await self._store(group, stored, work, [])
        if error != E.NONE:
            return HeartbeatResult(api_error(error, GROUP_ERRORS))
        if not self._cache.is_current(group):
            return HeartbeatResult(E.NOT_COORDINATOR)
        self._install(group, work)
        if req.member_epoch == LEAVE_EPOCH:
            self._forget_timers(req.group_id, member_id)
            log.info("consumer group %s: member %s left", req.group_id, member_id)
        else:
            self._after_change(group, work.members[member_id])
        return HeartbeatResult(
            E.NONE,
            member_id=member_id,
            member_epoch=req.member_epoch,
            heartbeat_interval_ms=0,
        )

    def _remove(self, work: ConsumerGroup, member_id: str) -> None:
        del work.members[member_id]
        work.targets.pop(member_id, None)
        self._update_target(work, True, assign_now=False)

    async def _expire(self, group_id: str, member_id: str, why: str, epoch: int | None) -> None:
        """Removes a member that stopped heartbeating (or revoking) in time."""
        lock = self._locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            group = self._cache.groups.get(group_id)
            if group is None or group.consumer is None or not self._cache.is_current(group):
                return
            member = group.consumer.members.get(member_id)
            if member is None or (epoch is not None and member.member_epoch != epoch):
                return
            if epoch is not None and member.state is not MemberState.UNREVOKED_PARTITIONS:
                return
            if why == "deadline" and self._deadlines.get((group_id, member_id)) is None:
                return  # it rejoined or synced in time
            work = group.consumer.copy()
            self._remove(work, member_id)
            if self._downgrades(group.consumer, member_id):
                await self._downgrade(group, work)
                return
            error = await self._store(group, group.consumer, work, [])
            if error != E.NONE:
                log.warning(
                    "consumer group %s: could not remove %s (%s): %s",
                    group_id,
                    member_id,
                    why,
                    error.name,
                )
                self._schedule_session(group_id, member_id)  # try again later
                return
            if not self._cache.is_current(group):
                return
            self._install(group, work)
            self._forget_timers(group_id, member_id)
            log.info("consumer group %s: member %s removed: %s", group_id, member_id, why)

    # -- storing ------------------------------------------------------------------------

    def _shell(self, group_id: str) -> Group:
        """The group's entry in the cache (a new one holds offsets and this state)."""
        group = self._cache.groups.get(group_id)
        if group is None:
            group = self._cache.groups[group_id] = Group(group_id, self._clock())
        return group

    def _store(
        self,
        group: Group,
        stored: ConsumerGroup | None,
        work: ConsumerGroup,
        extra: list[tuple[bytes, bytes | None]],
    ) -> asyncio.Future[ErrorCode]:
        """Starts writing what changed from ``stored`` to ``work`` (and ``extra`` first)."""
        records = extra + changes(stored, work)
        if not records:
            done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            done.set_result(E.NONE)
            return done
        return self._cache.append(group, records)

    @staticmethod
    def _install(group: Group, work: ConsumerGroup) -> None:
        """The stored state becomes the group's."""
        if group.protocol_type is not None and group.state is GroupState.EMPTY:
            # An empty classic group it replaced (its record was tombstoned with the change).
            group.protocol_type = None
            group.protocol_name = None
            group.generation_id = 0
        group.consumer = work

    # -- timers -------------------------------------------------------------------------

    def _after_change(self, group: Group, member: ConsumerMember) -> None:
        self._schedule_session(group.group_id, member.member_id)
        key = (group.group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            current = self._revocations.get(key)
            if current is None or current[0] != member.member_epoch:
                if current is not None:
                    current[1].cancel()
                timeout_s = max(member.rebalance_timeout_ms, 0) / 1000
                handle = asyncio.get_running_loop().call_later(
                    timeout_s,
                    lambda: self._cache.spawn(
                        self._expire(
                            key[0],
                            key[1],
                            "did not revoke its partitions in time",
                            member.member_epoch,
                        )
                    ),
                )
                self._revocations[key] = (member.member_epoch, handle)
        else:
            current = self._revocations.pop(key, None)
            if current is not None:
                current[1].cancel()

    def _schedule_session(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        previous = self._sessions.pop(key, None)
        if previous is not None:
            previous.cancel()
        timeout_ms = self.session_timeout_ms(group_id)
        group = self._cache.groups.get(group_id)
        member = group.consumer.members.get(member_id) if group and group.consumer else None
        if member is not None and member.classic is not None:
            timeout_ms = member.classic.session_timeout_ms
        timeout_s = timeout_ms / 1000
        self._sessions[key] = asyncio.get_running_loop().call_later(
            timeout_s,
            lambda: self._cache.spawn(self._expire(group_id, member_id, "session timeout", None)),
        )

    def _forget_timers(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        session = self._sessions.pop(key, None)
        if session is not None:
            session.cancel()
        revocation = self._revocations.pop(key, None)
        if revocation is not None:
            revocation[1].cancel()
        deadline = self._deadlines.pop(key, None)
        if deadline is not None:
            deadline.cancel()

    def on_group_loaded(self, group: Group) -> None:
        """A loaded group's members must heartbeat within their session timeout."""
        if group.consumer is not None:
            for member_id in group.consumer.members:
                self._schedule_session(group.group_id, member_id)

    def on_group_unloaded(self, group: Group) -> None:
        if group.consumer is not None:
            for member_id in group.consumer.members:
                self._forget_timers(group.group_id, member_id)
        self._locks.pop(group.group_id, None)

    # -- classic members in a consumer group ----------------------------------------------

    def classic_join(
        self, group: Group, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """JoinGroup of a classic member into a consumer group that has members."""
        consumer = group.consumer
        assert consumer is not None
        if not consumer.classic_protocols_supported(
            req.protocol_type, (name for name, _ in req.protocols)
        ):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        if not req.member_id and req.require_known_member_id and req.group_instance_id is None:
            # KIP-394: it comes back with this id before it counts.
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_member_id())
        return self._cache.spawn(self._locked(req.group_id, self._classic_join(req)))

    async def _locked(self, group_id: str, work: Coroutine[Any, Any, T]) -> T:
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            return await work

    async def _classic_join(self, req: JoinRequest) -> JoinResult:
        gid = req.group_id
        group = self._cache.groups.get(gid)
        if group is None or group.consumer is None or not self._cache.is_current(group):
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id)
        decoded = consumer_protocol.decode_subscription(req.protocols[0][1])
        if decoded is None:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        _, subscription = decoded
        stored = group.consumer
        work = stored.copy()
        member_id = req.member_id or new_member_id()
        member = work.members.get(member_id)
        instance = req.group_instance_id
        if instance is not None:
            existing = work.static_member(instance)
            if existing is not None and existing.member_id != member_id:
                if req.member_id:
                    return JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id)
                member = _take_over(work, existing, member_id)
        if member is not None and member.classic is None:
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        max_size = as_int(self.config["group.consumer.max.size"])
        if member is None and len(work.members) >= max_size:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=member_id)
        previous = member or ConsumerMember(member_id)
        updated = replace(
            previous,
            instance_id=instance,
            rack_id=getattr(subscription, "rack_id", None) or None,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=tuple(subscription.topics),
            subscribed_topic_regex=None,
            client_id=req.client_id,
            client_host=req.client_host,
            classic=ClassicMembership(req.session_timeout_ms, tuple(req.protocols)),
        )
        work.members[member_id] = updated
        self._update_target(
            work,
            member is None or previous.subscribed_topic_names != updated.subscribed_topic_names,
        )
        owned = self._owned_by_name(getattr(subscription, "owned_partitions", []))
        updated = self._reconcile(work, updated, owned)
        error = await self._store(group, stored, work, [])
        if error != E.NONE:
            return JoinResult(api_error(error, GROUP_ERRORS), member_id=member_id)
        if not self._cache.is_current(group):
            return JoinResult(E.NOT_COORDINATOR, member_id=member_id)
        self._install(group, work)
        self._after_change(group, updated)
        # It must now sync within its rebalance timeout.
        self._set_deadline(gid, member_id, updated.rebalance_timeout_ms)
        assert updated.classic is not None
        return JoinResult(
            E.NONE,
            member_id=member_id,
            generation_id=updated.member_epoch,
            protocol_type=consumer_protocol.PROTOCOL_TYPE,
            protocol_name=updated.classic.protocol_name,
            leader_id="",
        )

    def _owned_by_name(self, owned: Iterable[Any]) -> dict[uuid.UUID, list[int]]:
        out: dict[uuid.UUID, list[int]] = {}
        for tp in owned:
            topic = self.broker.metadata_cache.topic(tp.topic)
            if topic is not None:
                out.setdefault(topic.topic_id, []).extend(tp.partitions)
        return out

    def _classic_member(
        self, consumer: ConsumerGroup, member_id: str, instance: str | None
    ) -> ConsumerMember | ErrorCode:
        if instance is not None:
            try:
                member = _static(consumer, instance, member_id)
            except _Refused as refused:
                return refused.error
        else:
            found = consumer.members.get(member_id)
            if found is None:
                return E.UNKNOWN_MEMBER_ID
            member = found
        return E.UNKNOWN_MEMBER_ID if member.classic is None else member

    def _must_rejoin(self, consumer: ConsumerGroup, member: ConsumerMember) -> bool:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            return True
        if member.member_epoch < consumer.epoch:
            return True
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            # It waits for partitions others held: once they are free, it rejoins for them.
            held = consumer.owners(member.member_id)
            target = consumer.targets.get(member.member_id, EMPTY_ASSIGNMENT)
            waiting = any(
                (t, p) in held
                for t, ps in target.items()
                for p in ps - member.assigned.get(t, frozenset())
            )
            return not waiting
        return False

    def classic_sync(
        self,
        group: Group,
        member_id: str,
        instance: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        consumer = group.consumer
        assert consumer is not None
        member = self._classic_member(consumer, member_id, instance)
        if isinstance(member, ErrorCode):
            return SyncResult(member)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return SyncResult(E.ILLEGAL_GENERATION)
        name = member.classic.protocol_name
        if (protocol_type is not None and protocol_type != consumer_protocol.PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != name
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if (
            consumer.epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            self._set_deadline(group.group_id, member.member_id, member.rebalance_timeout_ms)
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        self._clear_deadline(group.group_id, member.member_id)
        self._schedule_session(group.group_id, member.member_id)
        return SyncResult(
            E.NONE, consumer_protocol.PROTOCOL_TYPE, name, self._assignment_bytes(member)
        )

    def _assignment_bytes(self, member: ConsumerMember) -> bytes:
        return assignment_bytes(member, member.assigned, self._topic_name)

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.broker.metadata_cache.topic_by_id(topic_id)
        return None if topic is None else topic.name

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.broker.metadata_cache.topic(name)
        return None if topic is None else topic.topic_id

    def classic_heartbeat(
        self, group: Group, member_id: str, instance: str | None, generation_id: int
    ) -> ErrorCode:
        consumer = group.consumer
        assert consumer is not None
        member = self._classic_member(consumer, member_id, instance)
        if isinstance(member, ErrorCode):
            return member
        if generation_id != member.member_epoch:
            return E.ILLEGAL_GENERATION
        self._schedule_session(group.group_id, member.member_id)
        if self._must_rejoin(consumer, member):
            if (group.group_id, member.member_id) not in self._deadlines:
                self._set_deadline(group.group_id, member.member_id, member.rebalance_timeout_ms)
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def classic_leave(
        self, group: Group, leaving: list[tuple[str, str | None]]
    ) -> asyncio.Future[list[ErrorCode]]:
        return self._cache.spawn(self._locked(group.group_id, self._classic_leave(group, leaving)))

    async def _classic_leave(
        self, group: Group, leaving: list[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        stored = group.consumer
        if stored is None or not self._cache.is_current(group):
            return [E.COORDINATOR_NOT_AVAILABLE] * len(leaving)
        work = stored.copy()
        errors: list[ErrorCode] = []
        gone: list[str] = []
        for member_id, instance in leaving:
            if instance is not None and not member_id:
                found = work.static_member(instance)
                member_id = found.member_id if found is not None else ""
            member = self._classic_member(work, member_id, instance)
            if isinstance(member, ErrorCode):
                errors.append(member)
                continue
            del work.members[member.member_id]
            work.targets.pop(member.member_id, None)
            gone.append(member.member_id)
            errors.append(E.NONE)
        if not gone:
            return errors
        self._update_target(work, True, assign_now=False)
        error = await self._store(group, stored, work, [])
        if error != E.NONE:
            return [api_error(error, GROUP_ERRORS) if e == E.NONE else e for e in errors]
        if self._cache.is_current(group):
            self._install(group, work)
            for member_id in gone:
                self._forget_timers(group.group_id, member_id)
                log.info("consumer group %s: classic member %s left", group.group_id, member_id)
        return errors

    def _set_deadline(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        self._clear_deadline(group_id, member_id)
        self._deadlines[(group_id, member_id)] = asyncio.get_running_loop().call_later(
            max(timeout_ms, 0) / 1000,
            lambda: self._cache.spawn(self._expire(group_id, member_id, "deadline", None)),
        )

    def _clear_deadline(self, group_id: str, member_id: str) -> None:
        handle = self._deadlines.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    # -- conversions between the protocols ---------------------------------------------------

    def _upgraded(self, group: Group) -> ConsumerGroup:
        """The consumer group a classic group with members becomes when a member of the
        consumer protocol joins it (group.consumer.migration.policy upgrade or
        bidirectional): its members become classic members of it, with what they own."""
        gid = group.group_id
        if not self._migration("upgrade"):
            raise _Refused(
                E.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {gid} to consumer group because online "
                "upgrade is disabled.",
            )
        if len(group.members) > as_int(self.config["group.consumer.max.size"]):
            raise _Refused(
                E.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {gid} to consumer group because the group "
                "size exceeds the consumer group maximum size.",
            )
        try:
            work = from_classic(group, self._topic_id)
        except ConversionError as exc:
            raise _Refused(E.GROUP_ID_NOT_FOUND, str(exc)) from None
        work.subscription = self._subscription(work)
        return work

    def _downgrades(self, stored: ConsumerGroup, leaving: str) -> bool:
        """Whether the group becomes classic when ``leaving`` (of the consumer protocol)
        leaves: every other member speaks the classic protocol, and the policy allows it."""
        member = stored.members.get(leaving)
        return (
            member is not None
            and member.classic is None
            and len(stored.members) > 1
            and stored.all_classic_except(leaving)
            and self._migration("downgrade")
            and len(stored.members) - 1 <= as_int(self.config["group.max.size"])
        )

    async def _downgrade(self, group: Group, work: ConsumerGroup) -> ErrorCode:
        """Turns the consumer group (``work``: its last member of the consumer protocol gone)
        into a classic group that rebalances at once."""
        stored = group.consumer
        assert stored is not None
        record = to_classic(work, self._topic_name, self._clock())
        records = [*changes(stored, None), (group_key(group.group_id), group_value(record))]
        error = await self._cache.append(group, records)
        if error != E.NONE:
            return api_error(error, GROUP_ERRORS)
        if not self._cache.is_current(group):
            return E.NOT_COORDINATOR
        for member_id in stored.members:
            self._forget_timers(group.group_id, member_id)
        group.consumer = None
        group.load_record(record)
        log.info("group %s downgraded from consumer to classic", group.group_id)
        if self._classic is not None:
            self._classic.start_classic(group)
        return E.NONE

    # -- what other requests ask -----------------------------------------------------------

    def member_error(
        self, group: Group, member_id: str, epoch: int, committing: bool, version: int
    ) -> ErrorCode:
        """OffsetCommit/OffsetFetch by a member of a consumer group: NONE when it may."""
        consumer = group.consumer
        assert consumer is not None
        if committing and epoch < 0 and not member_id:
            # A tool's (or a consumer assigning itself partitions): only to an empty group.
            return E.UNKNOWN_MEMBER_ID if consumer.members else E.NONE
        member = consumer.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member.classic is not None:
            # A classic member commits in its generation, which is its epoch.
            return E.NONE if epoch == member.member_epoch else E.ILLEGAL_GENERATION
        if committing and version < 9:
            return E.UNSUPPORTED_VERSION
        if epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE
