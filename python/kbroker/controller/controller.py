"""`Controller`: the work of the elected controller, one event at a time.

Elected (see `kbroker.cluster.controller`), the controller reads the cluster
from ZooKeeper into a `ControllerContext` and then follows it through
watches on ``/brokers/ids`` and ``/brokers/topics``. Each event is handled
to the end before the next (one task drains the queue), and each follows
one pattern: plan transitions from the context (no I/O), write them to
ZooKeeper fenced by the controller epoch and each state's version, record
what was written, and only then tell the brokers (LeaderAndIsr to the
partitions' replicas, UpdateMetadata to every live broker).

What it handles today: brokers joining (full metadata to them; their
partitions' orders; offline partitions elected) and leaving (their
partitions elected elsewhere from the ISR, or left without a leader;
dead replicas out of the ISR), new topics (first states), and topic
deletion (``/admin/delete_topics``: brokers stop and delete the replicas,
and the topic's znodes go once every replica confirmed, so a replica on a
dead broker is deleted when it is back). A write refused because another
controller was elected stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from kbroker.cluster import zk_data as zd
from kbroker.cluster.controller import ControllerEpoch, fenced_multi
from kbroker.cluster.errors import (
    ControllerMovedError,
    ZkDataError,
    ZkError,
    ZkMultiError,
    ZkNoNodeError,
)
from kbroker.cluster.zk import CreateOp, DeleteOp, SetDataOp, Stat, WatchEvent, ZkClient
from kbroker.controller import requests
from kbroker.controller.channel import ControllerChannel
from kbroker.controller.context import (
    ControllerContext,
    LiveBroker,
    TopicAssignment,
    Transition,
)
from kbroker.log import TopicPartition
from kbroker.protocol import ApiKey

log = logging.getLogger(__name__)

Event = Callable[[], Awaitable[None]]


class Controller:
    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        epoch: ControllerEpoch,
        allow_unclean: Callable[[str], bool] = lambda _topic: False,
        channel: ControllerChannel | None = None,
    ) -> None:
        self.zk = zk
        self.epoch = epoch
        self.ctx = ControllerContext(controller_id=broker_id, epoch=epoch.epoch)
        self.allow_unclean = allow_unclean
        self.channel = channel or ControllerChannel(broker_id)
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
        self._task = asyncio.ensure_future(self._run())
        self._events.put_nowait(self._startup)
        log.info("controller %d: started in epoch %d", self.ctx.controller_id, self.ctx.epoch)

    async def stop(self) -> None:
        self.stopped = True
        for watch in [*self._watches, *self._topic_watches.values()]:
            watch.cancel()  # type: ignore[attr-defined]
        self._watches.clear()
        self._topic_watches.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
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

    async def _run(self) -> None:
        while True:
            handler = await self._events.get()
            try:
                await handler()
            except ControllerMovedError as exc:
                log.warning("controller %d: %s; stepping down", self.ctx.controller_id, exc)
                self.moved.set()
                return
            except ZkError as exc:
                # ZooKeeper away: the watches re-deliver once it is back.
                log.warning("controller %d: ZooKeeper failed (%s)", self.ctx.controller_id, exc)
            except Exception:
                log.exception("controller %d: handling an event failed", self.ctx.controller_id)

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
            plain = reg.plaintext or (reg.endpoints[0] if reg.endpoints else None)
            if plain is None:
                log.warning("controller: broker %d registered no endpoint; skipped", broker_id)
                continue
            live[broker_id] = LiveBroker(
                broker_id,
                stat.czxid,
                plain.host,
                plain.port,
                reg.rack,
                tuple((e.listener, e.host, e.port, e.security_protocol) for e in reg.endpoints),
            )
        return live

    async def _read_topic(self, name: str) -> TopicAssignment | None:
        try:
            data, _ = await self.zk.get(zd.topic_path(name))
            assignment = zd.decode_topic_assignment(data)
        except ZkNoNodeError:
            return None
        except ZkDataError as exc:
            log.warning("controller: skipping topic %r: %s", name, exc)
            return None
        if assignment.topic_id is None:
            log.warning("controller: topic %r has no topic id; skipped", name)
            return None
        return TopicAssignment(name, assignment.topic_id, assignment.replicas())

    async def _read_states(self, topic: TopicAssignment) -> None:
        for p, replicas in topic.partitions.items():
            tp = TopicPartition(topic.name, p)
            try:
                data, stat = await self.zk.get(zd.partition_state_path(topic.name, p))
                state = zd.decode_partition_state(data, stat.version)
            except ZkNoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("controller: unreadable state of %s: %s", tp, exc)
                continue
            self.ctx.states[tp] = state.to_partition_state(replicas)

    # -- events ------------------------------------------------------------------

    async def _startup(self) -> None:
        self.ctx.live = await self._read_brokers()
        for name in await self.zk.get_children(zd.TOPICS_PATH):
            topic = await self._read_topic(name)
            if topic is not None:
                self.ctx.topics[name] = topic
                await self._read_states(topic)
                await self._follow_topic(name)
        for b in self.ctx.live.values():
            self.channel.add_broker(b)
        self._send_update_metadata(self.ctx.live, list(self.ctx.partitions()))
        for b in self.ctx.live.values():
            self._send_leader_and_isr_to(b, self._served_by(b.broker_id))
        await self._bring_online(self.ctx.offline_partitions())
        await self._deletions_changed()

    async def _brokers_changed(self) -> None:
        now = await self._read_brokers()
        joined = {i: b for i, b in now.items() if self.ctx.live.get(i) != b}
        # (A broker that restarted between two reads has a new epoch: it joins again.)
        left = [i for i in self.ctx.live if i not in now]
        self.ctx.live = now
        for i in left:
            self.channel.remove_broker(i)
        for b in joined.values():
            self.channel.add_broker(b)
        if left:
            log.info("controller: brokers %s left", sorted(left))
            planned = self.ctx.plan_offline_elections(
                [tp for tp in self.ctx.offline_partitions() if tp in self.ctx.states],
                self.allow_unclean,
            )
            written = await self._write(planned)
            written += await self._write(self.ctx.plan_remove_from_isr(left))
            self._announce(written)
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

    def _served_by(self, broker_id: int) -> list[TopicPartition]:
        """The partitions a broker should serve now: its replicas with a state, but not
        those of topics being deleted."""
        return [
            tp
            for tp in self.ctx.partitions_on([broker_id])
            if tp in self.ctx.states and tp.topic not in self.ctx.deleting
        ]

    async def _topics_changed(self) -> None:
        names = set(await self.zk.get_children(zd.TOPICS_PATH))
        created: list[TopicPartition] = []
        for name in sorted(names):
            topic = await self._read_topic(name)
            if topic is None:
                continue
            known = self.ctx.topics.get(name)
            if known is not None and known.topic_id == topic.topic_id:
                added = [p for p in topic.partitions if p not in known.partitions]
                known.partitions.update({p: topic.partitions[p] for p in added})
                created += [TopicPartition(name, p) for p in added]
                continue
            if known is not None:
                continue  # a topic made again under the same name: its deletion comes first
            self.ctx.topics[name] = topic
            await self._read_states(topic)
            await self._follow_topic(name)
            fresh = [TopicPartition(name, p) for p in topic.partitions]
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
        (Moving existing partitions is a reassignment, which is not handled yet.)"""
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
                "controller: %s: replicas of partitions %s changed; reassignment is not "
                "supported yet, ignored",
                name,
                moved,
            )
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
        if not tps:
            return
        ctx, epoch, broker_id = self.ctx, broker.epoch, broker.broker_id

        def deleted(response: object) -> None:
            done = [
                TopicPartition(e.topic_name, e.partition_index)
                for e in getattr(response, "partition_errors", [])
                if e.error_code == 0
            ]
            if getattr(response, "error_code", 0) == 0 and done:
                self._events.put_nowait(lambda: self._replicas_deleted(name, broker_id, done))

        for delete in (False, True):
            self.channel.send(
                broker_id,
                ApiKey.STOP_REPLICA,
                requests.STOP_REPLICA_VERSION,
                lambda delete=delete: requests.stop_replica(ctx, tps, epoch, delete),  # type: ignore[misc]
                deleted if delete else None,
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

    # -- writing and telling -------------------------------------------------------------

    async def _bring_online(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        if not tps:
            return
        written = await self._write(self.ctx.plan_offline_elections(tps, self.allow_unclean))
        self._announce(written)

    async def _write(self, transitions: list[Transition]) -> list[Transition]:
        """Writes each transition's state (fenced); records and returns those written."""
        versions = await asyncio.gather(*(self._write_one(t) for t in transitions))
        written = []
        for t, version in zip(transitions, versions, strict=True):
            if version is not None:
                self.ctx.apply(t, version)
                written.append(t)
        return written

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
                await self._read_states(topic)
            return None
        log.info(
            "controller: %s: leader %d, epoch %d, isr %s (%s)",
            tp,
            t.state.leader,
            t.state.leader_epoch,
            t.state.isr,
            t.why,
        )
        return version

    def _announce(self, written: list[Transition]) -> None:
        """LeaderAndIsr to each live replica of the partitions written; UpdateMetadata to all."""
        if not written:
            return
        by_broker: dict[int, list[TopicPartition]] = {}
        for t in written:
            for r in self.ctx.replicas(t.tp):
                if r in self.ctx.live:
                    by_broker.setdefault(r, []).append(t.tp)
        new = frozenset(t.tp for t in written if t.new)
        for broker_id, tps in by_broker.items():
            self._send_leader_and_isr_to(self.ctx.live[broker_id], tps, new)
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
