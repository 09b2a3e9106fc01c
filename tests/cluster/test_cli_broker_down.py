"""The `kbroker` command line on three brokers, one of them killed (kill -9).

Right after the kill, before the controller has moved the dead broker's partitions
(its ZooKeeper session still runs for SESSION_TIMEOUT_MS), with the dead broker's
address first in --bootstrap-server:

- `kbroker topic describe` answers from the brokers it can reach: every partition
  with its leader, replicas and ISR as the metadata says, offsets of the partitions
  the live brokers lead, the dead leader marked unreachable (in --json too) and a
  note saying what could not be read;
- `kbroker produce` to partitions the dead broker led keeps sending them through the
  leader change, within its --timeout, as kcat does; every line is then readable.

Run against Apache Kafka 3.9.1 in ZooKeeper mode first (proving the test), then against
three `kbroker serve --zookeeper` processes.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.nodes import SESSION_TIMEOUT_MS, SYSTEMS, Cluster, cluster
from tests.cluster.test_cluster_mode import create_topic, elected_leaders
from tests.helpers import KBROKER
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 3


@pytest.fixture(params=SYSTEMS)
def brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    chroot = f"/cli-down-{uuid.uuid4().hex[:8]}"
    with cluster(request.param, zookeeper.connect, chroot, tmp_path) as c:
        yield c


def kbroker(*args: str, lines: str = "") -> subprocess.CompletedProcess[str]:
    """The real `kbroker` command, as a user runs it."""
    return subprocess.run(
        [*KBROKER, *args], input=lines, capture_output=True, text=True, timeout=90
    )


# Each line names its partition: line i goes to partition i % PARTITIONS.
SPREAD = ("--format", "%p:%s")


def spread(values: list[str]) -> str:
    return "".join(f"{i % PARTITIONS}:{v}\n" for i, v in enumerate(values))


def test_the_command_line_with_a_broker_down(brokers: Cluster) -> None:
    first = brokers.nodes[1].bootstrap
    topic = f"down-{uuid.uuid4().hex[:8]}"
    create_topic(first, topic, PARTITIONS, rf=3)
    leaders = elected_leaders(first, topic, PARTITIONS)
    before = [f"before-{i}" for i in range(3 * PARTITIONS)]
    done = kbroker("produce", topic, "-b", brokers.bootstrap, *SPREAD, lines=spread(before))
    assert done.returncode == 0, done.stderr

    # A broker leading a partition, not the controller (whose move would come later still).
    controller = brokers.controller_id()
    victim = next(b for b in sorted(set(leaders.values())) if b != controller)
    led = sorted(p for p, b in leaders.items() if b == victim)
    bootstrap = ",".join(
        [brokers.nodes[victim].bootstrap]
        + [n.bootstrap for i, n in brokers.nodes.items() if i != victim]
    )
    brokers.nodes[victim].kill()
    killed_at = time.monotonic()

    described = kbroker("topic", "describe", topic, "-b", bootstrap, "--json", "--timeout", "10")
    assert described.returncode == 0, described.stderr
    found = json.loads(described.stdout)
    rows = {r["partition"]: r for r in found["topics"][0]["partitions"]}
    # The case this test is about: the metadata still names the dead broker as leader.
    assert time.monotonic() - killed_at < SESSION_TIMEOUT_MS / 1000
    assert [p for p, r in rows.items() if r["leader"] == victim] == led, rows
    assert found["unreachable_brokers"] == [victim]
    for p, row in rows.items():
        assert sorted(row["replicas"]) == [1, 2, 3]
        if p in led:
            assert (row["log_start_offset"], row["log_end_offset"]) == (None, None), row
            assert row["size_bytes"] is None
        else:
            assert (row["log_start_offset"], row["log_end_offset"]) == (0, 3), row
    [note] = [n for n in found["notes"] if n.startswith(f"broker {victim} could not be reached")]
    assert all(f"{topic}-{p}" in note for p in led), note

    text = kbroker("topic", "describe", topic, "-b", bootstrap, "--timeout", "10")
    assert text.returncode == 0, text.stderr
    assert f"{victim} (unreachable)" in text.stdout
    assert f"Note: broker {victim} could not be reached" in text.stderr

    # Lines for every partition, the dead broker's too: those wait for its partitions' new
    # leaders (the controller moves them once the session has expired).
    after = [f"after-{i}" for i in range(3 * PARTITIONS)]
    produced = kbroker(
        "produce", topic, "-b", bootstrap, "--timeout", "40", *SPREAD, lines=spread(after)
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.strip() == f"Produced {len(after)} records to {topic}."
    moved = elected_leaders(brokers.live_bootstrap(), topic, PARTITIONS)
    assert victim not in moved.values()

    read = kbroker(
        "consume", topic, "--from", "beginning", "--until-end", "--json",
        "-b", bootstrap, "--timeout", "10",
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    values = [json.loads(line)["value"] for line in read.stdout.splitlines()]
    # Without idempotence a batch resent after a lost answer may be there twice, as with
    # kcat; none is missing.
    assert set(values) == set(before) | set(after), values
