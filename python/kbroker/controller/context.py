"""`ControllerContext`: what the active controller knows of the cluster, and the changes
it plans from it.

The controller reads the cluster from ZooKeeper when it is elected and keeps
this copy current from the notifications it gets. Deciding what to change is
done here, without I/O: each planning method returns `Transition`s (a
partition's next state and why), which the controller then writes to
ZooKeeper (conditionally: fenced by its epoch and each state's version)
before it tells any broker. Only after a write succeeds does `apply` put
the new states in the context.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kbroker.controller import leader_election
from kbroker.controller.leader_election import Elected
from kbroker.controller.reassignment import Assignment
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LiveBroker:
    broker_id: int
    # The registration's creation id: a restarted broker has a new one (KIP-380).
    epoch: int
    host: str
    port: int
    rack: str | None = None
    # Every advertised listener: (listener name, host, port, security protocol name).
    endpoints: tuple[tuple[str, str, int, str], ...] = ()
    # The features its registration says it supports: (name, min level, max level).
    features: tuple[tuple[str, int, int], ...] = ()

    @property
    def supported(self) -> dict[str, tuple[int, int]]:
        return {name: (lo, hi) for name, lo, hi in self.features}


@dataclass(slots=True)
class TopicAssignment:
    name: str
    topic_id: uuid.UUID
    # partition -> replicas (the first is the preferred leader)
    partitions: dict[int, list[int]]
    # Partitions being reassigned -> the replicas being added and those being removed
    # (both listed in `partitions` until the reassignment completes).
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Transition:
    tp: TopicPartition
    state: PartitionState
    why: str
    # The partition has no state yet (its state node is created, not updated).
    new: bool = False
    unclean: bool = False


@dataclass(slots=True)
class ShutdownPlan:
    """What a controlled shutdown changes (see `ControllerContext.plan_controlled_shutdown`)."""

    # Partitions the broker leads, moved to another ISR member.
    moves: list[Transition] = field(default_factory=list)
    # Partitions the broker follows that it leaves the ISR of.
    isr_removals: list[Transition] = field(default_factory=list)
    # Every partition it follows: it is told to stop fetching them (StopReplica).
    followed: list[TopicPartition] = field(default_factory=list)


@dataclass(slots=True)
class ControllerContext:
    controller_id: int
    epoch: int = 0
    live: dict[int, LiveBroker] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    # Leaders elected (a partition's leader set to a broker other than its last) and,
    # of those, unclean ones, since this controller started.
    leader_elections: int = 0
    unclean_leader_elections: int = 0

    # -- reads --------------------------------------------------------------------

    def replicas(self, tp: TopicPartition) -> list[int]:
        topic = self.topics.get(tp.topic)
        return [] if topic is None else topic.partitions.get(tp.partition, [])

    def assignment(self, tp: TopicPartition) -> Assignment:
        """The partition's replicas and what a reassignment adds and removes (no replicas:
        an unknown partition)."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return Assignment(())
        p = tp.partition
        return Assignment(
            tuple(topic.partitions.get(p, ())),
            tuple(topic.adding.get(p, ())),
            tuple(topic.removing.get(p, ())),
        )

    def set_assignment(self, tp: TopicPartition, assignment: Assignment) -> None:
        topic = self.topics[tp.topic]
        p = tp.partition
        topic.partitions[p] = list(assignment.replicas)
        for lists, replicas in (
            (topic.adding, assignment.adding),
            (topic.removing, assignment.removing),
        ):
            if replicas:
                lists[p] = list(replicas)
            else:
                lists.pop(p, None)

    def reassigning(self) -> list[TopicPartition]:
        """The partitions being reassigned (not those of topics being deleted)."""
        return sorted(
            TopicPartition(topic.name, p)
            for topic in self.topics.values()
            if topic.name not in self.deleting
            for p in {*topic.adding, *topic.removing}
        )

    def partitions(self) -> Iterable[TopicPartition]:
        for topic in self.topics.values():
            for p in topic.partitions:
                yield TopicPartition(topic.name, p)

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self.live

    def is_electable(self, broker_id: int) -> bool:
        """Live and not shutting down: may lead, and may join the ISR of a new partition."""
        return broker_id in self.live and broker_id not in self.shutting_down

    def offline_partitions(self) -> list[TopicPartition]:
        """Partitions with no live leader (not those of topics being deleted); a leader
        shutting down still leads."""
        return [
            tp
            for tp in self.partitions()
            if tp.topic not in self.deleting
            and (tp not in self.states or not self.is_live(self.states[tp].leader))
        ]

    def partitions_on(self, broker_ids: Iterable[int]) -> list[TopicPartition]:
        """Partitions with a replica on any of ``broker_ids``."""
        wanted = set(broker_ids)
        return [tp for tp in self.partitions() if wanted.intersection(self.replicas(tp))]

    # -- plans --------------------------------------------------------------------

    def _next(self, tp: TopicPartition, elected: Elected) -> PartitionState:
        current = self.states[tp]
        return PartitionState(
            replicas=list(self.replicas(tp)),
            leader=elected.leader,
            leader_epoch=current.leader_epoch + 1,
            isr=list(elected.isr),
            controller_epoch=self.epoch,
            version=current.version,
        )

    def plan_new_partitions(self, tps: Iterable[TopicPartition]) -> list[Transition]:
        """First states of new partitions: the first live replica leads, the live replicas
        are the ISR (brokers shutting down are not counted live, as in Kafka). A partition
        with no live replica gets no state (it stays new)."""
        out = []
        for tp in tps:
            replicas = self.replicas(tp)
            live = [r for r in replicas if self.is_electable(r)]
            if not live:
                continue
            state = PartitionState(list(replicas), live[0], 0, live, self.epoch)
            out.append(Transition(tp, state, "new partition", new=True))
        return out

    def plan_offline_elections(
        self, tps: Iterable[TopicPartition], allow_unclean: Callable[[str], bool]
    ) -> list[Transition]:
        """New leaders for partitions whose leader is gone; those with no electable replica
        are left out (they stay offline)."""
        out = []
        for tp in tps:
            current = self.states.get(tp)
            if current is None:
                out.extend(self.plan_new_partitions([tp]))
                continue
            elected = leader_election.offline(
                self.replicas(tp),
                current.isr,
                self.live.keys() - self.shutting_down,
                allow_unclean(tp.topic),
            )
            if elected is None:
                continue
            why = "leader offline" + (": unclean election" if elected.unclean else "")
            out.append(Transition(tp, self._next(tp, elected), why, unclean=elected.unclean))
        return out

    def plan_remove_from_isr(self, broker_ids: Iterable[int]) -> list[Transition]:
        """Dead replicas leave the ISR, and a dead leader no election could replace
        leaves the partition without one (leader -1). Run after the offline elections.

        The last ISR member is never removed: it may hold records no other replica
        has, so a clean election waits for it to come back.
        """
        gone = set(broker_ids)
        out = []
        for tp in self.partitions_on(gone):
            current = self.states.get(tp)
            if current is None:
                continue
            leader = NO_LEADER if current.leader in gone else current.leader
            isr = [r for r in current.isr if r not in gone] or current.isr[-1:]
            if leader == current.leader and isr == current.isr:
                continue
            why = "replica offline" if leader != NO_LEADER else "leader offline, none to elect"
            out.append(Transition(tp, self._next(tp, Elected(leader, isr)), why))
        return out

    def plan_preferred_elections(self, tps: Iterable[TopicPartition]) -> list[Transition]:
        out = []
        for tp in tps:
            current = self.states.get(tp)
            replicas = self.replicas(tp)
            if current is None or not replicas or current.leader == replicas[0]:
                continue
            elected = leader_election.preferred(
                replicas, current.isr, self.live.keys() - self.shutting_down
            )
            if elected is not None:
                out.append(Transition(tp, self._next(tp, elected), "preferred replica election"))
        return out

    def plan_epoch_bump(self, tp: TopicPartition, why: str) -> Transition | None:
        """The same leader and ISR in the next leader epoch, so every replica takes the
        partition's replicas anew (a reassignment starting); None without a state."""
        current = self.states.get(tp)
        if current is None:
            return None
        return Transition(tp, self._next(tp, Elected(current.leader, list(current.isr))), why)

    def plan_reassignment_completion(
        self, tp: TopicPartition, removed: Iterable[int]
    ) -> Transition | None:
        """The state that ends a reassignment whose target replicas (the partition's replicas
        here, already set to them) are all in the ISR: the ``removed`` replicas leave the
        ISR, and the leader stays if it is a target replica and electable, else the first
        target replica live and in the ISR leads (Kafka's reassignment election); either
        way in the next leader epoch. None when no target replica can lead now."""
        current = self.states.get(tp)
        target = self.replicas(tp)
        if current is None or not target:
            return None
        gone = set(removed)
        isr = [r for r in current.isr if r not in gone]
        electable = self.live.keys() - self.shutting_down
        if current.leader in target and current.leader in electable and current.leader in isr:
            elected: Elected | None = Elected(current.leader, isr)
        else:
            elected = leader_election.reassignment(target, isr, electable)
        if elected is None or not elected.isr:
            return None
        return Transition(tp, self._next(tp, elected), f"reassignment to {target} complete")

    def plan_replicas_dropped(
        self, tp: TopicPartition, dropped: Iterable[int]
    ) -> Transition | None:
        """Replicas a reassignment no longer wants before it completes (replaced or cancelled)
        leave the ISR (never its last member), and a leader among them hands over to the
        first replica live and in the ISR (or leaves the partition without a leader). In
        the next leader epoch even when nothing else changes: the dropped replicas are
        told to stop in an epoch they have not seen. None without a state."""
        current = self.states.get(tp)
        if current is None:
            return None
        gone = set(dropped)
        isr = [r for r in current.isr if r not in gone] or current.isr[-1:]
        leader = current.leader
        if leader in gone:
            elected = leader_election.reassignment(
                self.replicas(tp), isr, self.live.keys() - self.shutting_down
            )
            leader = NO_LEADER if elected is None else elected.leader
        why = f"replicas {sorted(gone)} dropped from a reassignment"
        return Transition(tp, self._next(tp, Elected(leader, isr)), why)

    def _replicated_on(self, broker_id: int) -> list[TopicPartition]:
        """The partitions a controlled shutdown acts on: replicated (a partition with one
        replica has nowhere to go), with a state, and not of a topic being deleted."""
        return [
            tp
            for tp in self.partitions_on([broker_id])
            if len(self.replicas(tp)) > 1 and tp in self.states and tp.topic not in self.deleting
        ]

    def plan_controlled_shutdown(self, broker_id: int) -> ShutdownPlan:
        """Kafka's controlled shutdown of ``broker_id`` (already in `shutting_down`): the
        partitions it leads get a leader from the rest of their live ISR, which it leaves;
        those it follows lose it from their ISR (unless it is their last member) and it
        stops fetching them. A partition nobody else can lead is left as it is."""
        plan = ShutdownPlan()
        for tp in self._replicated_on(broker_id):
            current = self.states[tp]
            if current.leader == broker_id:
                elected = leader_election.controlled_shutdown(
                    self.replicas(tp), current.isr, self.live.keys(), self.shutting_down
                )
                if elected is not None:
                    plan.moves.append(
                        Transition(tp, self._next(tp, elected), "controlled shutdown")
                    )
                continue
            plan.followed.append(tp)
            if broker_id in current.isr and len(current.isr) > 1:
                isr = [r for r in current.isr if r != broker_id]
                why = f"controlled shutdown of follower {broker_id}"
                plan.isr_removals.append(
                    Transition(tp, self._next(tp, Elected(current.leader, isr)), why)
                )
        return plan

    def replicated_leaders_on(self, broker_id: int) -> set[TopicPartition]:
        """What a broker shutting down still leads and could hand over (Kafka's answer to
        ControlledShutdown: replicated partitions only, not of topics being deleted)."""
        return {tp for tp in self._replicated_on(broker_id) if self.states[tp].leader == broker_id}

    def imbalanced_partitions(self, percentage: int) -> list[TopicPartition]:
        """Kafka's automatic leader rebalance: for each broker, the partitions whose first
        replica it is; when more than ``percentage`` % of them are led by another broker,
        those of them whose first replica can lead now (live, not shutting down, in the
        ISR) are returned, for a preferred election."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self.partitions():
            replicas = self.replicas(tp)
            if replicas and tp.topic not in self.deleting:
                by_preferred.setdefault(replicas[0], []).append(tp)
        out = []
        for preferred, tps in by_preferred.items():
            elsewhere = [
                tp for tp in tps if tp in self.states and self.states[tp].leader != preferred
            ]
            if len(elsewhere) / len(tps) <= percentage / 100:
                continue
            out += [
                tp
                for tp in elsewhere
                if self.is_electable(preferred) and preferred in self.states[tp].isr
            ]
        return sorted(out)

    # -- applying -----------------------------------------------------------------

    def apply(self, transition: Transition, version: int) -> None:
        """Records a transition written to ZooKeeper (``version``: its state node's now)."""
        previous = self.states.get(transition.tp)
        leader = transition.state.leader
        if leader >= 0 and (previous is None or previous.leader != leader):
            self.leader_elections += 1
            if transition.unclean:
                self.unclean_leader_elections += 1
        if transition.unclean:
            log.warning(
                "%s: unclean election of broker %d: records acknowledged by the previous "
                "ISR may be lost",
                transition.tp,
                transition.state.leader,
            )
        self.states[transition.tp] = dataclasses.replace(transition.state, version=version)
