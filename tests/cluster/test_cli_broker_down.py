"""The `kbroker` command line on three brokers, one of them killed (kill -9).

Right after the kill, before the controller has moved the dead broker's partitions
(its ZooKeeper session still runs for SESSION_MS), every command is started at once with
the dead broker's address first in --bootstrap-server; each answers from the brokers it
can reach:

- `cluster info`, `topic list`, `topic create`, `config describe --topic`, `user list`,
  `quota describe` answer as with every broker up;
- `topic describe` shows every partition as the metadata says, the dead leader marked
  unreachable (in --json too) and a note saying what could not be read;
- `offsets` and `delete-records` answer for the partitions the live brokers lead, give
  the others BROKER_NOT_AVAILABLE and say why on stderr (exit code 1);
- `log-dirs` lists the live brokers' directories and ends in one line naming the dead
  broker (exit code 1); `config describe --broker DEAD` is that one line;
- `group list` lists the groups of the live coordinators and notes the dead one;
  `group describe` of a group whose coordinator lives shows no lag for the dead leader's
  partitions and notes why; of a group whose coordinator is dead it is one line naming it;
  `group reset-offsets` over a dead leader's partition names it, over the others it works;
- `consume` (alone and in a group) reads the live leaders' partitions at once and the
  dead broker's once their new leaders are elected; `produce` keeps sending through the
  leader change, within their --timeout, as kcat does.

Run against Apache Kafka 3.9.1 in ZooKeeper mode first (proving the test), then against
three `kbroker serve --zookeeper` processes; one cluster per system for the module.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.group import FindCoordinatorRequest
from kbroker.tools.client import BrokerClient
from tests.cluster.nodes import SYSTEMS, Cluster, cluster
from tests.cluster.test_cluster_mode import create_topic, elected_leaders
from tests.helpers import KBROKER
from tests.zookeeper import ZooKeeperServer, require_zookeeper, standalone_zookeeper

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 3
# The dead broker's session: the window the commands run in (started at once, they share
# two cores with three brokers), and how long consume and produce wait for the move.
SESSION_MS = 20_000
# --timeout of the commands that need nothing from the dead broker, or fail for it.
SHORT = "4"
# --timeout of those that wait for the dead broker's partitions to move.
LONG = "40"


def kbroker(*args: str, lines: str = "") -> subprocess.CompletedProcess[str]:
    """The real `kbroker` command, as a user runs it."""
    return subprocess.run(
        [*KBROKER, *args], input=lines, capture_output=True, text=True, timeout=90
    )


# Each line names its partition: line i goes to partition i % PARTITIONS.
SPREAD = ("--format", "%p:%s")


def spread(values: list[str]) -> str:
    return "".join(f"{i % PARTITIONS}:{v}\n" for i, v in enumerate(values))


@dataclass
class Down:
    """The cluster with broker ``victim`` killed, and what each command did then."""

    brokers: Cluster
    victim: int
    led: list[int]  # the partitions of ``topic`` the victim led
    trimmed_led: list[int]  # those of ``trimmed``
    topic: str  # read only
    trimmed: str  # delete-records
    created: str  # topic create
    grown: str  # topic alter
    doomed: str  # topic delete
    live_group: str  # its coordinator lives
    dead_group: str  # its coordinator was the victim
    before: list[str]
    after: list[str]
    done: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)


def coordinator_of(bootstrap: str, group: str) -> int:
    """The coordinator of ``group``, once the cluster has one (__consumer_offsets is
    created on the first ask)."""
    with BrokerClient(bootstrap) as client:
        for _ in range(150):
            found = client.request(
                ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group, key_type=0)
            )
            if found.error_code == 0:
                return int(found.node_id)
            time.sleep(0.2)
    raise AssertionError(f"no coordinator for {group}: {found}")


def groups_by_coordinator(bootstrap: str, victim: int) -> tuple[list[str], str]:
    """Two group names whose coordinator is not ``victim``, and one whose coordinator is."""
    live: list[str] = []
    dead: list[str] = []
    for i in range(200):
        name = f"g{i}-{uuid.uuid4().hex[:6]}"
        (dead if coordinator_of(bootstrap, name) == victim else live).append(name)
        if len(live) >= 2 and dead:
            return live[:2], dead[0]
    raise AssertionError("no group names found on each side")


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper that grants sessions of SESSION_MS."""
    require_zookeeper()
    server = standalone_zookeeper(tmp_path_factory.mktemp("zookeeper"), SESSION_MS)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module", params=SYSTEMS)
def down(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Down]:
    system = request.param
    chroot = f"/cli-down-{uuid.uuid4().hex[:8]}"
    with cluster(
        system,
        zookeeper.connect,
        chroot,
        tmp_path_factory.mktemp(f"cli-down-{system}"),
        kafka_settings={"zookeeper.session.timeout.ms": str(SESSION_MS)},
        kbroker_settings=[f"zookeeper.session.timeout.ms={SESSION_MS}"],
    ) as brokers:
        yield _break(brokers)


def _break(brokers: Cluster) -> Down:
    """Topics and groups, then broker ``victim`` killed and every command started at once
    (each with the dead broker first in --bootstrap-server) and waited for."""
    first = brokers.nodes[1].bootstrap
    tag = uuid.uuid4().hex[:8]
    topic, trimmed, grown, doomed = (f"{k}-{tag}" for k in ("down", "trim", "grow", "doom"))
    for name in (topic, trimmed, grown, doomed):
        create_topic(first, name, PARTITIONS, rf=3)
    leaders = elected_leaders(first, topic, PARTITIONS)
    trimmed_leaders = elected_leaders(first, trimmed, PARTITIONS)
    before = [f"before-{i}" for i in range(3 * PARTITIONS)]
    for name in (topic, trimmed):
        done = kbroker("produce", name, "-b", brokers.bootstrap, *SPREAD, lines=spread(before))
        assert done.returncode == 0, done.stderr
    # A broker leading a partition, not the controller (whose move would come later still).
    controller = brokers.controller_id()
    victim = next(b for b in sorted(set(leaders.values())) if b != controller)
    (live_group, fresh_group), dead_group = groups_by_coordinator(first, victim)
    for group in (live_group, dead_group):
        done = kbroker(
            "consume", topic, "--group", group, "--from", "beginning", "--until-end",
            "-b", brokers.bootstrap,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    down = Down(
        brokers=brokers,
        victim=victim,
        led=sorted(p for p, b in leaders.items() if b == victim),
        trimmed_led=sorted(p for p, b in trimmed_leaders.items() if b == victim),
        topic=topic,
        trimmed=trimmed,
        created=f"new-{tag}",
        grown=grown,
        doomed=doomed,
        live_group=live_group,
        dead_group=dead_group,
        before=before,
        after=[f"after-{i}" for i in range(3 * PARTITIONS)],
    )
    live = next(i for i in brokers.nodes if i != victim)
    commands: dict[str, tuple[list[str], str, str]] = {
        "cluster info": (["cluster", "info", "--json"], SHORT, ""),
        "topic list": (["topic", "list"], SHORT, ""),
        "topic describe json": (["topic", "describe", topic, "--json"], SHORT, ""),
        "topic describe": (["topic", "describe", topic], SHORT, ""),
        "topic create": (
            ["topic", "create", down.created, "--partitions", "3", "--replication-factor", "3"],
            SHORT,
            "",
        ),
        "topic alter": (["topic", "alter", grown, "--partitions", "4"], SHORT, ""),
        "topic delete": (["topic", "delete", doomed], SHORT, ""),
        "config describe topic": (["config", "describe", "--topic", topic], SHORT, ""),
        "config describe dead broker": (["config", "describe", "--broker", str(victim)], SHORT, ""),
        "config describe live broker": (["config", "describe", "--broker", str(live)], SHORT, ""),
        "user create": (["user", "create", f"u-{tag}", "--password-file", "-"], SHORT, "pw\n"),
        "user list": (["user", "list"], SHORT, ""),
        "quota set": (["quota", "set", "--user", f"u-{tag}", "producer_byte_rate=1000"], SHORT, ""),
        "quota describe": (["quota", "describe"], SHORT, ""),
        "offsets": (["offsets", topic, "--json"], SHORT, ""),
        "delete-records": (["delete-records", trimmed, "--before", "1", "--json"], SHORT, ""),
        "log-dirs": (["log-dirs", "--json"], SHORT, ""),
        "group list": (["group", "list", "--json"], SHORT, ""),
        "group describe live": (["group", "describe", live_group, "--json"], SHORT, ""),
        "group describe dead": (["group", "describe", dead_group], "2", ""),
        "group reset dead leader": (
            ["group", "reset-offsets", live_group, "--topic", topic, "--to-earliest"],
            SHORT,
            "",
        ),
        "group reset live leaders": (
            [
                "group",
                "reset-offsets",
                live_group,
                "--to-earliest",
                "--json",
                "--topic",
                f"{topic}:{','.join(str(p) for p in range(PARTITIONS) if p not in down.led)}",
            ],
            SHORT,
            "",
        ),
        "consume": (["consume", topic, "--from", "beginning", "--until-end", "--json"], LONG, ""),
        "consume group": (
            [
                "consume",
                topic,
                "--group",
                fresh_group,
                "--from",
                "beginning",
                "--until-end",
                "--json",
            ],
            LONG,
            "",
        ),
        "consume dead partition": (
            ["consume", topic, "--partition", str(down.led[0]), "--from", "beginning"],
            SHORT,
            "",
        ),
        "produce": (["produce", topic, *SPREAD], LONG, spread(down.after)),
    }
    bootstrap = ",".join(
        [brokers.nodes[victim].bootstrap]
        + [n.bootstrap for i, n in brokers.nodes.items() if i != victim]
    )
    brokers.nodes[victim].kill()
    running = {
        name: subprocess.Popen(
            [*KBROKER, *args, "-b", bootstrap, "--timeout", timeout],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (args, timeout, _) in commands.items()
    }
    try:
        for name, proc in running.items():
            out, err = proc.communicate(commands[name][2], timeout=90)
            down.done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return down


def result(down: Down, name: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    """What command ``name`` did; it exited with ``code`` and printed no traceback."""
    done = down.done[name]
    assert done.returncode == code, (name, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def note_of(down: Down, done: subprocess.CompletedProcess[str], prefix: str = "Note") -> str:
    """The one stderr line naming the dead broker as unreachable."""
    [line] = [
        line
        for line in done.stderr.splitlines()
        if line.startswith(f"{prefix}: broker {down.victim} could not be reached")
    ]
    return line


def test_commands_that_need_any_broker_answer(down: Down) -> None:
    info = json.loads(result(down, "cluster info").stdout)
    # The dead broker's session has not expired yet: the cluster still lists it.
    assert [b["id"] for b in info["brokers"]] == [1, 2, 3]
    assert down.topic in result(down, "topic list").stdout
    assert result(down, "topic create").stdout.startswith(f"Topic {down.created} created")
    # Topics are created, altered and deleted, and credentials changed, by the controller
    # (a ZooKeeper-mode Kafka answers NOT_CONTROLLER elsewhere).
    assert result(down, "topic alter").stdout == f"Topic {down.grown} now has 4 partitions.\n"
    assert result(down, "topic delete").stdout == f"Topic {down.doomed} deleted.\n"
    result(down, "user create")
    result(down, "quota set")
    result(down, "config describe topic")
    assert "zookeeper.session.timeout.ms" in result(down, "config describe live broker").stdout
    result(down, "user list")
    result(down, "quota describe")


def test_topic_describe_marks_the_dead_leader(down: Down) -> None:
    found = json.loads(result(down, "topic describe json").stdout)
    rows = {r["partition"]: r for r in found["topics"][0]["partitions"]}
    assert [p for p, r in rows.items() if r["leader"] == down.victim] == down.led, rows
    assert found["unreachable_brokers"] == [down.victim]
    for p, row in rows.items():
        assert sorted(row["replicas"]) == [1, 2, 3]
        if p in down.led:
            assert (row["log_start_offset"], row["log_end_offset"]) == (None, None), row
            assert row["size_bytes"] is None
        else:
            assert (row["log_start_offset"], row["log_end_offset"]) == (0, 3), row
    [note] = [n for n in found["notes"] if n.startswith(f"broker {down.victim} could not")]
    assert all(f"{down.topic}-{p}" in note for p in down.led), note

    text = result(down, "topic describe")
    assert f"{down.victim} (unreachable)" in text.stdout
    note_of(down, text)


def test_offsets_and_delete_records_answer_for_the_live_leaders(down: Down) -> None:
    listed = result(down, "offsets", 1)
    rows = {r["partition"]: r for r in json.loads(listed.stdout)}
    for p, row in rows.items():
        if p in down.led:
            assert (row["earliest"], row["latest"]) == (None, None), row
            assert (row["leader"], row["error"]) == (down.victim, "BROKER_NOT_AVAILABLE"), row
        else:
            assert (row["earliest"], row["latest"], row["error"]) == (0, 3, None), row
    assert "Connection refused" in note_of(down, listed)

    trimmed = result(down, "delete-records", 1)
    rows = {r["partition"]: r for r in json.loads(trimmed.stdout)}
    assert sorted(rows) == list(range(PARTITIONS))
    for p, row in rows.items():
        if p in down.trimmed_led:
            assert (row["log_start_offset"], row["error"]) == (None, "BROKER_NOT_AVAILABLE")
        elif row["error"] is None:
            assert row["log_start_offset"] == 1, row
        else:
            # A live leader deletes once its followers in sync have; Kafka's waits for the
            # dead one still in its ISR and answers that it timed out.
            assert (row["log_start_offset"], row["error"]) == (None, "REQUEST_TIMED_OUT"), row
    note_of(down, trimmed)


def test_log_dirs_and_broker_configs_name_the_dead_broker(down: Down) -> None:
    dirs = result(down, "log-dirs", 1)
    found = json.loads(dirs.stdout)
    assert sorted(b["broker"] for b in found["brokers"]) == sorted(
        i for i in down.brokers.nodes if i != down.victim
    )
    assert found["notes"] == [note_of(down, dirs, "Error").removeprefix("Error: ")]

    config = result(down, "config describe dead broker", 1)
    assert config.stdout == ""
    assert config.stderr.splitlines() == [note_of(down, config, "Error")]


def test_groups_answer_from_the_live_coordinators(down: Down) -> None:
    listed = result(down, "group list")
    names = [g["group"] for g in json.loads(listed.stdout)]
    assert down.live_group in names and down.dead_group not in names, names
    assert "the groups it coordinates are not listed" in note_of(down, listed)

    [described] = json.loads(result(down, "group describe live").stdout)
    rows = {o["partition"]: o for o in described["offsets"] if o["topic"] == down.topic}
    for p, row in rows.items():
        assert row["current_offset"] == 3
        expected = (None, None) if p in down.led else (3, 0)
        assert (row["log_end_offset"], row["lag"]) == expected, row
    [note] = described["notes"]
    assert note.startswith(f"broker {down.victim} could not be reached")

    dead = result(down, "group describe dead", 1)
    [line] = dead.stderr.splitlines()
    assert line.startswith(f"Error: the coordinator of group {down.dead_group!r}: ") or (
        line.startswith(f"Error: no coordinator for group {down.dead_group!r}")
    ), line
    assert f"broker {down.victim} at " in line, line

    reset = result(down, "group reset dead leader", 1)
    [line] = reset.stderr.splitlines()
    p = down.led[0]
    assert line.startswith(
        f"Error: no offsets for {down.topic}-{p}: its leader, broker {down.victim}, cannot be"
    ), line
    planned = json.loads(result(down, "group reset live leaders").stdout)
    assert [(r["partition"], r["new_offset"]) for r in planned["partitions"]] == [
        (p, 0) for p in range(PARTITIONS) if p not in down.led
    ]


def test_consume_of_a_dead_leaders_partition_names_it(down: Down) -> None:
    # Its leader is not replaced within the --timeout: one line says which and why.
    waited = result(down, "consume dead partition", 1)
    [line] = waited.stderr.splitlines()
    assert line.startswith(
        f"Error: cannot read {down.topic}-{down.led[0]}: its leader, broker {down.victim}, "
        "cannot be reached ("
    ), line
    assert line.endswith(f"no other broker took over within {SHORT}s"), line


def test_consume_and_produce_go_on_through_the_leader_change(down: Down) -> None:
    # produce waits for the dead broker's partitions' new leaders (the controller moves
    # them once the session has expired).
    produced = result(down, "produce")
    assert produced.stderr.strip() == f"Produced {len(down.after)} records to {down.topic}."
    moved = elected_leaders(down.brokers.live_bootstrap(), down.topic, PARTITIONS)
    assert down.victim not in moved.values()

    for name in ("consume", "consume group"):
        read = result(down, name)
        records = [json.loads(line) for line in read.stdout.splitlines()]
        # Everything written before the kill, the live leaders' partitions first (read at
        # once), the dead broker's once they moved; maybe some of produce's lines too.
        values = [r["value"] for r in records if r["value"] in down.before]
        assert sorted(values) == sorted(down.before), (name, records)
        first_dead = min(i for i, r in enumerate(records) if r["partition"] in down.led)
        assert first_dead >= 3 * (PARTITIONS - len(down.led)), (name, records)

    read = kbroker(
        "consume", down.topic, "--from", "beginning", "--until-end", "--json",
        "-b", down.brokers.live_bootstrap(), "--timeout", "10",
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    values = [json.loads(line)["value"] for line in read.stdout.splitlines()]
    # Without idempotence a batch resent after a lost answer may be there twice, as with
    # kcat; none is missing.
    assert set(values) == set(down.before) | set(down.after), values
