"""A partition leader's disk fills up in a three-broker cluster, under an idempotent acks=all
writer: leadership moves to another in-sync replica, writes go on, nothing acknowledged is
lost or duplicated, and once space is freed the broker is back in the ISR.

Run against Apache Kafka 3.9.1 first (the reference: a ZooKeeper-mode broker whose only
log directory fails halts, its ZooKeeper session expires and the controller elects
other leaders; the test starts it again once space is freed, as systemd would) and then
against kbroker (the broker hands leadership off with a controlled shutdown and stays up;
it registers again by itself once it can write). The leader's data directory is a small
tmpfs of its own; the times are printed (``-s``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.test_full_disk import fill
from tests.cluster.test_replication import (
    MIN_ISR,
    SESSION_S,
    Writer,
    partition_states,
    read_all,
    replicated_cluster,
    wait_whole,
    where_acked,
)
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

DISK_BYTES = 64 << 20
LEADER = 1


@contextmanager
def small_disk(at: Path) -> Iterator[Path]:
    """A DISK_BYTES tmpfs mounted at ``at``, unmounted whatever happened."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    at.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(at)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False, timeout=30)


@pytest.mark.parametrize("system", ["kafka", "kbroker"])
def test_a_full_disk_moves_leadership_and_loses_nothing(
    system: str, zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    # Broker 1's data directory (kbroker: b1/data; Kafka: b1/logs) on its own small disk.
    disk_at = tmp_path / "b1" / ("data" if system == "kbroker" else "logs")
    topic = f"full-{uuid.uuid4().hex[:6]}"
    with small_disk(disk_at) as disk, replicated_cluster(system, zookeeper, tmp_path) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        new = NewTopic(
            topic,
            num_partitions=1,
            replica_assignment=[[LEADER, 2, 3]],
            config={"min.insync.replicas": str(MIN_ISR)},
        )
        admin.create_topics([new], operation_timeout=30)[topic].result(60)
        assert wait_whole(c, topic)[0].leader == LEADER
        writer = Writer(
            c.bootstrap,
            topic,
            1,
            "full",
            {"enable.idempotence": True, "acks": "all", "message.timeout.ms": 120000},
            rate=50,
        ).start()
        try:
            writer.wait_acked(100)
            filler = fill(disk, disk_bytes=DISK_BYTES)
            filled = time.monotonic()
            acked = len(writer.acked)
            # Writes go on at another leader.
            wait_for(
                lambda: (s := partition_states(c.bootstrap, topic).get(0)) and s.leader > LEADER,
                "another leader",
                timeout=SESSION_S + 30,
            )
            writer.wait_acked(acked + 50, timeout=30)
            resumed = time.monotonic() - filled
            time.sleep(3)  # the disk stays full a while longer
            stayed_up = c.nodes[LEADER].alive
            filler.unlink()
            freed = time.monotonic()
            if not c.nodes[LEADER].alive:  # Kafka halted on it: started again
                c.nodes[LEADER].launch()
                c.nodes[LEADER].wait_started()
            wait_whole(c, topic, timeout=60)
            back = time.monotonic() - freed
            writer.wait_acked(len(writer.acked) + 50)
        finally:
            writer.stop()
        print(
            f"\n[{system}] disk full: writes acknowledged again after {resumed:.1f}s "
            f"(the broker {'stayed up' if stayed_up else 'stopped'}); in the ISR again "
            f"{back:.1f}s after space was freed; {len(writer.acked)} acknowledged, "
            f"longest gap between acknowledgements {writer.longest_gap:.1f}s"
        )
        assert not writer.failed, writer.failed[:5]
        if system == "kbroker":
            assert stayed_up, c.nodes[LEADER].tail()
        msgs = read_all(c.bootstrap, topic, len(writer.acked))
        read = {m.offset(): m.value() for m in msgs}
        assert len(msgs) == len(read) == len(writer.acked), "records lost or read twice"
        offset_of = where_acked(msgs)
        missing = [a for a in writer.acked if read.get(offset_of(a)) != a.value]
        assert not missing, f"{len(missing)} acknowledged records not where acked: {missing[:5]}"
