"""The group coordinator: the membership state machine of every group it owns.

`GroupCoordinator` drives each group's state machine (``group.Group``) from
the group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups, DeleteGroups): rebalances, sessions, the leader's assignment and
static members. It is also what the broker holds: lifecycle, the checks a
group request passes first, creating ``__consumer_offsets`` on first use,
and the election hooks (`on_elected`, `on_resigned`). The rest is delegated:

- `cache.GroupCache`: which ``__consumer_offsets`` partitions (and so which
  groups) are this coordinator's, their loading, and the order of writes;
- `offsets.OffsetManager`: committed offsets (``coordinator.offsets``);
- `transactions.TxnOffsetManager`: transactional offset commits and the
  markers that end them (``coordinator.txn_offsets``; `on_txn_marker` is
  the replica manager's marker listener);
- `delayed`: the timers, in two purgatories (rebalances by group id,
  sessions by member) on an injectable `Scheduler` (the running loop unless
  given), so that tests can drive time by hand.

All state changes happen on the event loop without awaiting in between, so
a request sees a consistent group. A change that must be stored changes the
group only once its record is appended (Kafka's GroupMetadataManager calls
back the same way): the write starts at once, in request order, and what
follows it runs in a task of its own (a requester going away does not stop
it), re-checking the group, which may have moved on meanwhile. Requests that
must wait (JoinGroup until the rebalance completes, SyncGroup until the
leader's assignment is stored) get a future.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbroker.config import as_int
from kbroker.coordinator.cache import GroupCache
from kbroker.coordinator.consumer_coordinator import ConsumerGroups
from kbroker.coordinator.consumer_records import tombstones
from kbroker.coordinator.delayed import (
    DelayedHeartbeat,
    DelayedJoin,
    InitialDelayedJoin,
    MemberKey,
    PendingMemberTimer,
    member_key,
)
from kbroker.coordinator.group import (
    Group,
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
)
from kbroker.coordinator.offsets import OffsetManager
from kbroker.coordinator.records import OFFSETS_TOPIC, group_key, group_value
from kbroker.coordinator.store import GROUP_ERRORS, OffsetsStore, answered, api_error
from kbroker.coordinator.transactions import TxnOffsetManager
from kbroker.log import TopicPartition
from kbroker.log.log import now_ms
from kbroker.metrics.state import GroupLag
from kbroker.protocol.errors import ErrorCode
from kbroker.replication.purgatory import Purgatory, Scheduler

if TYPE_CHECKING:
    from kbroker.coordinator.host import CoordinatorHost

log = logging.getLogger(__name__)

E = ErrorCode
TopicPartitionKey = tuple[str, int]

# Retries of a failed creation of __consumer_offsets: the first after the
# minimum, each next one twice as late, up to the maximum.
CREATE_BACKOFF_MIN_S = 0.1
CREATE_BACKOFF_MAX_S = 5.0

# Bytes a JoinGroup protocol entry costs beyond its name and metadata (two lengths).
_PROTOCOL_OVERHEAD = 6

# How long `stop` waits for writes under way.
STOP_WRITES_TIMEOUT_S = 10.0


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
    message: str | None = None


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


class GroupCoordinator:
    def __init__(
        self,
        broker: CoordinatorHost,
        clock: Callable[[], int] = now_ms,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.broker = broker
        self.config = broker.config
        self.clock = clock
        self._joins: Purgatory[str] = Purgatory("rebalance", scheduler)
        self._heartbeats: Purgatory[MemberKey] = Purgatory("heartbeat", scheduler)
        self.store = OffsetsStore(broker)
        self.cache = GroupCache(
            self.store,
            lambda: self.clock(),
            self._on_group_loaded,
            self._on_group_unloaded,
            lambda index, producer_id, commit: self.txn_offsets.on_txn_completed(
                index, producer_id, commit
            ),
        )
        self.offsets = OffsetManager(
            broker, self.cache, self.check, self._schedule_heartbeat, lambda: self.clock()
        )
        self.txn_offsets = TxnOffsetManager(broker, self.cache, self.check, lambda: self.clock())
        self.consumer_groups = ConsumerGroups(
            broker, self.cache, self.check, lambda: self.clock(), self
        )
        self.offsets.consumer_member_error = self.consumer_groups.member_error  # type: ignore[method-assign]
        self._active = False
        # Backoff between attempts to create __consumer_offsets after one failed.
        self._create_backoff_s = 0.0
        self._create_retry_at = 0.0

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Starts serving; groups already stored are loaded in the background."""
        self._active = True
        self.offsets.start(self._joins.scheduler)

    async def stop(self) -> None:
        """Stops serving: waiting members are told NOT_COORDINATOR, timers stop."""
        self._active = False
        self.offsets.stop()
        await self.cache.stop()
        # Writes under way finish (into logs still open); their groups are gone.
        await self.cache.drain(STOP_WRITES_TIMEOUT_S)

    def on_elected(self, partition_index: int, coordinator_epoch: int) -> None:
        """This broker became the leader of ``__consumer_offsets-<partition_index>``.

        Its groups load in the background; until then requests for them get
        COORDINATOR_LOAD_IN_PROGRESS. An epoch older than the last seen for
        the partition is ignored (Kafka's onElection).
        """
        self.cache.on_elected(partition_index, coordinator_epoch)

    def on_resigned(self, partition_index: int, coordinator_epoch: int) -> None:
        """This broker no longer leads ``__consumer_offsets-<partition_index>``.

        Its groups are unloaded: members waiting in JoinGroup/SyncGroup get
        NOT_COORDINATOR, their timers stop, and later requests for them get
        NOT_COORDINATOR. A stale epoch is ignored (Kafka's onResignation).
        """
        self.cache.on_resigned(partition_index, coordinator_epoch)

    def on_leadership_change(self, tp: TopicPartition, leads: bool, leader_epoch: int) -> None:
        """The replica manager's leadership listener: a ``__consumer_offsets``
        partition's leader epoch is its coordinator epoch."""
        if tp.topic != OFFSETS_TOPIC:
            return
        if leads:
            self.on_elected(tp.partition, leader_epoch)
        else:
            self.on_resigned(tp.partition, leader_epoch)

    def on_txn_marker(
        self, tp: TopicPartition, producer_id: int, committed: bool, offset: int
    ) -> None:
        """The replica manager's marker listener: a COMMIT (``committed``) or ABORT marker
        of ``producer_id`` was written at ``offset`` of ``tp``; on a ``__consumer_offsets``
        partition it ends the producer's transactional offset commits there."""
        if tp.topic == OFFSETS_TOPIC:
            self.cache.on_txn_marker(tp.partition, producer_id, committed, offset)

    @property
    def groups(self) -> dict[str, Group]:
        """The loaded groups, by id."""
        return self.cache.groups

    @property
    def loading(self) -> bool:
        return self.cache.loading

    def consumer_lag(self) -> list[GroupLag]:
        """Each loaded group's committed offsets and their lag behind the high watermark
        (what Burrow or kafka-lag-exporter compute), for the partitions this broker holds.

        Safe from another thread (the metrics scrape): the dicts are copied in one
        C-level step each and only plain attributes are read.
        """
        partitions = self.broker.replica_manager.all_partitions()
        out: list[GroupLag] = []
        for group_id, group in list(self.cache.groups.items()):
            for (topic, index), committed in list(group.offsets.items()):
                partition = partitions.get(TopicPartition(topic, index))
                if partition is None:
                    continue  # not here (deleted, or another broker's in cluster mode)
                out.append(
                    GroupLag(group_id, topic, index, committed.offset, partition.high_watermark)
                )
        return out

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
        if self.cache.partition_count() is not None:
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
                if count is None and exc.code == ErrorCode.LEADER_NOT_AVAILABLE:
                    return False  # being created by the cluster's controller
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
        return True

    def check(self, group_id: str, allow_empty: bool = False) -> ErrorCode:
        """The error a request for ``group_id`` gets before touching the group, or NONE."""
        if group_id is None or (not group_id and not allow_empty):
            return E.INVALID_GROUP_ID
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE
        if not self.ensure_offsets_topic():
            return E.COORDINATOR_NOT_AVAILABLE
        return self.cache.ownership_error(group_id)

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
        if group.consumer is not None and group.consumer.members:
            return self.consumer_groups.classic_join(group, req)
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
        if group.gone:
            # Being deleted: the client looks the coordinator up again and retries.
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None:
            if group.consumer.members:
                # A consumer group (KIP-848) with members: classic members join it as such.
                return self.consumer_groups.classic_join(group, req)
            # An empty consumer group becomes a classic one (its offsets stay).
            self.cache.append(group, tombstones(group.consumer))
            group.consumer = None
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
        if group.gone:
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            self._heartbeats.check_and_complete(member_key(group.group_id, member_id))
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
        member = group.members[old_id]
        if group.state is GroupState.STABLE:
            updated = dataclasses.replace(
                member,
                member_id=new_id,
                protocols=list(req.protocols),
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                session_timeout_ms=req.session_timeout_ms,
                join_waiter=None,
                sync_waiter=None,
                heartbeat=None,
            )
            if group.select_protocol({old_id: updated}) == group.protocol_name:
                # No rebalance: the group is stored with the new member id first.
                write = self._store_group(group, replacing={old_id: updated})
                return self.cache.spawn(
                    self._static_member_stored(group, member, updated, req, write)
                )
        member = group.replace_static_member(instance, old_id, new_id)
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._schedule_heartbeat(group, member)
        waiter = member.join_waiter = self._new_waiter()
        self._maybe_prepare_rebalance(
            group, f"static member {instance} rejoined with new protocols"
        )
        self._try_complete_join(group)
        return waiter

    async def _static_member_stored(
        self,
        group: Group,
        member: Member,
        updated: Member,
        req: JoinRequest,
        write: asyncio.Future[ErrorCode],
    ) -> JoinResult:
        """The new member id of a static member is stored: it takes the old one's place."""
        old_id, new_id = member.member_id, updated.member_id
        generation = group.generation_id
        error = api_error(await write, GROUP_ERRORS)
        if error != E.NONE:
            return JoinResult(error, member_id=new_id)
        if not (
            self.cache.is_current(group)
            and group.state is GroupState.STABLE
            and group.generation_id == generation
            and group.members.get(old_id) is member
        ):
            # The group moved on while the record was written: join it as it is now.
            again = self.join_group(req)
            return again if isinstance(again, JoinResult) else await again
        assert req.group_instance_id is not None
        group.replace_static_member(req.group_instance_id, old_id, new_id)
        member.protocols = updated.protocols
        member.rebalance_timeout_ms = updated.rebalance_timeout_ms
        member.session_timeout_ms = updated.session_timeout_ms
        self._schedule_heartbeat(group, member)
        log.info(
            "static member %s of group %s rejoined as %s without a rebalance",
            req.group_instance_id,
            group.group_id,
            new_id,
        )
        leader = group.is_leader(new_id)
        return group.join_result(member, with_members=leader, skip_assignment=leader)

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
            # As Kafka: the empty generation is stored after the fact; if that
            # fails, the previous one comes back at load and its members expire.
            self.cache.spawn(self._empty_group_stored(group, self._store_group(group)))
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

    async def _empty_group_stored(self, group: Group, write: asyncio.Future[ErrorCode]) -> None:
        error = await write
        if error != E.NONE:
            log.warning(
                "group %s: could not store the empty generation: %s", group.group_id, error.name
            )

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        """The member is alive: its session completes and the next one is watched."""
        previous = member.heartbeat
        if previous is not None:
            member.heartbeat_satisfied = True
            self._heartbeats.check_and_complete(member_key(group.group_id, member.member_id))
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
        if group.gone:
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None:
            return self.consumer_groups.classic_sync(
                group, member_id, group_instance_id, generation_id, protocol_type, protocol_name
            )
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
            # The assignment is stored first; then the group is Stable and members get theirs.
            given = dict(assignments)
            chosen = {mid: given.get(mid, b"") for mid in group.members}
            write = self._store_group(group, chosen)
            self.cache.spawn(self._assignment_stored(group, group.generation_id, chosen, write))
        return waiter

    async def _assignment_stored(
        self,
        group: Group,
        generation: int,
        assignments: dict[str, bytes],
        write: asyncio.Future[ErrorCode],
    ) -> None:
        error = api_error(await write, GROUP_ERRORS)
        if (
            not self.cache.is_current(group)
            or group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation_id != generation
        ):
            return  # moved on meanwhile; its members were answered then
        if error != E.NONE:
            for m in group.members.values():
                m.assignment = b""
                m.answer_sync(SyncResult(error))
            self._prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
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
        if group.gone:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return self.consumer_groups.classic_heartbeat(
                group, member_id, group_instance_id, generation_id
            )
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
    ) -> tuple[ErrorCode, list[ErrorCode]] | asyncio.Future[tuple[ErrorCode, list[ErrorCode]]]:
        """Members (member_id, group_instance_id) leave; returns (top error, one per member),
        once stored when the group is a consumer group."""
        error = self.check(group_id)
        if error != E.NONE:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.gone:
            return E.COORDINATOR_NOT_AVAILABLE, []
        if group.consumer is not None:
            left = self.consumer_groups.classic_leave(group, leaving)
            return asyncio.ensure_future(_with_top_error(left))
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
            self._heartbeats.check_and_complete(member_key(group.group_id, member_id))
            self._try_complete_join(group)
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s leaves", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, "LeaveGroup")
        return E.NONE

    # -- conversions between the protocols (ConsumerGroups calls these) ----------------------

    def stop_classic(self, group: Group) -> None:
        """The classic group becomes a consumer group: waiting members are told to rejoin
        (they join the consumer group as its classic members), its timers stop."""
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        for m in list(group.members.values()):
            self._stop_heartbeat(m)
            m.answer_join(JoinResult(E.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            m.answer_sync(SyncResult(E.REBALANCE_IN_PROGRESS))
            group.remove(m.member_id)
        group.state = GroupState.EMPTY
        group.protocol_type = None
        group.protocol_name = None
        group.leader_id = None

    def start_classic(self, group: Group) -> None:
        """A consumer group became classic: sessions start and the members rejoin."""
        for m in group.members.values():
            self._schedule_heartbeat(group, m)
        self._prepare_rebalance(group, "converted from a consumer group")

    # -- DescribeGroups, ListGroups, DeleteGroups --------------------------------------------

    def describe_group(self, group_id: str, version: int = 5) -> GroupDescription:
        """DescribeGroups of ``group_id``: a group that is not there, or not a classic group
        (ConsumerGroupDescribe describes those), is Dead with no error before v6 and
        GROUP_ID_NOT_FOUND from v6, as Kafka 4 answers."""
        error = self.check(group_id, allow_empty=True)
        if error != E.NONE:
            return GroupDescription(error, group_id)
        group = self.groups.get(group_id)
        missing = None
        if group is None or group.gone:
            missing = f"Group {group_id} not found."
        elif group.consumer is not None:
            missing = f"Group {group_id} is not a classic group."
        if group is None or missing is not None:
            if version >= 6:
                return GroupDescription(E.GROUP_ID_NOT_FOUND, group_id, members=[], message=missing)
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

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[GroupListing]]:
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE, []
        if self.cache.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, []
        wanted = {s.lower() for s in states}
        kinds = {t.lower() for t in types}
        out = []
        for g in sorted(self.groups.values(), key=lambda g: g.group_id):
            if g.state is GroupState.DEAD or g.gone:
                continue
            if g.consumer is not None:
                listing = GroupListing(g.group_id, "consumer", g.consumer.state, "consumer")
            else:
                listing = GroupListing(g.group_id, g.protocol_type or "", g.state.value, "classic")
            if (not wanted or listing.state.lower() in wanted) and (
                not kinds or listing.group_type in kinds
            ):
                out.append(listing)
        return E.NONE, out

    def delete_groups(self, group_ids: list[str]) -> asyncio.Future[dict[str, ErrorCode]]:
        """DeleteGroups: an error per group, once the tombstones are stored."""
        results: dict[str, ErrorCode] = {}
        writes: dict[str, asyncio.Future[ErrorCode]] = {}
        for group_id in group_ids:
            error = self.check(group_id, allow_empty=True)
            group = self.groups.get(group_id)
            if error != E.NONE:
                pass
            elif group is None or group.gone:
                error = E.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY or (
                group.consumer is not None and group.consumer.members
            ):
                error = E.NON_EMPTY_GROUP
            else:
                writes[group_id] = self.cache.forget(group, "deleted")
            results[group_id] = error
        if not writes:
            return answered(results)

        async def deleted() -> dict[str, ErrorCode]:
            for group_id, write in writes.items():
                results[group_id] = api_error(await write, GROUP_ERRORS)
            return results

        return asyncio.shield(self.cache.spawn(deleted()))

    def _on_group_loaded(self, group: Group) -> None:
        """A loaded group's members must heartbeat within their session timeout; its
        pending transactional offsets wait for their markers."""
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        self.consumer_groups.on_group_loaded(group)
        self.txn_offsets.on_group_loaded(group)

    def _on_group_unloaded(self, group: Group, error: ErrorCode) -> None:
        """Stops the group's timers and answers its waiters (deletion, resignation, shutdown)."""
        self.txn_offsets.on_group_unloaded(group)
        self.consumer_groups.on_group_unloaded(group)
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

    def on_partitions_added(self, topic: str) -> None:
        """A topic grew: groups consuming it rebalance so the new partitions get owners."""
        for group in self.groups.values():
            if group.state not in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                continue
            topics = group.subscribed_topics()
            if topics is not None and topic in topics:
                self._prepare_rebalance(group, f"partitions were added to {topic}")

    def on_topic_deleted(self, topic: str) -> None:
        """A topic is gone: its committed offsets go too (written in the background)."""
        self.offsets.on_topic_deleted(topic)

    # -- persistence helpers -----------------------------------------------------------------

    def _store_group(
        self,
        group: Group,
        assignments: Mapping[str, bytes] | None = None,
        replacing: Mapping[str, Member] | None = None,
    ) -> asyncio.Future[ErrorCode]:
        """Starts storing the group as `Group.to_record` describes it."""
        record = group.to_record(assignments, replacing)
        return self.cache.append(group, [(group_key(group.group_id), group_value(record))])


async def _with_top_error(
    left: asyncio.Future[list[ErrorCode]],
) -> tuple[ErrorCode, list[ErrorCode]]:
    return E.NONE, await left
