"""The faults of a run: each starts on a target chosen by the run's random generator, holds
for a while, and ends; both moments are recorded.

Kinds:

- ``kill``: kill -9 of a broker, started again at the end.
- ``pause``: SIGSTOP of a broker, SIGCONT at the end.
- ``isolate``: a broker cut off from everyone, clients included.
- ``leader-zk``: the leader of a partition cut off from every ZooKeeper node, while
  it still reaches the other brokers and the clients reach it.
- ``split``: one broker and one ZooKeeper node (a minority) cut off from the other
  brokers and ZooKeeper nodes (the majority); clients reach both sides.
- ``one-way``: a broker's packets to the other brokers and ZooKeeper dropped; theirs
  to it still arrive (for TCP this stalls both directions of a connection, as the
  answers are lost; it is not the same as an isolation: clients still reach it).
- ``disk-full``: a broker's data file system filled to the last byte, freed at the
  end (a broker that stopped on it is started again).
- ``zk-kill``: kill -9 of a ZooKeeper node, started again at the end.
- ``clock``: a broker's wall clock stepped 10 s to 5 min forward or back, and
  stepped back to the true time at the end (``bench/faults/clock.py``: only that
  process's wall clock moves, not its monotonic clock nor anyone else's). The
  ZooKeeper nodes' clocks are left alone.

With ``coordinators`` (the transactional workload: the ``__transaction_state``
partitions of its transactional ids), every kind that picks a broker picks the leader of
one of them, a transaction coordinator, half of the time, so kill -9, SIGSTOP,
isolation, a split and the rest hit coordinators mid-transaction; the fault's ``detail``
says so.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from bench.faults.cluster import FaultCluster
from bench.faults.history import Recorder

log = logging.getLogger("bench.faults")

TXN_STATE_TOPIC = "__transaction_state"

KINDS = (
    "kill",
    "pause",
    "isolate",
    "leader-zk",
    "split",
    "one-way",
    "disk-full",
    "zk-kill",
    "clock",
)


@dataclass
class Fault:
    kind: str
    target: str
    detail: str
    end: Callable[[], None]


class Nemesis:
    def __init__(
        self,
        cluster: FaultCluster,
        rng: random.Random,
        recorder: Recorder,
        topic: str,
        partitions: int,
        coordinators: list[int] | None = None,
    ) -> None:
        self.c = cluster
        self.rng = rng
        self.rec = recorder
        self.topic = topic
        self.partitions = partitions
        self.coordinators = coordinators or []
        self._picked = ""  # why the last broker was picked, when it was a coordinator

    def start(self, kind: str) -> Fault:
        self._picked = ""
        fault = getattr(self, "_" + kind.replace("-", "_"))()
        if self._picked:
            fault.detail += f"; {self._picked}"
        self.rec.record(
            "nemesis", fault=kind, phase="start", target=fault.target, detail=fault.detail
        )
        log.info("fault %s on %s: %s", kind, fault.target, fault.detail)
        return fault

    def end(self, fault: Fault) -> None:
        fault.end()
        self.rec.record(
            "nemesis", fault=fault.kind, phase="end", target=fault.target, detail=fault.detail
        )
        log.info("fault %s on %s ended", fault.kind, fault.target)

    # -- targets ----------------------------------------------------------------------

    def _broker(self) -> str:
        # Without coordinators no extra draw: a seed replays the runs it always did.
        if self.coordinators and self.rng.random() < 0.5:
            partition = self.rng.choice(self.coordinators)
            state = self.c.partition_state(TXN_STATE_TOPIC, partition)
            leader = state["leader"] if state else -1
            if leader > 0 and self.c.broker_name(leader) in self.c.brokers:
                self._picked = f"coordinator: leader of {TXN_STATE_TOPIC}-{partition}"
                return self.c.broker_name(leader)
        return self.rng.choice(sorted(self.c.brokers))

    def _leader(self) -> tuple[str, int]:
        """A partition's leader as ZooKeeper records it (a random broker if none)."""
        partition = self.rng.randrange(self.partitions)
        state = self.c.partition_state(self.topic, partition)
        leader = state["leader"] if state else -1
        if leader > 0 and self.c.broker_name(leader) in self.c.brokers:
            return self.c.broker_name(leader), partition
        return self._broker(), partition

    # -- kinds ------------------------------------------------------------------------

    def _kill(self) -> Fault:
        name = self._broker()
        node = self.c.brokers[name]
        node.kill()
        return Fault("kill", name, "kill -9", node.start)

    def _pause(self) -> Fault:
        name = self._broker()
        node = self.c.brokers[name]
        node.pause()
        return Fault("pause", name, "SIGSTOP", node.resume)

    def _isolate(self) -> Fault:
        name = self._broker()
        self.c.net.isolate(name)
        return Fault("isolate", name, "link down", self.c.net.heal)

    def _leader_zk(self) -> Fault:
        name, partition = self._leader()
        for zk in self.c.zookeepers:
            self.c.net.cut(name, zk)
        return Fault(
            "leader-zk",
            name,
            f"leader of partition {partition} cut from ZooKeeper",
            self.c.net.heal,
        )

    def _split(self) -> Fault:
        broker = self._broker()
        zk = self.rng.choice(sorted(self.c.zookeepers))
        minority = [broker, zk]
        majority = [n for n in [*self.c.brokers, *self.c.zookeepers] if n not in minority]
        self.c.net.partition([minority, majority])
        return Fault("split", broker, f"{minority} | {majority}", self.c.net.heal)

    def _one_way(self) -> Fault:
        name = self._broker()
        for other in [*self.c.brokers, *self.c.zookeepers]:
            if other != name:
                self.c.net.cut(name, other, one_way=True)
        return Fault("one-way", name, "its packets to the cluster dropped", self.c.net.heal)

    def _disk_full(self) -> Fault:
        name = self._broker()
        disk = self.c.disks[name]
        taken = disk.fill()
        return Fault("disk-full", name, f"{taken >> 20} MiB filler", disk.free)

    def _zk_kill(self) -> Fault:
        name = self.rng.choice(sorted(self.c.zookeepers))
        node = self.c.zookeepers[name]
        node.kill()
        return Fault("zk-kill", name, "kill -9", node.start)

    def _clock(self) -> Fault:
        name = self._broker()
        clock = self.c.clocks[name]
        offset_ms = self.rng.choice((-1, 1)) * self.rng.randrange(10_000, 300_000)
        clock.set(offset_ms)
        return Fault("clock", name, f"wall clock {offset_ms / 1000:+.1f} s", lambda: clock.set(0))
