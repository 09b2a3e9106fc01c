"""The group coordinator: every group of this broker, their rebalances and offsets.

`GroupCoordinator` owns the groups (``group.Group``), drives their state
machines from the group APIs (join, sync, heartbeat, leave, describe, list,
delete) and keeps committed offsets. Everything durable goes through
``__consumer_offsets`` (`store.OffsetsStore`): a group's metadata after each
completed rebalance, each offset commit, and tombstones for whatever is
deleted or expires. A group lives in partition
``abs(java_hashcode(group_id)) % partitions`` of that topic, as in Kafka.

At start every partition of the topic is read back (in the background);
requests for groups of a partition still loading get
COORDINATOR_LOAD_IN_PROGRESS. Loaded groups with members come back Stable,
and their members must heartbeat within their session timeout to stay.

All state changes happen on the event loop without awaiting in between, so
a request sees a consistent group. Requests that must wait (JoinGroup until
the rebalance completes, SyncGroup until the leader's assignment) get a
future. Timers are the delayed operations of `delayed`, in two purgatories
(rebalances by group id, sessions by member) on an injectable `Scheduler`
(the running loop unless given), so tests can drive time by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.config import as_int
from kbroker.coordinator.delayed import (
    DelayedHeartbeat,
    DelayedJoin,
    InitialDelayedJoin,
    MemberKey,
    PendingMemberTimer,
)
from kbroker.coordinator.group import Group, GroupState, JoinResult, Member, SyncResult
from kbroker.coordinator.records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupKey,
    GroupRecord,
    OffsetKey,
    RecordFormatError,
    group_key,
    group_value,
    offset_key,
    offset_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
    partition_for,
)
from kbroker.coordinator.store import OffsetsStore, Record
from kbroker.log.log import now_ms
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.purgatory import Purgatory, Scheduler

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

E = ErrorCode
TopicPartitionKey = tuple[str, int]

# Storage failures as the group APIs report them (Kafka's mapping).
_STORE_GROUP_ERRORS = {
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}
_STORE_OFFSET_ERRORS = {
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
}


# Retries of a failed creation of __consumer_offsets: the first after the
# minimum, each next one twice as late, up to the maximum.
CREATE_BACKOFF_MIN_S = 0.1
CREATE_BACKOFF_MAX_S = 5.0

# Bytes a JoinGroup protocol entry costs beyond its name and metadata (two lengths).
_PROTOCOL_OVERHEAD = 6


def _store_error(code: ErrorCode, mapping: Mapping[ErrorCode, ErrorCode]) -> ErrorCode:
    if code == E.NONE:
        return code
    return mapping.get(code, E.COORDINATOR_NOT_AVAILABLE)


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
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    error: ErrorCode
    group_id: str
    state: str = "Dead"
    protocol_type: str = ""
    protocol_name: str = ""
    members: list[MemberDescription] | None = None


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    committed: CommittedOffset | None
    error: ErrorCode = E.NONE


class GroupCoordinator:
    def __init__(
        self,
        broker: Broker,
        clock: Callable[[], int] = now_ms,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.broker = broker
        self.config = broker.config
        self.clock = clock
        self._joins: Purgatory[str] = Purgatory("rebalance", scheduler)
        self._heartbeats: Purgatory[MemberKey] = Purgatory("heartbeat", scheduler)
        self.store = OffsetsStore(broker)
        self.groups: dict[str, Group] = {}
        self._partitions: int | None = None
        self._loading: set[int] = set()
        self._active = False
        # Backoff between attempts to create __consumer_offsets after one failed.
        self._create_backoff_s = 0.0
        self._create_retry_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Starts serving; groups already stored are loaded in the background."""
        self._active = True
        count = self.store.partition_count()
        if count is not None:
            self._partitions = count
            self._loading = set(range(count))
            self._tasks.append(asyncio.ensure_future(self._load_all(count)))
        self._tasks.append(asyncio.ensure_future(self._expire_periodically()))

    async def stop(self) -> None:
        """Stops serving: waiting members are told NOT_COORDINATOR, timers stop."""
        self._active = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for group in list(self.groups.values()):
            self._unload(group, E.NOT_COORDINATOR)
        self.groups.clear()

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def is_loading(self, group_id: str) -> bool:
        return self._partitions is not None and self.partition_of(group_id) in self._loading

    def partition_of(self, group_id: str) -> int:
        assert self._partitions is not None
        return partition_for(group_id, self._partitions)

    def internal_topic_configs(self, name: str) -> dict[str, str]:
        """The settings of an internal topic this coordinator owns (none for others)."""
        return self.store.topic_configs() if name == OFFSETS_TOPIC else {}

    def ensure_offsets_topic(self) -> bool:
        """Creates ``__consumer_offsets`` on first use; False when it cannot exist yet.

        A failed creation (a full disk) is retried by later requests, no
        sooner than an exponential backoff allows: clients retrying in a
        loop do not hammer the disk, and the coordinator heals by itself
        once a creation succeeds.
        """
        if self._partitions is not None:
            return True
        count = self.store.partition_count()
        if count is None:
            from kbroker.errors import TopicError

            if time.monotonic() < self._create_retry_at:
                return False
            try:
                count = self.store.create()
            except TopicError as exc:
                count = self.store.partition_count()
                if count is None:
                    self._create_backoff_s = min(
                        max(2 * self._create_backoff_s, CREATE_BACKOFF_MIN_S), CREATE_BACKOFF_MAX_S
                    )
                    self._create_retry_at = time.monotonic() + self._create_backoff_s
                    if exc.code != ErrorCode.KAFKA_STORAGE_ERROR:  # the broker logs those itself
                        self.broker.logs.errors.failed("creating", OFFSETS_TOPIC, exc)
                    return False
            self.broker.logs.errors.succeeded("creating", OFFSETS_TOPIC)
        self._create_backoff_s = 0.0
        self._partitions = count
        return True

    def check(self, group_id: str, allow_empty: bool = False) -> ErrorCode:
        """The error a request for ``group_id`` gets before touching the group, or NONE."""
        if group_id is None or (not group_id and not allow_empty):
            return E.INVALID_GROUP_ID
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE
        if not self.ensure_offsets_topic():
            return E.COORDINATOR_NOT_AVAILABLE
        if self.is_loading(group_id):
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    # -- loading ------------------------------------------------------------------

    async def _load_all(self, count: int) -> None:
        for index in range(count):
            try:
                await self._load_partition(index)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed", "__consumer_offsets", index)
            self._loading.discard(index)
        log.info("loaded %d groups from __consumer_offsets", len(self.groups))

    async def _load_partition(self, index: int) -> None:
        offsets: dict[str, dict[TopicPartitionKey, CommittedOffset]] = defaultdict(dict)
        records: dict[str, GroupRecord | None] = {}
        async for chunk in self.store.read_partition(index):
            for key_bytes, value in chunk:
                try:
                    key = parse_key(key_bytes)
                    if isinstance(key, OffsetKey):
                        tp = (key.topic, key.partition)
                        if value is None:
                            offsets[key.group].pop(tp, None)
                        else:
                            offsets[key.group][tp] = parse_offset_value(value)
                    elif isinstance(key, GroupKey):
                        records[key.group] = None if value is None else parse_group_value(value)
                except RecordFormatError as exc:
                    log.warning(
                        "skipping unreadable record in __consumer_offsets-%d: %s", index, exc
                    )
            await asyncio.sleep(0)
        now = self.clock()
        for group_id in set(records) | {g for g, o in offsets.items() if o}:
            record = records.get(group_id)
            group = (
                Group.from_record(group_id, record, now)
                if record is not None
                else Group(group_id, now)
            )
            group.offsets = offsets.get(group_id, {})
            if record is None and not group.offsets:
                continue
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_heartbeat(group, member)

    # -- JoinGroup ----------------------------------------------------------------

    def join_group(self, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        error = self.check(req.group_id)
        if error == E.NONE:
            error = self._check_join(req)
        if error != E.NONE:
            return JoinResult(error, member_id=req.member_id)
        group = self.groups.get(req.group_id)
        if not req.member_id:
            if group is None:
                group = self.groups[req.group_id] = Group(req.group_id, self.clock())
            return self._join_new_member(group, req)
        if group is None:
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id)
        return self._join_known_member(group, req)

    def _check_join(self, req: JoinRequest) -> ErrorCode:
        low = as_int(self.config["group.min.session.timeout.ms"])
        high = as_int(self.config["group.max.session.timeout.ms"])
        if not low <= req.session_timeout_ms <= high:
            return E.INVALID_SESSION_TIMEOUT
        if not req.protocol_type or not req.protocols:
            return E.INCONSISTENT_GROUP_PROTOCOL
        # Each protocol also costs its own entry, so thousands of empty ones count too.
        size = sum(len(name) + len(data) + _PROTOCOL_OVERHEAD for name, data in req.protocols)
        if size > as_int(self.config["group.member.metadata.max.bytes"]):
            return E.INVALID_REQUEST
        return E.NONE

    def _join_new_member(
        self, group: Group, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        if group.state is GroupState.DEAD:
            # Being deleted: the client looks the coordinator up again and retries.
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL)
        instance = req.group_instance_id
        existing = group.static_member_id(instance)
        if instance is not None and existing is not None:
            return self._rejoin_static_member(group, existing, f"{instance}-{uuid.uuid4()}", req)
        if len(group.members) + len(group.pending_members) >= as_int(self.config["group.max.size"]):
            return JoinResult(E.GROUP_MAX_SIZE_REACHED)
        member_id = f"{req.client_id}-{uuid.uuid4()}"
        if instance is None and req.require_known_member_id:
            # KIP-394: the member must come back with this id before it counts.
            timer = PendingMemberTimer(
                group, member_id, req.session_timeout_ms, self._expire_pending_member
            )
            group.pending_members[member_id] = timer
            self._heartbeats.try_complete_else_watch(timer, [timer.key])
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id)
        return self._add_member_and_rebalance(group, member_id, req)

    def _join_known_member(
        self, group: Group, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = req.member_id
        if group.state is GroupState.DEAD:
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self._heartbeats.check_and_complete(pending.key)
            if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
                return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            return self._add_member_and_rebalance(group, member_id, req)
        if group.is_static_member_fenced(member_id, req.group_instance_id):
            return JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id)
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        self._schedule_heartbeat(group, member)
        same = member.matches(req.protocols)
        if group.state is GroupState.COMPLETING_REBALANCE and same:
            # A retried JoinGroup: the answer it missed.
            return group.join_result(member, with_members=group.is_leader(member_id))
        if group.state is GroupState.STABLE and same and not group.is_leader(member_id):
            # A follower with nothing new: no rebalance. (The leader rejoins on
            # metadata changes only, so its JoinGroup always starts one.)
            return group.join_result(member, with_members=False)
        return self._update_member_and_rebalance(group, member, req)

    def _new_waiter(self) -> asyncio.Future[JoinResult]:
        return asyncio.get_running_loop().create_future()

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            is_new=True,
        )
        waiter = member.join_waiter = self._new_waiter()
        group.add(member)
        if group.state is GroupState.PREPARING_REBALANCE:
            group.new_member_added = True
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"{member_id} joined")
        self._try_complete_join(group)
        return waiter

    def _update_member_and_rebalance(
        self, group: Group, member: Member, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        # A JoinGroup the client gave up on and sent again: the new one is answered.
        member.answer_join(JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        waiter = member.join_waiter = self._new_waiter()
        self._maybe_prepare_rebalance(group, f"{member.member_id} rejoined")
        self._try_complete_join(group)
        return waiter

    def _rejoin_static_member(
        self, group: Group, old_id: str, new_id: str, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """A static member restarted: it takes its old place, usually without a rebalance."""
        assert req.group_instance_id is not None
        instance = req.group_instance_id
        member = group.replace_static_member(instance, old_id, new_id)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            error = _store_error(self._store_group(group), _STORE_GROUP_ERRORS)
            if error != E.NONE:
                group.replace_static_member(instance, new_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old
                return JoinResult(error, member_id=new_id)
            log.info(
                "static member %s of group %s rejoined as %s without a rebalance",
                instance,
                group.group_id,
                new_id,
            )
            leader = group.is_leader(new_id)
            return group.join_result(member, with_members=leader, skip_assignment=leader)
        waiter = member.join_waiter = self._new_waiter()
        self._maybe_prepare_rebalance(
            group, f"static member {instance} rejoined with new protocols"
        )
        self._try_complete_join(group)
        return waiter

    # -- rebalances ------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                m.answer_sync(SyncResult(E.REBALANCE_IN_PROGRESS))
        if group.join_timer is not None:
            group.join_timer.cancel()
        timer: DelayedJoin | InitialDelayedJoin
        if group.state is GroupState.EMPTY:
            delay = as_int(self.config["group.initial.rebalance.delay.ms"])
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            timer = InitialDelayedJoin(
                self._joins, group, delay, delay, remaining, self._complete_join
            )
        else:
            timer = DelayedJoin(group, group.max_rebalance_timeout_ms(), self._complete_join)
        group.join_timer = timer
        group.transition(GroupState.PREPARING_REBALANCE, self.clock())
        log.info(
            "group %s: rebalancing (generation %d): %s", group.group_id, group.generation_id, reason
        )
        self._joins.try_complete_else_watch(timer, [group.group_id])

    def _try_complete_join(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._joins.check_and_complete(group.group_id)

    def _complete_join(self, group: Group) -> None:
        group.join_timer = None
        if (
            group.state is not GroupState.PREPARING_REBALANCE
            or self.groups.get(group.group_id) is not group
        ):
            return
        joined = [m for m in group.members.values() if m.awaiting_join]
        if not group.leader_id or group.leader_id not in {m.member_id for m in joined}:
            group.leader_id = joined[0].member_id if joined else None
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info(
                "group %s: removing %s, which did not rejoin in time",
                group.group_id,
                member.member_id,
            )
            self._remove_member(group, member)
        group.init_next_generation(self.clock())
        if not group.members:
            error = self._store_group(group)
            if error != E.NONE:
                log.warning(
                    "group %s: could not store the empty generation: %s", group.group_id, error.name
                )
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for m in group.members.values():
            m.answer_join(group.join_result(m, with_members=group.is_leader(m.member_id)))
            self._schedule_heartbeat(group, m)

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        """The member is alive: its session completes and the next one is watched."""
        previous = member.heartbeat
        if previous is not None:
            member.heartbeat_satisfied = True
            self._heartbeats.check_and_complete(previous.key)
        member.heartbeat_satisfied = False
        session = DelayedHeartbeat(group, member, member.session_timeout_ms, self._expire_member)
        member.heartbeat = session
        self._heartbeats.try_complete_else_watch(session, [session.key])

    def _stop_heartbeat(self, member: Member) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
            member.heartbeat = None

    def _expire_member(self, group: Group, member: Member, session: DelayedHeartbeat) -> None:
        if member.heartbeat is not session or group.members.get(member.member_id) is not member:
            return  # kept alive, left or replaced already
        if member.awaiting_join or member.awaiting_sync:
            # Blocked in JoinGroup/SyncGroup: alive; the rebalance timeout governs it.
            self._schedule_heartbeat(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member, "session timeout")

    def _expire_pending_member(
        self, group: Group, member_id: str, timer: PendingMemberTimer
    ) -> None:
        if group.pending_members.get(member_id) is timer:
            del group.pending_members[member_id]
            self._try_complete_join(group)

    def _remove_member(self, group: Group, member: Member) -> None:
        self._stop_heartbeat(member)
        member.answer_join(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        member.answer_sync(SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"{member.member_id} left ({reason})")
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        error = self.check(group_id)
        if error != E.NONE:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return SyncResult(E.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.EMPTY:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.STABLE:
            return SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignment.
        member.answer_sync(SyncResult(E.REBALANCE_IN_PROGRESS))
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if group.is_leader(member_id):
            self._complete_sync(group, dict(assignments))
        return waiter.result() if waiter.done() else waiter

    def _complete_sync(self, group: Group, given: dict[str, bytes]) -> None:
        assignments = {mid: given.get(mid, b"") for mid in group.members}
        error = _store_error(self._store_group(group, assignments), _STORE_GROUP_ERRORS)
        if error != E.NONE:
            for m in group.members.values():
                m.assignment = b""
                m.answer_sync(SyncResult(error))
            self._prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        for m in group.members.values():
            m.assignment = assignments[m.member_id]
            m.answer_sync(
                SyncResult(E.NONE, group.protocol_type, group.protocol_name, m.assignment)
            )
        group.transition(GroupState.STABLE, self.clock())
        log.info("group %s is stable at generation %d", group.group_id, group.generation_id)

    # -- Heartbeat and LeaveGroup ----------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self.check(group_id)
        if error != E.NONE:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Members (member_id, group_instance_id) leave; returns (top error, one per member)."""
        error = self.check(group_id)
        if error != E.NONE:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, []
        return E.NONE, [
            self._leave_one(group, member_id, instance) for member_id, instance in leaving
        ]

    def _leave_one(self, group: Group, member_id: str, instance: str | None) -> ErrorCode:
        if instance is not None:
            current = group.static_member_id(instance)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != current:
                return E.FENCED_INSTANCE_ID
            member_id = current
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self._heartbeats.check_and_complete(pending.key)
            self._try_complete_join(group)
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s leaves", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, "LeaveGroup")
        return E.NONE

    # -- DescribeGroups, ListGroups, DeleteGroups --------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return GroupDescription(error, group_id)
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(E.NONE, group_id, members=[])
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name if stable else None
        members = [
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol) if protocol is not None else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return GroupDescription(
            E.NONE, group_id, group.state.value, group.protocol_type or "", protocol or "", members
        )

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode, list[GroupListing]]:
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE, []
        if self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, []
        wanted = {s.lower() for s in states}
        return E.NONE, [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            if g.state is not GroupState.DEAD and (not wanted or g.state.value.lower() in wanted)
        ]

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            error = self.check(group_id, allow_empty=True)
            if error == E.NONE:
                error = self._delete_group(group_id)
            results[group_id] = error
        return results

    def _delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return E.NON_EMPTY_GROUP
        records: list[Record] = [(offset_key(group_id, t, p), None) for t, p in group.offsets]
        records.append((group_key(group_id), None))
        error = self.store.append(self.partition_of(group_id), records, self.clock())
        if error != E.NONE:
            return _store_error(error, _STORE_GROUP_ERRORS)
        self._unload(group, E.COORDINATOR_NOT_AVAILABLE)
        del self.groups[group_id]
        log.info("deleted group %s", group_id)
        return E.NONE

    def _unload(self, group: Group, error: ErrorCode) -> None:
        """Stops the group's timers and answers its waiters (deletion, shutdown)."""
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        for m in group.members.values():
            self._stop_heartbeat(m)
            m.answer_join(JoinResult(error, member_id=m.member_id))
            m.answer_sync(SyncResult(error))
        with contextlib.suppress(Exception):
            group.transition(GroupState.DEAD, self.clock())

    # -- offsets --------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartitionKey, tuple[int, int, str | None]],
        retention_ms: int = -1,
    ) -> dict[TopicPartitionKey, ErrorCode]:
        """OffsetCommit: (offset, leader epoch, metadata) per partition; an error per partition."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation the coordinator does not know.
                return dict.fromkeys(offsets, E.ILLEGAL_GENERATION)
            # Offsets of a consumer that assigns itself partitions.
            group = self.groups[group_id] = Group(group_id, self.clock())
        error = self._check_commit(group, member_id, group_instance_id, generation_id)
        if error != E.NONE:
            return dict.fromkeys(offsets, error)
        return self._store_offsets(group, offsets, retention_ms)

    def _check_commit(
        self, group: Group, member_id: str, instance: str | None, generation_id: int
    ) -> ErrorCode:
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, instance):
            return E.FENCED_INSTANCE_ID
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return E.NONE
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Its JoinGroup answer arrived, its SyncGroup has not: it may retry after.
            return E.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._schedule_heartbeat(group, member)
        return E.NONE

    def _store_offsets(
        self,
        group: Group,
        offsets: Mapping[TopicPartitionKey, tuple[int, int, str | None]],
        retention_ms: int,
    ) -> dict[TopicPartitionKey, ErrorCode]:
        results: dict[TopicPartitionKey, ErrorCode] = {}
        topics = self.broker.metadata.topics()
        max_metadata = as_int(self.config["offset.metadata.max.bytes"])
        now = self.clock()
        accepted: dict[TopicPartitionKey, CommittedOffset] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            topic = topics.get(tp[0])
            if topic is None or tp[1] not in topic.partitions:
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif metadata is not None and len(metadata.encode()) > max_metadata:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                expire = now + retention_ms if retention_ms >= 0 else None
                accepted[tp] = CommittedOffset(offset, epoch, metadata or "", now, expire)
        if accepted:
            records: list[Record] = [
                (offset_key(group.group_id, t, p), offset_value(c))
                for (t, p), c in accepted.items()
            ]
            error = _store_error(
                self.store.append(self.partition_of(group.group_id), records, now),
                _STORE_OFFSET_ERRORS,
            )
            if error == E.NONE:
                group.offsets.update(accepted)
            results.update(dict.fromkeys(accepted, error))
        return results

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartitionKey] | None,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """OffsetFetch: the committed offsets of ``partitions`` (None: all the group has)."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return error, []
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        if partitions is None:
            return E.NONE, [FetchedOffset(t, p, c) for (t, p), c in sorted(offsets.items())]
        # No transactional offset commits exist yet, so every offset is stable.
        return E.NONE, [FetchedOffset(t, p, offsets.get((t, p))) for t, p in partitions]

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartitionKey]
    ) -> tuple[ErrorCode, dict[TopicPartitionKey, ErrorCode]]:
        """OffsetDelete: only for topics the group does not consume right now."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.GROUP_ID_NOT_FOUND, {}
        if group.state is not GroupState.EMPTY and group.protocol_type != "consumer":
            return E.NON_EMPTY_GROUP, {}
        results: dict[TopicPartitionKey, ErrorCode] = {}
        doomed: list[TopicPartitionKey] = []
        for tp in partitions:
            if group.state is not GroupState.EMPTY and group.is_subscribed_to(tp[0]):
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = E.NONE
                if tp in group.offsets:
                    doomed.append(tp)
        error = self._remove_offsets(group, doomed)
        if error != E.NONE:
            return error, {}
        self._maybe_drop_empty_group(group)
        return E.NONE, results

    def _remove_offsets(self, group: Group, doomed: list[TopicPartitionKey]) -> ErrorCode:
        if not doomed:
            return E.NONE
        records: list[Record] = [(offset_key(group.group_id, t, p), None) for t, p in doomed]
        error = self.store.append(self.partition_of(group.group_id), records, self.clock())
        if error != E.NONE:
            return _store_error(error, _STORE_OFFSET_ERRORS)
        for tp in doomed:
            group.offsets.pop(tp, None)
        return E.NONE

    def _maybe_drop_empty_group(self, group: Group) -> None:
        """An empty group with no offsets left is forgotten (and tombstoned)."""
        if group.state is not GroupState.EMPTY or group.offsets or group.pending_members:
            return
        error = self.store.append(
            self.partition_of(group.group_id), [(group_key(group.group_id), None)], self.clock()
        )
        if error != E.NONE:
            return
        self._unload(group, E.COORDINATOR_NOT_AVAILABLE)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        log.info("group %s is empty and has no offsets: removed", group.group_id)

    # -- expiry and topic changes ------------------------------------------------------------

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(as_int(self.config["offsets.retention.check.interval.ms"]) / 1000)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    def expire_offsets(self) -> int:
        """Removes offsets past ``offsets.retention.minutes``; returns how many went."""
        now = self.clock()
        retention_ms = as_int(self.config["offsets.retention.minutes"]) * 60_000
        removed = 0
        for group in list(self.groups.values()):
            if self.is_loading(group.group_id) or group.state is GroupState.DEAD:
                continue
            expired = self._expired_offsets(group, now, retention_ms)
            if expired and self._remove_offsets(group, expired) == E.NONE:
                removed += len(expired)
                log.info("group %s: %d offsets expired", group.group_id, len(expired))
            self._maybe_drop_empty_group(group)
        return removed

    @staticmethod
    def _expired_offsets(group: Group, now: int, retention_ms: int) -> list[TopicPartitionKey]:
        subscribed: set[str] = set()
        if group.protocol_type is None:
            # Offsets of consumers that assign themselves: age from each commit.
            base: Callable[[CommittedOffset], int] = lambda c: c.commit_timestamp  # noqa: E731
        elif group.state is GroupState.EMPTY:
            # Nobody consumes: age from when the group became empty.
            base = lambda c: group.state_timestamp  # noqa: E731
        elif group.state is GroupState.STABLE and group.protocol_type == "consumer":
            topics = group.subscribed_topics()
            if topics is None:
                return []
            # Topics the members stopped consuming age from their last commit.
            subscribed = topics
            base = lambda c: c.commit_timestamp  # noqa: E731
        else:
            return []
        out = []
        for tp, c in group.offsets.items():
            if tp[0] in subscribed:
                continue
            if c.expire_timestamp is not None:
                if now >= c.expire_timestamp:
                    out.append(tp)
            elif now - base(c) >= retention_ms:
                out.append(tp)
        return out

    def on_partitions_added(self, topic: str) -> None:
        """A topic grew: groups consuming it rebalance so the new partitions get owners."""
        for group in self.groups.values():
            if group.state not in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                continue
            topics = group.subscribed_topics()
            if topics is not None and topic in topics:
                self._prepare_rebalance(group, f"partitions were added to {topic}")

    def on_topic_deleted(self, topic: str) -> None:
        """A topic is gone: its committed offsets go too."""
        for group in list(self.groups.values()):
            if self.is_loading(group.group_id) or group.state is GroupState.DEAD:
                continue
            doomed = [tp for tp in group.offsets if tp[0] == topic]
            if doomed and self._remove_offsets(group, doomed) == E.NONE:
                self._maybe_drop_empty_group(group)

    # -- persistence helpers -----------------------------------------------------------------

    def _store_group(self, group: Group, assignments: dict[str, bytes] | None = None) -> ErrorCode:
        record = group.to_record(assignments)
        return self.store.append(
            self.partition_of(group.group_id),
            [(group_key(group.group_id), group_value(record))],
            self.clock(),
        )
