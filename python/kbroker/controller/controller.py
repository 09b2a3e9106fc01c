"""`Controller`: the work of the elected controller, one event at a time.

Elected (see `kbroker.cluster.controller_election`), the controller reads the cluster
from ZooKeeper into a `ControllerContext` and then follows it through watches on
``/brokers/ids``, ``/brokers/topics`` (and each topic's assignment) and the admin
znodes (``/admin/delete_topics``, ``/admin/preferred_replica_election``,
``/admin/reassign_partitions``). Each event is handled to the end before the next
(one task drains the queue), and each follows one pattern: plan transitions from
the context (no I/O), write them to ZooKeeper fenced by the controller epoch and
each state's version, record what was written, and only then tell the brokers
(LeaderAndIsr to the partitions' replicas, UpdateMetadata to every live broker).
Reads and writes of many partitions go in few requests: a new controller reads every
state through `ZkClient.get_many` (multiRead), and updated states are written in multis
of many states each (a batch refused as a whole is written again state by state). The
start logs how long each of its phases took.

What it handles: brokers joining (full metadata to them; their partitions' orders;
offline partitions elected) and leaving (their partitions elected elsewhere from
the ISR, or left without a leader; dead replicas out of the ISR), new topics and
partitions (first states), topic deletion (``/admin/delete_topics``: brokers stop
and delete the replicas, and the topic's znodes go once every replica confirmed,
so a replica on a dead broker is deleted when it is back), controlled shutdown (a
broker about to stop hands its leaderships over and leaves the ISRs), leader
elections asked for (ElectLeaders, ``/admin/preferred_replica_election``) or due
(the periodic leader rebalance), ISR changes partition leaders ask for
(AlterPartition: written, then UpdateMetadata to every broker), partition
reassignments (AlterPartitionReassignments and ``/admin/reassign_partitions``:
replicas added, caught up, and the old ones removed; see
`kbroker.controller.reassignment`), blocks of producer ids for brokers that ask
for them (AllocateProducerIds, as Kafka 3.x brokers do), and the finalized
features (``/feature`` made, or enabled, at election; UpdateFeatures written at
levels every live broker supports). A write refused because another controller
was elected stops it.

Requests from outside (`controlled_shutdown`, `elect_leaders`, `rebalance_leaders`,
`alter_partition`, `alter_partition_reassignments`, `list_partition_reassignments`,
`allocate_producer_ids`, `update_features`) are events too: they wait their turn,
and their refusals are `KafkaError`s carrying the code Kafka answers with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kbroker.cluster import zk_data as zd
from kbroker.cluster.configs import read_topic_configs
from kbroker.cluster.controller_election import ControllerEpoch, fenced_multi
from kbroker.cluster.errors import (
    ControllerMovedError,
    ProducerIdBlockError,
    ZkBadVersionError,
    ZkDataError,
    ZkError,
    ZkMultiError,
    ZkNoNodeError,
)
from kbroker.cluster.features import (
    ensure_feature_znode,
    read_feature_znode,
    write_feature_znode,
)
from kbroker.cluster.producer_id_blocks import allocate_producer_id_block
from kbroker.cluster.zk import CreateOp, DeleteOp, SetDataOp, Stat, WatchEvent, ZkClient
from kbroker.config import ConfigError, topic_setting
from kbroker.controller import requests
from kbroker.controller.channel import ControllerChannel
from kbroker.controller.context import (
    ControllerContext,
    LiveBroker,
    TopicAssignment,
    Transition,
)
from kbroker.controller.isr_changes import IsrAnswer, IsrChange, plan_isr_change, resolve
from kbroker.controller.leader_election import ElectionType
from kbroker.controller.reassignment import Assignment, plan_request
from kbroker.futures import cancel_and_wait, watched
from kbroker.log import TopicPartition
from kbroker.metadata.features import FeatureUpdate, UpdateRefused, plan_update
from kbroker.metadata.model import PartitionState
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.errors import KafkaError
from kbroker.security.client import InterBrokerLink

log = logging.getLogger(__name__)

# Topic znodes per multiRead request (a topic of thousands of partitions is tens of KiB).
TOPIC_READ_BATCH = 16
# Partition states updated in one multi (Kafka's state znodes: well under ZooKeeper's
# default 1 MiB request limit).
STATE_WRITE_BATCH = 500
# Topic watches set together when a controller starts.
STARTUP_WATCH_BATCH = 64
# An event handled for this long (and each time as long again) logs where it waits: the
# events behind it wait too.
SLOW_EVENT_S = 10.0

T = TypeVar("T")
Event = Callable[[], Awaitable[None]]

# A ControlledShutdown from a broker that does not know its epoch (before KIP-380).
UNKNOWN_BROKER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The broker settings the controller follows (Kafka's names in `from_config`)."""

    # auto.leader.rebalance.enable
    auto_leader_rebalance: bool = True
    # leader.imbalance.check.interval.seconds
    leader_imbalance_check_interval_s: float = 300.0
    # leader.imbalance.per.broker.percentage
    leader_imbalance_per_broker_percentage: int = 10
    # The first check after the controller starts (Kafka waits a fixed 5 s).
    first_imbalance_check_delay_s: float = 5.0
    # The brokers' listener the controller talks to, and how it is secured.
    inter_broker: InterBrokerLink = field(default_factory=InterBrokerLink)

    @classmethod
    def from_config(cls, props: Mapping[str, object]) -> ControllerSettings:
        """From broker settings under Kafka's names; missing ones take Kafka's defaults."""
        default = cls()
        enable = str(props.get("auto.leader.rebalance.enable", "true")).strip().lower()
        if enable not in ("true", "false"):
            raise ValueError(f"auto.leader.rebalance.enable must be true or false, not {enable!r}")
        interval = int(str(props.get("leader.imbalance.check.interval.seconds", "300")).strip())
        if interval < 1:
            raise ValueError("leader.imbalance.check.interval.seconds must be at least 1")
        percentage = int(str(props.get("leader.imbalance.per.broker.percentage", "10")).strip())
        return cls(
            auto_leader_rebalance=enable == "true",
            leader_imbalance_check_interval_s=float(interval),
            leader_imbalance_per_broker_percentage=percentage,
            first_imbalance_check_delay_s=default.first_imbalance_check_delay_s,
        )


UNCLEAN_ELECTION = "unclean.leader.election.enable"


def _topic_assignment(name: str, data: bytes) -> TopicAssignment | None:
    """A topic znode's assignment as the controller keeps it; None (logged) when it cannot
    be read or names no topic id."""
    try:
        assignment = zd.decode_topic_assignment(data)
    except ZkDataError as exc:
        log.warning("controller: skipping topic %r: %s", name, exc)
        return None
    if assignment.topic_id is None:
        log.warning("controller: topic %r has no topic id; skipped", name)
        return None
    return TopicAssignment(
        name,
        assignment.topic_id,
        assignment.replicas(),
        {a.partition: list(a.adding_replicas) for a in assignment.partitions if a.adding_replicas},
        {
            a.partition: list(a.removing_replicas)
            for a in assignment.partitions
            if a.removing_replicas
        },
    )


def _log_written(t: Transition) -> None:
    log.info(
        "controller: %s: leader %d, epoch %d, isr %s (%s)",
        t.tp,
        t.state.leader,
        t.state.leader_epoch,
        t.state.isr,
        t.why,
    )


class _PhaseTimer:
    """Seconds spent in each phase of a long piece of work, for one log line."""

    def __init__(self) -> None:
        self._start = self._last = time.monotonic()
        self._laps: list[tuple[str, float]] = []

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self._laps.append((phase, now - self._last))
        self._last = now

    def __str__(self) -> str:
        phases = ", ".join(f"{phase} {s:.3f}" for phase, s in self._laps)
        return f"{self._last - self._start:.3f} s ({phases})"


class Controller:
    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        epoch: ControllerEpoch,
        allow_unclean: Callable[[str], bool] = lambda _topic: False,
        channel: ControllerChannel | None = None,
        settings: ControllerSettings | None = None,
    ) -> None:
        self.zk = zk
        self.epoch = epoch
        self.ctx = ControllerContext(controller_id=broker_id, epoch=epoch.epoch)
        self.allow_unclean = allow_unclean
        self.settings = settings or ControllerSettings()
        self.channel = channel or ControllerChannel(
            broker_id, security=self.settings.inter_broker.security
        )
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._watches: list[object] = []
        # Set when the controller stopped on its own (another one was elected).
        self.moved = asyncio.Event()
        self.stopped = False
        # Topics being deleted -> replicas (broker, partition) not yet confirmed deleted.
        self._undeleted: dict[str, set[tuple[int, TopicPartition]]] = {}
        # A watch on each known topic's assignment (partitions added to it).
        self._topic_watches: dict[str, object] = {}
        # The creation (czxid) of the /admin/reassign_partitions znode last acted on: as in
        # Kafka, its partitions are read when it is created, not on each change.
        self._zk_reassignment_seen: int | None = None
        # Answers owed to callers of the public coroutines (refused if the controller stops).
        self._asked: set[asyncio.Future[Any]] = set()
        self._rebalancer: asyncio.Task[None] | None = None

    # -- life ----------------------------------------------------------------------

    async def start(self) -> None:
        """Loads the cluster, starts following it, and brings every partition online."""
        for path in (zd.BROKER_IDS_PATH, zd.TOPICS_PATH):
            await self.zk.ensure_path(path)
        self._watches.append(
            await self.zk.watch(
                zd.BROKER_IDS_PATH, self._queue(self._brokers_changed), children=True
            )
        )
        self._watches.append(
            await self.zk.watch(zd.TOPICS_PATH, self._queue(self._topics_changed), children=True)
        )
        await self.zk.ensure_path(zd.DELETE_TOPICS_PATH)
        deletions = self._queue(self._deletions_changed)
        self._watches.append(await self.zk.watch(zd.DELETE_TOPICS_PATH, deletions, children=True))
        # (The znode comes and goes: a data watch sees its creation.)
        elections = self._queue(self._preferred_election_requested)
        self._watches.append(await self.zk.watch(zd.PREFERRED_REPLICA_ELECTION_PATH, elections))
        moves = self._queue(self._zk_reassignment_changed)
        self._watches.append(await self.zk.watch(zd.REASSIGN_PARTITIONS_PATH, moves))
        self._task = asyncio.ensure_future(self._run())
        self._events.put_nowait(self._startup)
        if self.settings.auto_leader_rebalance:
            self._rebalancer = asyncio.ensure_future(self._rebalance_periodically())
        log.info("controller %d: started in epoch %d", self.ctx.controller_id, self.ctx.epoch)

    async def stop(self) -> None:
        self.stopped = True
        for watch in [*self._watches, *self._topic_watches.values()]:
            watch.cancel()  # type: ignore[attr-defined]
        self._watches.clear()
        self._topic_watches.clear()
        for task in (self._rebalancer, self._task):
            if task is not None:
                await cancel_and_wait(task)
        self._refuse_asked()
        await self.channel.close()

    async def idle(self) -> None:
        """Returns once every event queued so far is handled (for tests and shutdown)."""
        done = asyncio.get_running_loop().create_future()

        async def mark() -> None:
            done.set_result(None)

        self._events.put_nowait(mark)
        await done

    def _queue(self, handler: Event) -> Callable[[WatchEvent], None]:
        return lambda _event: self._events.put_nowait(handler)

    async def _ask(self, work: Callable[[], Awaitable[T]]) -> T:
        """Runs ``work`` as an event and returns its result. Raises only `KafkaError`s:
        ``work``'s refusals, NOT_CONTROLLER once this controller stopped (or stops before
        getting to it), UNKNOWN_SERVER_ERROR for anything else (ZooKeeper away, say),
        which the event loop logs as well."""
        if self.stopped or self.moved.is_set():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is no longer the controller")
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def event() -> None:
            try:
                result = await work()
            except (ControllerMovedError, asyncio.CancelledError):
                self._refuse_asked()
                raise
            except KafkaError as exc:  # a refusal: the caller's answer, not a failure
                if not answer.done():
                    answer.set_exception(exc)
                return
            except Exception as exc:
                if not answer.done():
                    failed = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc) or repr(exc))
                    failed.__cause__ = exc
                    answer.set_exception(failed)
                raise
            if not answer.done():
                answer.set_result(result)

        self._asked.add(answer)
        try:
            self._events.put_nowait(event)
            return await answer
        finally:
            self._asked.discard(answer)

    def _refuse_asked(self) -> None:
        for answer in self._asked:
            if not answer.done():
                answer.set_exception(KafkaError(ErrorCode.NOT_CONTROLLER, "the controller stopped"))

    async def _run(self) -> None:
        while True:
            handler = await self._events.get()
            try:
                await watched(handler(), SLOW_EVENT_S, self._slow_event)
            except ControllerMovedError as exc:
                log.warning("controller %d: %s; stepping down", self.ctx.controller_id, exc)
                self.moved.set()
                self._refuse_asked()
                return
            except ZkError as exc:
                # ZooKeeper away: the watches re-deliver once it is back.
                log.warning("controller %d: ZooKeeper failed (%s)", self.ctx.controller_id, exc)
            except Exception:
                log.exception("controller %d: handling an event failed", self.ctx.controller_id)

    def _slow_event(self, seconds: float, waiting_at: str) -> None:
        """An event handled for longer than it should be: every other event waits behind
        it, so where it waits is logged."""
        log.warning(
            "controller %d: an event has been handled for %.0f s; it waits at %s",
            self.ctx.controller_id,
            seconds,
            waiting_at,
        )

    def counts(self) -> tuple[int, int, int]:
        """(offline partitions, partitions, topics) as this controller knows them. Safe
        from another thread (a metrics scrape): it reads copies made in one step each."""
        topics = list(self.ctx.topics.values())
        states = dict(self.ctx.states)
        live = set(self.ctx.live)
        deleting = set(self.ctx.deleting)
        partitions = offline = 0
        for topic in topics:
            for p in list(topic.partitions):
                partitions += 1
                state = states.get(TopicPartition(topic.name, p))
                if topic.name not in deleting and (state is None or state.leader not in live):
                    offline += 1
        return offline, partitions, len(topics)

    # -- reading ZooKeeper -----------------------------------------------------------

    async def _read_brokers(self) -> dict[int, LiveBroker]:
        live: dict[int, LiveBroker] = {}
        for child in await self.zk.get_children(zd.BROKER_IDS_PATH):
            try:
                broker_id = int(child)
                data, stat = await self.zk.get(zd.broker_path(broker_id))
                reg = zd.decode_broker_registration(broker_id, data)
            except (ValueError, ZkDataError, ZkNoNodeError) as exc:
                log.warning("controller: skipping broker registration %r: %s", child, exc)
                continue
            listener = self.settings.inter_broker.listener
            reachable = next((e for e in reg.endpoints if e.listener == listener), None)
            if reachable is None:
                log.warning(
                    "controller: broker %d registered no %s listener (the inter-broker "
                    "listener); skipped",
                    broker_id,
                    listener,
                )
                continue
            live[broker_id] = LiveBroker(
                broker_id,
                stat.czxid,
                reachable.host,
                reachable.port,
                reg.rack,
                tuple((e.listener, e.host, e.port, e.security_protocol) for e in reg.endpoints),
                tuple((f.name, f.min_version, f.max_version) for f in reg.features),
            )
        return live

    async def _read_topic(self, name: str) -> TopicAssignment | None:
        try:
            data, _ = await self.zk.get(zd.topic_path(name))
        except ZkNoNodeError:
            return None
        return _topic_assignment(name, data)

    async def _read_topics(self, names: Sequence[str]) -> list[TopicAssignment]:
        """The assignments of the topics ``names`` that exist and can be read, read together
        (a few multiRead requests, not one round trip each)."""
        found = await self.zk.get_many(
            [zd.topic_path(name) for name in names], batch=TOPIC_READ_BATCH
        )
        topics = []
        for name, got in zip(names, found, strict=True):
            topic = None if got is None else _topic_assignment(name, got[0])
            if topic is not None:
                topics.append(topic)
        return topics

    async def _read_states(self, topics: Iterable[TopicAssignment]) -> None:
        """Reads the state of every partition of ``topics`` into the context, all together (a
        controller taking over thousands of partitions waits a few round trips, not
        thousands)."""
        wanted = [
            (TopicPartition(topic.name, p), replicas)
            for topic in topics
            for p, replicas in topic.partitions.items()
        ]
        found = await self.zk.get_many(
            [zd.partition_state_path(tp.topic, tp.partition) for tp, _ in wanted]
        )
        for (tp, replicas), got in zip(wanted, found, strict=True):
            if got is None:
                continue
            try:
                state = zd.decode_partition_state(got[0], got[1].version)
            except ZkDataError as exc:
                log.warning("controller: unreadable state of %s: %s", tp, exc)
                continue
            self.ctx.states[tp] = state.to_partition_state(replicas)

    # -- events ------------------------------------------------------------------

    async def _startup(self) -> None:
        timer = _PhaseTimer()
        self.ctx.live = await self._read_brokers()
        try:
            await ensure_feature_znode(self.zk, self.epoch, self._broker_support())
        except ZkMultiError as exc:  # /feature written meanwhile (by whom, it is theirs)
            log.warning("controller %d: /feature left as found: %s", self.ctx.controller_id, exc)
        timer.lap("brokers and features")
        found = await self._read_topics(await self.zk.get_children(zd.TOPICS_PATH))
        for topic in found:
            self.ctx.topics[topic.name] = topic
        timer.lap("topics")
        await self._read_states(found)
        timer.lap("partition states")
        # Each topic's watch, in rounds of requests in flight together.
        for start in range(0, len(found), STARTUP_WATCH_BATCH):
            batch = found[start : start + STARTUP_WATCH_BATCH]
            await asyncio.gather(*(self._follow_topic(t.name) for t in batch))
        timer.lap("topic watches")
        for b in self.ctx.live.values():
            self.channel.add_broker(b)
        self._send_update_metadata(self.ctx.live, list(self.ctx.partitions()))
        for b in self.ctx.live.values():
            self._send_leader_and_isr_to(b, self._served_by(b.broker_id))
        timer.lap("orders queued")
        await self._bring_online(self.ctx.offline_partitions())
        timer.lap("offline elections")
        # Brokers that died before this controller started (a previous controller may
        # not have recorded it): their replicas leave the ISR, their partitions with no
        # one to elect go without a leader (in a new leader epoch), as for brokers
        # that leave later.
        dead = {r for tp in self.ctx.states for r in self.ctx.replicas(tp)} - set(self.ctx.live)
        if dead:
            self._announce(await self._write(self.ctx.plan_remove_from_isr(dead)))
        timer.lap("dead replicas out of the ISR")
        await self._deletions_changed()
        await self._preferred_election_requested()
        # Reassignments asked for through ZooKeeper while no controller was there, then
        # those in progress (their topics' znodes list them): each goes on.
        started = await self._zk_reassignment_requested()
        await self._resume_reassignments(lambda tp, _a: tp not in started)
        timer.lap("admin requests")
        log.info(
            "controller %d: took over %d topics, %d partitions (%d with a state) in %s",
            self.ctx.controller_id,
            len(self.ctx.topics),
            sum(len(t.partitions) for t in self.ctx.topics.values()),
            len(self.ctx.states),
            timer,
        )

    async def _brokers_changed(self) -> None:
        now = await self._read_brokers()
        joined = {i: b for i, b in now.items() if self.ctx.live.get(i) != b}
        # (A broker that restarted between two reads has a new epoch: it joins again.)
        left = [i for i in self.ctx.live if i not in now]
        self.ctx.live = now
        # Gone or registered again: no longer shutting down (Kafka forgets it the same way).
        self.ctx.shutting_down.difference_update([*left, *joined])
        for i in left:
            self.channel.remove_broker(i)
        for b in joined.values():
            self.channel.add_broker(b)
        if left:
            log.info("controller: brokers %s left", sorted(left))
            leaderless = [tp for tp in self.ctx.offline_partitions() if tp in self.ctx.states]
            unclean = await self._unclean_policy(leaderless)
            planned = self.ctx.plan_offline_elections(leaderless, unclean)
            written = await self._write(planned)
            written += await self._write(self.ctx.plan_remove_from_isr(left))
            self._announce(written)
            # Every broker learns they are gone, also when no state changed (as Kafka
            # does): clients stop being sent to them, and their replicas show offline.
            changed = {t.tp for t in written}
            offline = [tp for tp in self.ctx.partitions_on(left) if tp not in changed]
            self._send_update_metadata(self.ctx.live, offline)
        if joined:
            log.info("controller: brokers %s joined", sorted(joined))
            # Everything to the new brokers; the others learn of them.
            everything = list(self.ctx.partitions())
            self._send_update_metadata(joined, everything)
            others = {i: b for i, b in now.items() if i not in joined}
            self._send_update_metadata(others, [])
            for b in joined.values():
                self._send_leader_and_isr_to(b, self._served_by(b.broker_id))
                # Deletions waiting for this broker's replicas go on.
                for name, undeleted in self._undeleted.items():
                    theirs = [tp for r, tp in undeleted if r == b.broker_id]
                    self._send_stop_replicas(b, name, theirs)
            await self._bring_online(self.ctx.offline_partitions())
            # Reassignments moving replicas to them go on (Kafka's resumption).
            await self._resume_reassignments(lambda _tp, a: bool(set(a.target) & joined.keys()))

    def _served_by(self, broker_id: int) -> list[TopicPartition]:
        """The partitions a broker should serve now: its replicas with a state, but not
        those of topics being deleted."""
        return [
            tp
            for tp in self.ctx.partitions_on([broker_id])
            if tp in self.ctx.states and tp.topic not in self.ctx.deleting
        ]

    async def _topics_changed(self) -> None:
        names = sorted(set(await self.zk.get_children(zd.TOPICS_PATH)))
        created: list[TopicPartition] = []
        new: list[TopicAssignment] = []
        # Every topic read together (a few multiRead requests, not a round trip each).
        for topic in await self._read_topics(names):
            name = topic.name
            known = self.ctx.topics.get(name)
            if known is not None and known.topic_id == topic.topic_id:
                added = [p for p in topic.partitions if p not in known.partitions]
                known.partitions.update({p: topic.partitions[p] for p in added})
                created += [TopicPartition(name, p) for p in added]
                continue
            if known is not None:
                continue  # a topic made again under the same name: its deletion comes first
            self.ctx.topics[name] = topic
            new.append(topic)
        # The new topics' states (a previous controller may have written some) and watches.
        await self._read_states(new)
        await asyncio.gather(*(self._follow_topic(t.name) for t in new))
        for topic in new:
            fresh = [TopicPartition(topic.name, p) for p in topic.partitions]
            created += [tp for tp in fresh if tp not in self.ctx.states]
        if created:
            log.info("controller: %d new partitions", len(created))
            await self._bring_online(created)

    async def _follow_topic(self, name: str) -> None:
        if name not in self._topic_watches:
            changed = self._queue(lambda: self._topic_modified(name))
            self._topic_watches[name] = await self.zk.watch(zd.topic_path(name), changed)

    async def _topic_modified(self, name: str) -> None:
        """A topic's assignment changed: partitions added to it get their first states.
        Other changes are ignored, as Kafka ignores them: replicas move through a
        reassignment (AlterPartitionReassignments or /admin/reassign_partitions), and the
        controller's own writes of the znode are known already."""
        known = self.ctx.topics.get(name)
        topic = await self._read_topic(name)
        if known is None or topic is None or topic.topic_id != known.topic_id:
            return
        if name in self.ctx.deleting:
            return
        added = {p: r for p, r in topic.partitions.items() if p not in known.partitions}
        moved = [
            p
            for p, r in topic.partitions.items()
            if p in known.partitions and r != known.partitions[p]
        ]
        if moved:
            log.warning(
                "controller: %s: replicas of partitions %s changed in ZooKeeper; ignored "
                "(replicas move through a partition reassignment)",
                name,
                moved,
            )
        # A reassignment in progress whose adding/removing lists a writer dropped (one
        # that rewrote the znode from the replicas alone): written back, so that a
        # controller elected later still knows the replicas it started from.
        for p in known.partitions:
            tp = TopicPartition(name, p)
            moving = self.ctx.assignment(tp)
            lists = (topic.adding.get(p, []), topic.removing.get(p, []))
            if (
                p not in moved
                and moving.moving
                and lists != (known.adding.get(p, []), known.removing.get(p, []))
            ):
                log.warning(
                    "controller: %s: its reassignment's lists were overwritten; restoring them", tp
                )
                await self._write_assignment(tp, moving)
        if added:
            known.partitions.update(added)
            log.info("controller: %s: %d partitions added", name, len(added))
            await self._bring_online([TopicPartition(name, p) for p in sorted(added)])

    # -- topic deletion --------------------------------------------------------------------

    async def _deletions_changed(self) -> None:
        for name in sorted(await self.zk.get_children(zd.DELETE_TOPICS_PATH)):
            if name in self.ctx.deleting:
                continue
            if name not in self.ctx.topics:
                # Nothing (left) to delete: the request is done.
                log.info("controller: deletion of unknown topic %r dropped", name)
                await self._delete_quietly(zd.delete_topic_path(name))
                continue
            log.info("controller: deleting topic %s", name)
            self.ctx.deleting.add(name)
            tps = [tp for tp in self.ctx.partitions() if tp.topic == name]
            self._undeleted[name] = {(r, tp) for tp in tps for r in self.ctx.replicas(tp)}
            # Clients stop seeing the topic (leader -2 in every broker's cache) ...
            self._send_update_metadata(self.ctx.live, tps, frozenset({name}))
            # ... and each live replica stops, then deletes its log.
            for b in self.ctx.live.values():
                theirs = [tp for r, tp in self._undeleted[name] if r == b.broker_id]
                self._send_stop_replicas(b, name, theirs)
            if not self._undeleted[name]:
                await self._finish_deletion(name)

    def _send_stop_replicas(self, broker: LiveBroker, name: str, tps: list[TopicPartition]) -> None:
        """The replicas of a topic being deleted stop, then delete their logs."""
        if not tps:
            return
        broker_id = broker.broker_id

        def deleted(response: object) -> None:
            done = [
                TopicPartition(e.topic_name, e.partition_index)
                for e in getattr(response, "partition_errors", [])
                if e.error_code == 0
            ]
            if getattr(response, "error_code", 0) == 0 and done:
                self._events.put_nowait(lambda: self._replicas_deleted(name, broker_id, done))

        self._send_stop_replica(broker, tps, delete=False)
        self._send_stop_replica(broker, tps, delete=True, on_response=deleted)

    def _send_stop_replica(
        self,
        broker: LiveBroker,
        tps: list[TopicPartition],
        delete: bool,
        leader_epochs: Mapping[TopicPartition, int] | None = None,
        on_response: Callable[[Any], None] | None = None,
    ) -> None:
        if not tps:
            return
        ctx, epoch = self.ctx, broker.epoch
        self.channel.send(
            broker.broker_id,
            ApiKey.STOP_REPLICA,
            requests.STOP_REPLICA_VERSION,
            lambda: requests.stop_replica(ctx, tps, epoch, delete, leader_epochs),
            on_response,
        )

    async def _replicas_deleted(self, name: str, broker_id: int, tps: list[TopicPartition]) -> None:
        undeleted = self._undeleted.get(name)
        if undeleted is None:
            return
        undeleted.difference_update((broker_id, tp) for tp in tps)
        if not undeleted:
            await self._finish_deletion(name)

    async def _finish_deletion(self, name: str) -> None:
        """Every replica is gone: the topic's znodes go (fenced), then the topic."""
        topic = self.ctx.topics[name]
        ops: list[DeleteOp] = []
        for p in topic.partitions:
            ops.append(DeleteOp(zd.partition_state_path(name, p)))
            ops.append(DeleteOp(zd.partition_path(name, p)))
        ops.append(DeleteOp(zd.partitions_path(name)))
        ops.append(DeleteOp(zd.topic_path(name)))
        existing = [op for op in ops if await self.zk.exists(op.path) is not None]
        if existing:
            await fenced_multi(self.zk, self.epoch, existing)
        await self._delete_quietly(zd.topic_config_path(name))
        await self._delete_quietly(zd.delete_topic_path(name))
        for p in topic.partitions:
            self.ctx.states.pop(TopicPartition(name, p), None)
        del self.ctx.topics[name]
        watch = self._topic_watches.pop(name, None)
        if watch is not None:
            watch.cancel()  # type: ignore[attr-defined]
        self.ctx.deleting.discard(name)
        self._undeleted.pop(name, None)
        log.info("controller: topic %s deleted", name)

    async def _delete_quietly(self, path: str) -> None:
        with contextlib.suppress(ZkNoNodeError):
            await self.zk.delete(path)

    # -- controlled shutdown ----------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        """A broker about to stop asks to hand its work over (ControlledShutdown): the
        partitions it leads get other leaders from their ISR, it leaves the ISR of those
        it follows and stops fetching them, and it is not elected anywhere until it
        registers again. Returns the replicated partitions it still leads (none had
        another live ISR member, or a write lost a race): it asks again later.

        Refused with STALE_BROKER_EPOCH for an epoch older than its registration's,
        BROKER_NOT_AVAILABLE for a broker not registered, NOT_CONTROLLER once this
        controller stopped.
        """
        return await self._ask(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        known = self.ctx.live.get(broker_id)
        if known is None or broker_epoch > known.epoch:
            # Perhaps registered (again) since the brokers were last read (that event is
            # queued): read them now rather than refuse.
            await self._brokers_changed()
            known = self.ctx.live.get(broker_id)
        if known is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
        if broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < known.epoch:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id}'s epoch {broker_epoch} is older than its registration's "
                f"({known.epoch})",
            )
        log.info("controller: controlled shutdown of broker %d", broker_id)
        self.ctx.shutting_down.add(broker_id)
        plan = self.ctx.plan_controlled_shutdown(broker_id)
        # The leader that steps down hears of its successor: it follows it until it stops.
        self._announce(await self._write(plan.moves), to_shutting_down=True)
        # The partitions it follows: it stops fetching (its log stays), then leaves the ISR.
        epochs = {tp: self.ctx.states[tp].leader_epoch for tp in plan.followed}
        self._send_stop_replica(known, plan.followed, delete=False, leader_epochs=epochs)
        self._announce(await self._write(plan.isr_removals))
        remaining = self.ctx.replicated_leaders_on(broker_id)
        if remaining:
            log.info(
                "controller: broker %d still leads %d partitions: %s",
                broker_id,
                len(remaining),
                sorted(remaining),
            )
        return remaining

    # -- leader elections ------------------------------------------------------------------

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition], kind: ElectionType = ElectionType.PREFERRED
    ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders: each partition's outcome, None when a leader was elected.

        PREFERRED moves leadership to the first replica if it is live and in the ISR
        (PREFERRED_LEADER_NOT_AVAILABLE otherwise); UNCLEAN elects a leader for a
        partition without a live one, from outside the ISR if need be
        (ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live). A partition that
        needs no election gets ELECTION_NOT_NEEDED, an unknown one
        UNKNOWN_TOPIC_OR_PARTITION, one of a topic being deleted INVALID_TOPIC_EXCEPTION.
        """
        wanted = set(partitions)
        return await self._ask(lambda: self._elect(wanted, kind, allow_unclean=True))

    async def elect_preferred_leaders(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaError | None]:
        return await self.elect_leaders(partitions, ElectionType.PREFERRED)

    async def _elect(
        self, tps: set[TopicPartition], kind: ElectionType, allow_unclean: bool
    ) -> dict[TopicPartition, KafkaError | None]:
        ctx = self.ctx
        results: dict[TopicPartition, KafkaError | None] = {}
        electable = []
        for tp in sorted(tps):
            replicas = ctx.replicas(tp)
            state = ctx.states.get(tp)
            if not replicas:
                results[tp] = KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                )
            elif tp.topic in ctx.deleting:
                results[tp] = KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted"
                )
            elif state is not None and (
                state.leader == replicas[0]
                if kind is ElectionType.PREFERRED
                else ctx.is_electable(state.leader)
            ):
                results[tp] = KafkaError(ErrorCode.ELECTION_NOT_NEEDED)
            else:
                electable.append(tp)
        if kind is ElectionType.PREFERRED:
            planned = ctx.plan_preferred_elections(electable)
            failed = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        else:
            planned = ctx.plan_offline_elections(electable, lambda _topic: allow_unclean)
            failed = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        written = await self._write(planned)
        self._announce(written)
        elected = {t.tp for t in written}
        for tp in electable:
            results[tp] = (
                None if tp in elected else KafkaError(failed, f"no leader elected for {tp}")
            )
        return results

    async def _preferred_election_requested(self) -> None:
        """``/admin/preferred_replica_election`` (how tools older than ElectLeaders ask,
        through ZooKeeper): its partitions get preferred elections, then the znode goes."""
        path = zd.PREFERRED_REPLICA_ELECTION_PATH
        try:
            data, _ = await self.zk.get(path)
        except ZkNoNodeError:
            return
        try:
            tps = zd.decode_preferred_replica_election(data)
        except ZkDataError as exc:
            # Kafka would leave it and stop seeing new requests; dropped instead.
            log.warning("controller: dropping unreadable %s: %s", path, exc)
            tps = frozenset()
        if tps:
            # (Unclean elections are only ever asked for through ElectLeaders.)
            results = await self._elect(set(tps), ElectionType.PREFERRED, allow_unclean=False)
            for tp, error in sorted(results.items()):
                if error is not None and error.code is not ErrorCode.ELECTION_NOT_NEEDED:
                    log.info("controller: preferred election of %s: %s", tp, error)
        try:
            await fenced_multi(self.zk, self.epoch, [DeleteOp(path)])
        except ZkMultiError as exc:
            if not isinstance(exc.cause, ZkNoNodeError):
                raise

    async def rebalance_leaders(self) -> list[TopicPartition]:
        """The automatic leader rebalance, now: returns the partitions that moved."""
        return await self._ask(self._rebalance_leaders)

    async def _rebalance_leaders(self) -> list[TopicPartition]:
        candidates = self.ctx.imbalanced_partitions(
            self.settings.leader_imbalance_per_broker_percentage
        )
        if not candidates:
            return []
        written = await self._write(self.ctx.plan_preferred_elections(candidates))
        self._announce(written)
        log.info("controller: leader rebalance moved %d of %d", len(written), len(candidates))
        return [t.tp for t in written]

    async def _rebalance_periodically(self) -> None:
        delay = self.settings.first_imbalance_check_delay_s
        while True:
            await asyncio.sleep(delay)
            delay = self.settings.leader_imbalance_check_interval_s
            try:
                await self.rebalance_leaders()
            except KafkaError as exc:
                if exc.code is ErrorCode.NOT_CONTROLLER:
                    return
                # (Logged by the event loop; the next check comes all the same.)

    # -- ISR changes from leaders -----------------------------------------------------------

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Iterable[IsrChange], version: int = 3
    ) -> list[IsrAnswer]:
        """AlterPartition: the ISR changes a partition leader asks for, one answer per
        change in order (see `kbroker.controller.isr_changes` for the codes). Those
        accepted are written (fenced by the controller epoch and the znode version the
        leader named) and answered with the new state, whose version is the partition
        epoch now; every live broker then gets the states of the partitions asked about
        (UpdateMetadata; no LeaderAndIsr: the leader has its answer, and the followers'
        part is unchanged).

        Refused as a whole with STALE_BROKER_EPOCH for a broker that is not registered
        or is registered under another epoch, NOT_CONTROLLER once this controller stopped.
        """
        wanted = list(changes)
        return await self._ask(
            lambda: self._alter_partition(broker_id, broker_epoch, wanted, version)
        )

    async def _alter_partition(
        self, broker_id: int, broker_epoch: int, changes: list[IsrChange], version: int
    ) -> list[IsrAnswer]:
        known = await self._registration(broker_id, broker_epoch)
        if known is None or broker_epoch != known.epoch:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} in epoch {broker_epoch} is not registered"
                + ("" if known is None else f" (its registration's epoch is {known.epoch})"),
            )
        answers: list[IsrAnswer] = []
        planned: dict[int, Transition] = {}  # index in answers -> the write it waits for
        asked: list[TopicPartition] = []
        for change in changes:
            tp = resolve(self.ctx, change)
            if isinstance(tp, ErrorCode):
                answers.append(IsrAnswer(change, tp))
                continue
            if tp in asked:  # named twice: the repeat is refused (Kafka keeps the last)
                answers.append(IsrAnswer(change, ErrorCode.INVALID_REQUEST, tp))
                continue
            asked.append(tp)
            plan = plan_isr_change(self.ctx, broker_id, version, tp, change)
            if isinstance(plan, ErrorCode):
                if plan is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    log.info(
                        "controller: ISR %s of %s from broker %d refused: %s",
                        list(change.isr),
                        tp,
                        broker_id,
                        plan.name,
                    )
                answers.append(IsrAnswer(change, plan, tp))
            elif isinstance(plan, PartitionState):
                answers.append(IsrAnswer(change, ErrorCode.NONE, tp, plan))
            else:
                planned[len(answers)] = plan
                answers.append(IsrAnswer(change, ErrorCode.NONE, tp))
        written = {t.tp for t in await self._write(list(planned.values()))}
        # An ISR grown may complete a reassignment: checked once the leader has its answer.
        moving = sorted(tp for tp in written if self.ctx.assignment(tp).moving)
        if moving:
            self._events.put_nowait(lambda: self._reassignments_progressed(moving))
        for i, t in planned.items():
            change = answers[i].change
            if t.tp in written:
                answers[i] = IsrAnswer(change, ErrorCode.NONE, t.tp, self.ctx.states[t.tp])
            else:  # changed under us since it was read
                answers[i] = IsrAnswer(change, ErrorCode.INVALID_UPDATE_VERSION, t.tp)
        if asked:
            self._send_update_metadata(self.ctx.live, asked)
        return answers

    # -- partition reassignment (KIP-455) ---------------------------------------------------

    async def _registration(self, broker_id: int, broker_epoch: int) -> LiveBroker | None:
        """The live broker `broker_id` as registered now (None: not registered), for a
        request it sent in `broker_epoch`."""
        known = self.ctx.live.get(broker_id)
        if known is None or broker_epoch > known.epoch:
            # Perhaps registered (again) since the brokers were last read (that event is
            # queued): read them now rather than refuse.
            await self._brokers_changed()
            known = self.ctx.live.get(broker_id)
        return known

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> zd.ProducerIdBlock:
        """AllocateProducerIds: the next block of producer ids for a live broker, reserved in
        ``/latest_producer_id_block`` as brokers that write it themselves do. Refused with
        BROKER_ID_NOT_REGISTERED for a broker that is not registered, STALE_BROKER_EPOCH for
        one registered under another epoch, NOT_CONTROLLER once this controller stopped."""
        return await self._ask(lambda: self._allocate_producer_ids(broker_id, broker_epoch))

    async def _allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> zd.ProducerIdBlock:
        known = await self._registration(broker_id, broker_epoch)
        if known is None:
            raise KafkaError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered"
            )
        if broker_epoch != known.epoch:
            raise KafkaError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} asked in epoch {broker_epoch}; "
                f"its registration's epoch is {known.epoch}",
            )
        try:
            return await allocate_producer_id_block(self.zk, broker_id)
        except ProducerIdBlockError as exc:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from exc

    # -- features ---------------------------------------------------------------------

    def _broker_support(self) -> dict[int, dict[str, tuple[int, int]]]:
        return {b.broker_id: b.supported for b in self.ctx.live.values()}

    async def update_features(self, updates: list[FeatureUpdate], validate_only: bool) -> int:
        """UpdateFeatures: ``updates`` checked against /feature and every live broker's
        supported levels, then written (unless ``validate_only``); the finalized epoch. Refused
        with INVALID_UPDATE_VERSION (the whole request, Kafka 4.1's words)."""
        return await self._ask(lambda: self._update_features(updates, validate_only))

    async def _update_features(self, updates: list[FeatureUpdate], validate_only: bool) -> int:
        try:
            found, version = await read_feature_znode(self.zk)
        except ZkDataError as exc:
            raise KafkaError(ErrorCode.FEATURE_UPDATE_FAILED, str(exc)) from None
        current = dict(found.features) if found is not None and found.enabled else {}
        try:
            levels = plan_update(updates, current, self.ctx.controller_id, self._broker_support())
        except UpdateRefused as exc:
            raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, str(exc)) from None
        if validate_only or (levels == current and found is not None and found.enabled):
            return version
        try:
            written = await write_feature_znode(self.zk, self.epoch, levels, version)
        except ZkMultiError as exc:  # /feature changed since it was read (a foreign writer)
            raise KafkaError(ErrorCode.FEATURE_UPDATE_FAILED, str(exc)) from None
        log.info("controller %d: finalized %s (epoch %d)", self.ctx.controller_id, levels, written)
        return written

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments: each partition's outcome, None once its reassignment
        started (or, moving nowhere, completed). A target of None cancels the partition's
        reassignment: its replicas go back to those it had. Refusals carry Kafka's codes
        (see `kbroker.controller.reassignment.plan_request`); a partition asked for here
        leaves /admin/reassign_partitions (the latest request wins)."""
        wanted = dict(targets)
        return await self._ask(lambda: self._alter_reassignments(wanted))

    async def _alter_reassignments(
        self, targets: dict[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        results: dict[TopicPartition, KafkaError | None] = {}
        planned: dict[TopicPartition, Assignment] = {}
        for tp, target in targets.items():
            plan = plan_request(
                self.ctx.assignment(tp), target, self.ctx.live.keys(), tp.topic in self.ctx.deleting
            )
            if isinstance(plan, KafkaError):
                results[tp] = plan
            else:
                planned[tp] = plan
        await self._drop_from_zk_reassignment(lambda tp, _replicas: tp in planned)
        for tp, assignment in planned.items():
            results[tp] = await self._start_reassignment(tp, assignment)
        return results

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, Assignment]:
        """ListPartitionReassignments: the reassignments in progress (of ``partitions``, or
        all), each partition's replicas and those being added and removed."""
        wanted = None if partitions is None else list(partitions)

        async def work() -> dict[TopicPartition, Assignment]:
            tps = self.ctx.reassigning() if wanted is None else wanted
            found = {tp: self.ctx.assignment(tp) for tp in tps}
            return {tp: a for tp, a in found.items() if a.moving}

        return await self._ask(work)

    async def _start_reassignment(
        self, tp: TopicPartition, assignment: Assignment
    ) -> KafkaError | None:
        """`_reassign`, with a failure (ZooKeeper away, say) as this partition's
        UNKNOWN_SERVER_ERROR; a deposed controller stops."""
        try:
            await self._reassign(tp, assignment)
        except (ControllerMovedError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("controller: reassigning %s to %s failed", tp, list(assignment.target))
            return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc) or repr(exc))
        return None

    async def _reassign(self, tp: TopicPartition, assignment: Assignment) -> None:
        """Moves ``tp`` toward ``assignment`` (Kafka's onPartitionReassignment). A new one is
        written to the topic's znode first (the only place ORS is kept, so a controller
        elected meanwhile carries on), then the replicas it no longer wants go. Then,
        while a target replica is missing from the ISR, the partition takes a new leader
        epoch and every replica hears of it (LeaderAndIsr: the replicas added open their
        logs and fetch from the leader); once none is, the reassignment completes."""
        current = self.ctx.assignment(tp)
        if assignment != current:
            await self._write_assignment(tp, assignment)
            self.ctx.set_assignment(tp, assignment)
            log.info(
                "controller: %s: replicas %s, adding %s, removing %s (were %s)",
                tp,
                list(assignment.replicas),
                list(assignment.adding),
                list(assignment.removing),
                list(current.replicas),
            )
            dropped = [r for r in current.replicas if r not in assignment.replicas]
            if dropped:
                await self._drop_replicas(tp, dropped)
        state = self.ctx.states.get(tp)
        if assignment.moving and (state is None or not assignment.is_complete(state.isr)):
            why = f"reassignment to {list(assignment.target)}"
            bumped = await self._write_retrying(lambda: self.ctx.plan_epoch_bump(tp, why))
            if bumped is not None:
                self._announce([bumped], new_on=assignment.adding)
        else:
            await self._complete_reassignment(tp)

    async def _complete_reassignment(self, tp: TopicPartition) -> None:
        """Every target replica is in the ISR: the partition keeps only them. A leader that
        is not one of them (or cannot lead) hands over to the first that can, the removed
        replicas leave the ISR (one new leader epoch for both), they stop and delete their
        logs (StopReplica), and the topic's znode lists the target replicas alone. When no
        target replica can lead now, it stays in progress (Kafka would go on, leaving the
        partition offline) and is tried again when a broker joins or the ISR changes."""
        moving = self.ctx.assignment(tp)
        done = Assignment(moving.target)

        def plan() -> Transition | None:
            state = self.ctx.states.get(tp)
            if state is None or not moving.is_complete(state.isr):
                return None
            return self.ctx.plan_reassignment_completion(tp, moving.removing)

        self.ctx.set_assignment(tp, done)  # the state written next lists the target replicas
        written = None
        try:
            written = await self._write_retrying(plan)
            if written is None:
                log.info("controller: %s: reassignment to %s waits", tp, list(done.replicas))
                return
            self._announce([written])  # to the target replicas
            epochs = {tp: written.state.leader_epoch}
            for r in moving.removing:
                if self.ctx.is_live(r):
                    self._send_stop_replica(
                        self.ctx.live[r], [tp], delete=True, leader_epochs=epochs
                    )
            await self._write_assignment(tp, done)
        finally:
            if written is None or self.ctx.assignment(tp) != done:
                self.ctx.set_assignment(tp, moving)
        try:
            await self._drop_from_zk_reassignment(
                lambda other, replicas: other == tp and tuple(replicas) == done.replicas
            )
        finally:
            self._send_update_metadata(self.ctx.live, [tp])
        log.info("controller: %s: reassignment to %s complete", tp, list(done.replicas))

    async def _drop_replicas(self, tp: TopicPartition, dropped: list[int]) -> None:
        """Replicas a reassignment added and no longer wants (replaced or cancelled): they
        leave the ISR (and the lead) in a new leader epoch, then stop and delete their logs."""
        written = await self._write_retrying(lambda: self.ctx.plan_replicas_dropped(tp, dropped))
        if written is not None:
            self._announce([written])
        state = self.ctx.states.get(tp)
        epochs = {tp: -1 if state is None else state.leader_epoch}
        for r in dropped:
            if self.ctx.is_live(r):
                self._send_stop_replica(self.ctx.live[r], [tp], delete=True, leader_epochs=epochs)

    async def _reassignments_progressed(self, tps: list[TopicPartition]) -> None:
        """ISRs changed: the reassignments whose target replicas are all in it complete."""
        for tp in tps:
            moving = self.ctx.assignment(tp)
            state = self.ctx.states.get(tp)
            if tp.topic in self.ctx.deleting or state is None or not moving.moving:
                continue
            if moving.is_complete(state.isr):
                log.info(
                    "controller: %s: target replicas %s are all in the ISR %s",
                    tp,
                    list(moving.target),
                    state.isr,
                )
                await self._complete_reassignment(tp)

    async def _resume_reassignments(
        self, which: Callable[[TopicPartition, Assignment], bool]
    ) -> None:
        """The reassignments in progress that ``which`` picks go on (`_reassign` again)."""
        for tp in self.ctx.reassigning():
            assignment = self.ctx.assignment(tp)
            if which(tp, assignment):
                log.info(
                    "controller: %s: resuming its reassignment to %s", tp, list(assignment.target)
                )
                await self._start_reassignment(tp, assignment)

    async def _write_retrying(
        self, plan: Callable[[], Transition | None], attempts: int = 3
    ) -> Transition | None:
        """Writes what ``plan`` plans, planning again from the state read back when a leader's
        ISR change won the race; the transition written, or None."""
        for _ in range(attempts):
            planned = plan()
            if planned is None:
                return None
            written = await self._write([planned])
            if written:
                return written[0]
        return None

    async def _write_assignment(self, tp: TopicPartition, assignment: Assignment) -> None:
        """Writes one partition's replica lists into its topic's znode (the other partitions
        as ZooKeeper has them, so partitions added meanwhile stay), fenced by the
        controller epoch and the znode's version."""
        path = zd.topic_path(tp.topic)
        topic = self.ctx.topics[tp.topic]
        for _ in range(5):
            data, stat = await self.zk.get(path)
            current = zd.decode_topic_assignment(data)
            if current.topic_id != topic.topic_id:
                raise ZkDataError(f"{path} names topic id {current.topic_id}, not {topic.topic_id}")
            parts = {a.partition: a for a in current.partitions}
            parts[tp.partition] = zd.ReplicaAssignment(
                tp.partition, assignment.replicas, assignment.adding, assignment.removing
            )
            updated = zd.TopicAssignment(tuple(parts[p] for p in sorted(parts)), current.topic_id)
            update = SetDataOp(path, zd.encode_topic_assignment(updated), stat.version)
            try:
                await fenced_multi(self.zk, self.epoch, [update])
                return
            except ZkMultiError as exc:
                if not isinstance(exc.cause, ZkBadVersionError):
                    raise
        raise ZkError(f"{path} kept changing while the assignment of {tp} was written")

    async def _zk_reassignment_changed(self) -> None:
        await self._zk_reassignment_requested()

    async def _zk_reassignment_requested(self) -> set[TopicPartition]:
        """``/admin/reassign_partitions`` (how tools before KIP-455 ask, through ZooKeeper),
        read once per creation as Kafka does: its partitions start moving (those refused
        leave it at once, the others when they complete; the znode goes with the last).
        Returns the partitions started."""
        path = zd.REASSIGN_PARTITIONS_PATH
        try:
            data, stat = await self.zk.get(path)
        except ZkNoNodeError:
            self._zk_reassignment_seen = None
            return set()
        if stat.czxid == self._zk_reassignment_seen:
            return set()
        self._zk_reassignment_seen = stat.czxid
        try:
            moves = zd.decode_partition_reassignment(data)
        except ZkDataError as exc:
            log.warning("controller: dropping unreadable %s: %s", path, exc)
            moves = {}
        started: set[TopicPartition] = set()
        refused: set[TopicPartition] = set()
        for tp, target in sorted(moves.items()):
            plan = plan_request(
                self.ctx.assignment(tp), target, self.ctx.live.keys(), tp.topic in self.ctx.deleting
            )
            error = (
                plan if isinstance(plan, KafkaError) else await self._start_reassignment(tp, plan)
            )
            if error is None:
                started.add(tp)
            else:
                log.warning(
                    "controller: reassignment of %s to %s refused: %s", tp, list(target), error
                )
                refused.add(tp)
        if refused or not moves:
            await self._drop_from_zk_reassignment(lambda tp, _replicas: tp in refused or not moves)
        return started

    async def _drop_from_zk_reassignment(
        self, drop: Callable[[TopicPartition, Sequence[int]], bool]
    ) -> None:
        """Takes the partitions ``drop`` picks out of ``/admin/reassign_partitions``, and the
        znode away once none is left (fenced by the controller epoch)."""
        path = zd.REASSIGN_PARTITIONS_PATH
        try:
            data, _ = await self.zk.get(path)
        except ZkNoNodeError:
            return
        try:
            moves = zd.decode_partition_reassignment(data)
        except ZkDataError:
            moves = {}
        kept = {tp: r for tp, r in moves.items() if not drop(tp, r)}
        if moves and len(kept) == len(moves):
            return
        if kept:
            op: SetDataOp | DeleteOp = SetDataOp(path, zd.encode_partition_reassignment(kept))
        else:
            op = DeleteOp(path)
        try:
            await fenced_multi(self.zk, self.epoch, [op])
        except ZkMultiError as exc:
            if not isinstance(exc.cause, ZkNoNodeError):
                raise

    # -- writing and telling -------------------------------------------------------------

    async def _bring_online(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        if not tps:
            return
        unclean = await self._unclean_policy(tps)
        planned = self.ctx.plan_offline_elections(tps, unclean)
        self._announce(await self._write(planned))
        if len(planned) < len(tps):
            elected = {t.tp for t in planned}
            left = sorted(tp for tp in tps if tp not in elected)
            log.info(
                "controller: %d partitions stay offline, no replica may lead (e.g. %s)",
                len(left),
                ", ".join(
                    f"{tp.dirname} (replicas {list(self.ctx.replicas(tp))}, unclean "
                    f"{'allowed' if unclean(tp.topic) else 'not allowed'})"
                    for tp in left[:3]
                ),
            )

    async def _unclean_policy(self, tps: Iterable[TopicPartition]) -> Callable[[str], bool]:
        """Whether each topic allows an unclean election, for the partitions of ``tps`` that
        would need one (no in-sync replica can lead): the topic's override as ZooKeeper has
        it, read now as Kafka's controller does (this broker may hold no replica of the
        topic, and then does not know its configs), else the broker's setting."""
        topics = set()
        for tp in tps:
            state = self.ctx.states.get(tp)
            if state is not None and not any(self.ctx.is_electable(r) for r in state.isr):
                topics.add(tp.topic)
        stored: dict[str, bool] = {}

        async def read(topic: str) -> str | None:
            try:
                return (await read_topic_configs(self.zk, topic)).get(UNCLEAN_ELECTION)
            except (ZkDataError, ZkNoNodeError) as exc:
                log.warning("controller: the configs of topic %s cannot be read: %s", topic, exc)
                return None

        # (All in flight together: a new controller may find thousands of such topics.)
        names = sorted(topics)
        for topic, value in zip(names, await asyncio.gather(*map(read, names)), strict=True):
            if value is None:
                continue
            try:
                stored[topic] = bool(topic_setting(UNCLEAN_ELECTION).parse(value))
            except ConfigError as exc:
                log.warning("controller: topic %s: %s; no unclean election", topic, exc)
                stored[topic] = False
        return lambda topic: stored.get(topic, self.allow_unclean(topic))

    async def _write(self, transitions: list[Transition]) -> list[Transition]:
        """Writes each transition's state (fenced); records and returns those written.

        Updates of existing states go in multis of up to `STATE_WRITE_BATCH` (each fenced by
        the controller epoch and every state's version: all of a batch or none), in flight
        together; a batch refused because a state changed meanwhile (a leader's ISR update)
        is written again one state at a time, so each stands or falls on its own."""
        updates = [i for i, t in enumerate(transitions) if not t.new]
        if len(updates) < 2:
            updates = []
        groups = [
            updates[i : i + STATE_WRITE_BATCH] for i in range(0, len(updates), STATE_WRITE_BATCH)
        ]
        groups += [[i] for i, t in enumerate(transitions) if t.new or not updates]
        results = await asyncio.gather(
            *(
                self._write_batch([transitions[i] for i in group])
                if len(group) > 1
                else self._write_alone(transitions[group[0]])
                for group in groups
            )
        )
        versions = {
            i: version
            for group, found in zip(groups, results, strict=True)
            for i, version in zip(group, found, strict=True)
        }
        written = []
        for i, t in enumerate(transitions):
            version = versions[i]
            if version is not None:
                self.ctx.apply(t, version)
                written.append(t)
        return written

    async def _write_batch(self, batch: list[Transition]) -> list[int | None]:
        """Writes the updated states of ``batch`` in one fenced multi; each one's znode version
        now, or None for those not written."""
        ops = [
            SetDataOp(
                zd.partition_state_path(t.tp.topic, t.tp.partition),
                zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(t.state)),
                t.state.version,
            )
            for t in batch
        ]
        try:
            stats = await fenced_multi(self.zk, self.epoch, ops)
        except ZkMultiError as exc:
            # Nothing of the batch was written: each state on its own (re-read if it changed).
            log.info(
                "controller: %d partition states not written together (%s); one at a time",
                len(batch),
                exc,
            )
            return list(await asyncio.gather(*(self._write_one(t) for t in batch)))
        versions: list[int | None] = []
        for t, stat in zip(batch, stats, strict=True):
            assert isinstance(stat, Stat)
            _log_written(t)
            versions.append(stat.version)
        return versions

    async def _write_alone(self, t: Transition) -> list[int | None]:
        return [await self._write_one(t)]

    async def _write_one(self, t: Transition) -> int | None:
        """Writes one transition's state; its znode's version now, or None if not written."""
        tp = t.tp
        data = zd.encode_partition_state(zd.LeaderAndIsr.from_partition_state(t.state))
        path = zd.partition_state_path(tp.topic, tp.partition)
        try:
            if t.new:
                await self.zk.ensure_path(zd.partition_path(tp.topic, tp.partition))
                await fenced_multi(self.zk, self.epoch, [CreateOp(path, data)])
                version = 0  # a znode is created at version 0
            else:
                update = SetDataOp(path, data, t.state.version)
                [stat] = await fenced_multi(self.zk, self.epoch, [update])
                assert isinstance(stat, Stat)
                version = stat.version
        except ZkMultiError as exc:
            # Changed under us (a leader's ISR update): read it again, plan again later.
            log.info("controller: %s not written (%s); re-reading its state", tp, exc)
            topic = self.ctx.topics.get(tp.topic)
            if topic is not None:
                await self._read_states([topic])
            return None
        _log_written(t)
        return version

    def _announce(
        self,
        written: list[Transition],
        to_shutting_down: bool = False,
        new_on: Collection[int] = (),
    ) -> None:
        """LeaderAndIsr to each live replica of the partitions written (to those of brokers
        shutting down only if ``to_shutting_down``; marked new to the brokers ``new_on``,
        replicas a reassignment adds); UpdateMetadata to every live broker."""
        if not written:
            return
        by_broker: dict[int, list[TopicPartition]] = {}
        for t in written:
            for r in self.ctx.replicas(t.tp):
                if self.ctx.is_electable(r) or (to_shutting_down and self.ctx.is_live(r)):
                    by_broker.setdefault(r, []).append(t.tp)
        new = frozenset(t.tp for t in written if t.new)
        for broker_id, tps in by_broker.items():
            fresh = frozenset(tps) if broker_id in new_on else new
            self._send_leader_and_isr_to(self.ctx.live[broker_id], tps, fresh)
        self._send_update_metadata(self.ctx.live, [t.tp for t in written])

    def _send_leader_and_isr_to(
        self,
        broker: LiveBroker,
        tps: list[TopicPartition],
        new: frozenset[TopicPartition] = frozenset(),
    ) -> None:
        if not tps:
            return
        ctx, epoch = self.ctx, broker.epoch
        self.channel.send(
            broker.broker_id,
            ApiKey.LEADER_AND_ISR,
            requests.LEADER_AND_ISR_VERSION,
            lambda: requests.leader_and_isr(ctx, tps, epoch, new),
        )

    def _send_update_metadata(
        self,
        brokers: dict[int, LiveBroker],
        tps: list[TopicPartition],
        deleting: frozenset[str] | None = None,
    ) -> None:
        ctx = self.ctx
        gone = frozenset(ctx.deleting) if deleting is None else deleting
        for b in brokers.values():
            epoch = b.epoch
            self.channel.send(
                b.broker_id,
                ApiKey.UPDATE_METADATA,
                requests.UPDATE_METADATA_VERSION,
                lambda epoch=epoch: requests.update_metadata(ctx, tps, epoch, gone),  # type: ignore[misc]
            )
