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

Coexistence with classic groups (what Kafka does with
``group.consumer.migration.policy=disabled``): a consumer group member may
take over a classic group only when it is empty (its offsets stay), a classic
member an empty consumer group; a non-empty group of the other kind is
refused (GROUP_ID_NOT_FOUND to a heartbeat, INCONSISTENT_GROUP_PROTOCOL to a
JoinGroup).
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kbroker.config import as_int
from kbroker.coordinator.cache import GroupCache
from kbroker.coordinator.consumer_group import (
    ASSIGNORS,
    EMPTY_ASSIGNMENT,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicInfo,
    assign,
    compile_regex,
    is_subset,
    member_topics,
    reconcile,
)
from kbroker.coordinator.consumer_records import changes
from kbroker.coordinator.group import Group, GroupState
from kbroker.coordinator.records import group_key
from kbroker.coordinator.store import GROUP_ERRORS, api_error
from kbroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost

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


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


class ConsumerGroups:
    def __init__(
        self,
        broker: CoordinatorHost,
        cache: GroupCache,
        check: Callable[[str], ErrorCode],
        clock: Callable[[], int],
    ) -> None:
        self.broker = broker
        self.config = broker.config
        self._cache = cache
        self._check = check
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._sessions: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._revocations: dict[tuple[str, str], tuple[int, asyncio.TimerHandle]] = {}

    # -- settings ------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        # Both the config and the finalized group.version (KIP-584) must allow it.
        features = getattr(self.broker, "features", None)
        if features is not None and features.level("group.version") < 1:
            return False
        return "consumer" in self.config["group.coordinator.rebalance.protocols"]

    def assignors(self) -> list[str]:
        names = self.config["group.consumer.assignors"]
        return [_CLASS_NAMES.get(n, n) for n in names if _CLASS_NAMES.get(n, n) in ASSIGNORS]

    def _group_setting(self, group_id: str, name: str) -> int:
        configs = getattr(self.broker, "group_configs", None)
        if configs is not None:
            getter = getattr(configs, name.replace(".", "_"), None)
            if getter is not None:
                return int(getter(group_id))
        return as_int(self.config[f"group.{name}"])

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_setting(group_id, "consumer.session.timeout.ms")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_setting(group_id, "consumer.heartbeat.interval.ms")

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
            except re.error as exc:
                raise _Refused(
                    E.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {exc}.",
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
        if stored is None:
            if req.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Consumer group {gid} not found.")
            if group is not None and (group.state is not GroupState.EMPTY or group.members):
                raise _Refused(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group")
            if group is not None and group.protocol_type is not None:
                extra.append((group_key(gid), None))  # the empty classic group is replaced
        work = stored.copy() if stored is not None else ConsumerGroup(gid)
        member_id = req.member_id or str(uuid.uuid4())
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
            subscribed_topic_regex=(req.subscribed_topic_regex or None)
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
        write = self._store(group, gid, stored, work, extra)
        error = await write if write is not None else E.NONE
        if error != E.NONE:
            return HeartbeatResult(api_error(error, GROUP_ERRORS))
        group = self._install(gid, work)
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
                # The restarted instance takes over its predecessor's place and assignment.
                del work.members[existing.member_id]
                target = work.targets.pop(existing.member_id, EMPTY_ASSIGNMENT)
                work.targets[member_id] = target
                return replace(
                    existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
                )
            if existing is None:
                raise _Refused(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if existing.member_id != member_id:
                raise _Refused(
                    E.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} was "
                    f"fenced by member {existing.member_id}.",
                )
            self._check_epoch(existing, epoch, req.owned)
            return existing
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
        topics = {
            name: t
            for name, t in self.broker.metadata_cache.topics().items()
            if not getattr(t, "pending_delete", False)
        }
        return {
            name: TopicInfo(topics[name].topic_id, name, len(topics[name].partitions))
            for name in sorted(work.subscribed_names(topics))
        }

    def _update_target(self, work: ConsumerGroup, subscriptions_changed: bool) -> None:
        """Bumps the group epoch when what it consumes changed, and computes the target
        assignment of a new epoch."""
        subscription = self._subscription(work)
        if subscription != work.subscription:
            work.subscription = subscription
            subscriptions_changed = True
        if subscriptions_changed:
            work.epoch += 1
            log.info("consumer group %s: epoch %d", work.group_id, work.epoch)
        if work.epoch <= work.assignment_epoch:
            return
        existing = list(work.subscription)
        wanted = {
            m.member_id: member_topics(m, existing) & set(work.subscription)
            for m in work.members.values()
        }
        default = (self.assignors() or ["uniform"])[0]
        targets = assign(work.preferred_assignor(default), wanted, work.subscription, work.targets)
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
        member = work.members.get(member_id)
        if req.instance_id is not None:
            member = work.static_member(req.instance_id)
            if member is None:
                raise _Refused(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != member_id:
                raise _Refused(
                    E.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} was "
                    f"fenced by member {member.member_id}.",
                )
        if member is None:
            raise _Refused(
                E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {req.group_id}."
            )
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member restarting: it keeps its assignment for its session timeout.
            work.members[member_id] = replace(member.with_epoch(STATIC_LEAVE_EPOCH))
        else:
            self._remove(work, member_id)
        assert group is not None
        error = await self._store(group, req.group_id, stored, work, [])
        if error != E.NONE:
            return HeartbeatResult(api_error(error, GROUP_ERRORS))
        installed = self._install(req.group_id, work)
        if req.member_epoch == LEAVE_EPOCH:
            self._forget_timers(req.group_id, member_id)
            log.info("consumer group %s: member %s left", req.group_id, member_id)
        else:
            self._after_change(installed, work.members[member_id])
        return HeartbeatResult(
            E.NONE,
            member_id=member_id,
            member_epoch=req.member_epoch,
            heartbeat_interval_ms=0,
        )

    def _remove(self, work: ConsumerGroup, member_id: str) -> None:
        del work.members[member_id]
        work.targets.pop(member_id, None)
        self._update_target(work, True)

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
            work = group.consumer.copy()
            self._remove(work, member_id)
            error = await self._store(group, group_id, group.consumer, work, [])
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
            self._install(group_id, work)
            self._forget_timers(group_id, member_id)
            log.info("consumer group %s: member %s removed: %s", group_id, member_id, why)

    # -- storing ------------------------------------------------------------------------

    def _store(
        self,
        group: Group | None,
        group_id: str,
        stored: ConsumerGroup | None,
        work: ConsumerGroup,
        extra: list[tuple[bytes, bytes | None]],
    ) -> asyncio.Future[ErrorCode]:
        records = extra + changes(stored, work)
        if group is None:
            group = self._cache.groups.get(group_id)
            if group is None:
                group = self._cache.groups[group_id] = Group(group_id, self._clock())
        if not records:
            done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            done.set_result(E.NONE)
            return done
        return self._cache.append(group, records)

    def _install(self, group_id: str, work: ConsumerGroup) -> Group:
        group = self._cache.groups.get(group_id)
        if group is None:
            group = self._cache.groups[group_id] = Group(group_id, self._clock())
        if group.protocol_type is not None and group.state is GroupState.EMPTY:
            # An empty classic group it replaced (its record was tombstoned with the change).
            group.protocol_type = None
            group.protocol_name = None
            group.generation_id = 0
        group.consumer = work
        return group

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
        timeout_s = self.session_timeout_ms(group_id) / 1000
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

    # -- what other requests ask -----------------------------------------------------------

    def member_error(
        self, group: Group, member_id: str, epoch: int, committing: bool, version: int
    ) -> ErrorCode:
        """OffsetCommit/OffsetFetch by a member of a consumer group: NONE when it may."""
        consumer = group.consumer
        assert consumer is not None
        if epoch < 0 and not member_id:
            if committing and consumer.members:
                return E.UNKNOWN_MEMBER_ID
            return E.NONE  # a tool's, or the group is empty
        member = consumer.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if committing and version < 9:
            return E.UNSUPPORTED_VERSION
        if epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def describe(self, group: Group | None, group_id: str) -> ConsumerGroup | None:
        return group.consumer if group is not None else None

    def delete(self, group: Group) -> list[tuple[bytes, bytes | None]]:
        """The tombstones of an empty consumer group being deleted."""
        if group.consumer is None:
            return []
        return changes(group.consumer, None)
