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

from kbroker.controller import election
from kbroker.controller.election import Elected
from kbroker.log import TopicPartition
from kbroker.metadata_types import PartitionState

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


@dataclass(slots=True)
class TopicAssignment:
    name: str
    topic_id: uuid.UUID
    # partition -> replicas (the first is the preferred leader)
    partitions: dict[int, list[int]]


@dataclass(frozen=True, slots=True)
class Transition:
    tp: TopicPartition
    state: PartitionState
    why: str
    # The partition has no state yet (its state node is created, not updated).
    new: bool = False
    unclean: bool = False


@dataclass(slots=True)
class ControllerContext:
    controller_id: int
    epoch: int = 0
    live: dict[int, LiveBroker] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)

    # -- reads --------------------------------------------------------------------

    def replicas(self, tp: TopicPartition) -> list[int]:
        topic = self.topics.get(tp.topic)
        return [] if topic is None else topic.partitions.get(tp.partition, [])

    def partitions(self) -> Iterable[TopicPartition]:
        for topic in self.topics.values():
            for p in topic.partitions:
                yield TopicPartition(topic.name, p)

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self.live

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
        are the ISR. A partition with no live replica gets no state (it stays new)."""
        out = []
        for tp in tps:
            replicas = self.replicas(tp)
            live = [r for r in replicas if self.is_live(r)]
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
            elected = election.offline(
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
            elected = election.preferred(
                replicas, current.isr, self.live.keys() - self.shutting_down
            )
            if elected is not None:
                out.append(Transition(tp, self._next(tp, elected), "preferred replica election"))
        return out

    def plan_controlled_shutdown(self, broker_id: int) -> list[Transition]:
        """Leadership off ``broker_id`` (partitions with another live ISR member) and the
        broker out of the ISR of the partitions it follows."""
        out = []
        for tp in self.partitions_on([broker_id]):
            current = self.states.get(tp)
            if current is None:
                continue
            if current.leader == broker_id:
                elected = election.controlled_shutdown(
                    self.replicas(tp), current.isr, self.live.keys(), self.shutting_down
                )
                if elected is None:
                    continue  # nobody else can lead: it leads until it stops
                out.append(Transition(tp, self._next(tp, elected), "controlled shutdown"))
            elif broker_id in current.isr and len(current.isr) > 1:
                isr = [r for r in current.isr if r != broker_id]
                out.append(
                    Transition(
                        tp, self._next(tp, Elected(current.leader, isr)), "controlled shutdown"
                    )
                )
        return out

    def leaders_on(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp, s in self.states.items() if s.leader == broker_id]

    # -- applying -----------------------------------------------------------------

    def apply(self, transition: Transition, version: int) -> None:
        """Records a transition written to ZooKeeper (``version``: its state node's now)."""
        if transition.unclean:
            log.warning(
                "%s: unclean election of broker %d: records acknowledged by the previous "
                "ISR may be lost",
                transition.tp,
                transition.state.leader,
            )
        self.states[transition.tp] = dataclasses.replace(transition.state, version=version)
