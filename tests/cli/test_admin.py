"""`kbroker topic|config|offsets|delete-records|cluster` against a real kbroker node and a
real Apache Kafka node: what a user sees (tables, --json, one-line errors, exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, KafkaException, TopicPartition

from kbroker.cli import main
from tests.cli.conftest import Cluster
from tests.helpers import free_port, produce, single_error_line, wait_for


def test_topic_create_list_describe_delete(cluster: Cluster) -> None:
    name = cluster.new_topic("-p", "3", "-c", "retention.ms=123456")

    [listed] = cluster.json("topic", "list", name)
    assert listed == {
        "topic": name,
        "topic_id": listed["topic_id"],
        "partitions": 3,
        "replication_factor": 1,
        "internal": False,
    }
    assert listed["topic_id"]
    table = cluster.run("topic", "list", "t-.*").stdout.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    assert [name, "3", "1"] in [line.split() for line in table[1:]]
    assert cluster.json("topic", "list", name[:-1]) == []  # the whole name must match

    [broker] = cluster.json("cluster", "brokers")
    described = cluster.json("topic", "describe", name)
    [topic] = described["topics"]
    assert (topic["topic"], topic["partition_count"], topic["min_insync_replicas"]) == (name, 3, 1)
    for i, p in enumerate(topic["partitions"]):
        assert p["partition"] == i
        assert p["leader"] == broker["id"]
        assert (p["replicas"], p["isr"], p["offline_replicas"]) == (
            [broker["id"]],
            [broker["id"]],
            [],
        )
        assert (p["log_start_offset"], p["log_end_offset"]) == (0, 0)
    assert all(p["size_bytes"] == 0 for p in topic["partitions"])  # from DescribeLogDirs
    assert described["notes"] == []

    result = cluster.run("topic", "describe", name)
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Topic {name}  id ")
    assert lines[1].split() == [
        "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "LOG-START", "LOG-END", "SIZE"
    ]  # fmt: skip
    b = str(broker["id"])
    assert lines[2].split() == ["0", b, b, b, "-", "0", "0", "0"]

    assert cluster.run("topic", "delete", name).stdout.strip() == f"Topic {name} deleted."
    wait_for(lambda: not cluster.json("topic", "list", name))
    missing = cluster.run("topic", "delete", name, ok=False)
    assert missing.exit_code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in single_error_line(missing.stderr)
    assert cluster.run("topic", "delete", name, "--if-exists").exit_code == 0


def test_replica_assignment_and_internal_topics(cluster: Cluster) -> None:
    [broker] = cluster.json("cluster", "brokers")
    b = broker["id"]
    name = cluster.new_topic("--replica-assignment", f"{b},{b}")
    [topic] = cluster.json("topic", "describe", name)["topics"]
    assert [(p["partition"], p["replicas"]) for p in topic["partitions"]] == [(0, [b]), (1, [b])]
    twice = cluster.run("topic", "create", "t-x", "--replica-assignment", f"{b}:{b}", ok=False)
    assert twice.exit_code == 2
    assert "lists a broker twice" in twice.stderr
    both = cluster.run(
        "topic", "create", "t-x", "--replica-assignment", str(b), "-p", "2", ok=False
    )
    assert both.exit_code == 2

    # A group's commit makes __consumer_offsets exist; it is listed only with --internal.
    # (Kafka answers NOT_COORDINATOR while it creates the topic: retry, bounded)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cli-internal"})

    def committed() -> bool:
        try:
            consumer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
            return True
        except KafkaException:
            return False

    try:
        wait_for(committed)
    finally:
        consumer.close()
    internal = cluster.json("topic", "list", "__consumer_offsets", "--internal")
    assert [(t["topic"], t["internal"]) for t in internal] == [("__consumer_offsets", True)]
    assert cluster.json("topic", "list", "__consumer_offsets") == []
    assert "__consumer_offsets" not in {
        t["topic"] for t in cluster.json("topic", "describe")["topics"]
    }


def test_topic_create_refusals(cluster: Cluster) -> None:
    name = cluster.new_topic()
    again = cluster.run("topic", "create", name, ok=False)
    assert again.exit_code == 1
    assert "TOPIC_ALREADY_EXISTS" in single_error_line(again.stderr)
    assert cluster.run("topic", "create", name, "--if-not-exists").stdout.strip() == (
        f"Topic {name} exists already."
    )

    for config in ("no.such.setting=1", "retention.ms=soon"):
        bad = cluster.run("topic", "create", "t-bad-config", "-c", config, ok=False)
        assert bad.exit_code == 1
        line = single_error_line(bad.stderr)
        assert line.startswith("Error: topic 't-bad-config': INVALID_CONFIG"), line

    checked = cluster.run("topic", "create", "t-validated", "-p", "2", "--validate-only")
    assert checked.stdout.strip().startswith("Topic t-validated would be created: 2 partitions")
    assert cluster.json("topic", "list", "t-validated") == []

    usage = cluster.run("topic", "create", "x", "--replica-assignment", "1:a", ok=False)
    assert usage.exit_code == 2
    assert "expected BROKER:BROKER" in usage.stderr


def test_describe_offsets_size_and_filters(cluster: Cluster) -> None:
    healthy = cluster.new_topic("-p", "2")
    strict = cluster.new_topic("-c", "min.insync.replicas=2")
    produce(cluster.bootstrap, healthy, [(None, b"v%d" % i, None, 1) for i in range(5)])

    [topic] = cluster.json("topic", "describe", healthy)["topics"]
    p0, p1 = topic["partitions"]
    assert (p0["log_end_offset"], p1["log_end_offset"]) == (0, 5)
    assert p1["size_bytes"] > 0

    def shown(*flags: str) -> dict[str, list[int]]:
        found = cluster.json("topic", "describe", healthy, strict, *flags)["topics"]
        return {t["topic"]: [p["partition"] for p in t["partitions"]] for t in found}

    assert shown("--under-min-isr") == {strict: [0]}
    assert shown("--at-min-isr") == {healthy: [0, 1]}
    assert shown("--under-replicated") == {}
    assert shown("--unavailable") == {}
    assert shown("--under-min-isr", "--at-min-isr") == {healthy: [0, 1], strict: [0]}

    unknown = cluster.run("topic", "describe", "t-no-such-topic", ok=False)
    assert unknown.exit_code == 1
    assert single_error_line(unknown.stderr) == (
        "Error: topic 't-no-such-topic': UNKNOWN_TOPIC_OR_PARTITION"
    )


def test_topic_alter(cluster: Cluster) -> None:
    name = cluster.new_topic()
    out = cluster.run("topic", "alter", name, "-p", "3", "-c", "retention.ms=7000")
    assert out.stdout.splitlines() == [
        f"Topic {name}: settings changed.",
        f"Topic {name} now has 3 partitions.",
    ]
    wait_for(lambda: len(cluster.json("topic", "describe", name)["topics"][0]["partitions"]) == 3)

    def retention() -> tuple[str, str]:
        [setting] = cluster.json("config", "describe", "--topic", name, "retention.ms")
        return setting["value"], setting["source"]

    wait_for(lambda: retention() == ("7000", "DYNAMIC_TOPIC_CONFIG"))
    cluster.run("topic", "alter", name, "--delete-config", "retention.ms")
    wait_for(lambda: retention()[1] != "DYNAMIC_TOPIC_CONFIG")

    fewer = cluster.run("topic", "alter", name, "-p", "2", ok=False)
    assert fewer.exit_code == 1
    assert "INVALID_PARTITIONS" in single_error_line(fewer.stderr)
    nothing = cluster.run("topic", "alter", name, ok=False)
    assert nothing.exit_code == 2


def test_config_describe_set_delete(cluster: Cluster) -> None:
    name = cluster.new_topic("-c", "retention.ms=99000")
    rows = cluster.json("config", "describe", "--topic", name)
    assert {"name": "retention.ms", "value": "99000", "source": "DYNAMIC_TOPIC_CONFIG"}.items() <= (
        next(r for r in rows if r["name"] == "retention.ms").items()
    )
    assert all(r["source"] != "DEFAULT_CONFIG" for r in rows)
    everything = {
        r["name"]: r for r in cluster.json("config", "describe", "--topic", name, "--all")
    }
    assert everything["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    assert everything["cleanup.policy"]["value"] == "delete"

    out = cluster.run(
        "config", "set", "--topic", name, "cleanup.policy=compact", "segment.ms=600000"
    )
    assert out.stdout.strip() == f"cleanup.policy, segment.ms set for topic {name!r}."

    def table() -> list[list[str]]:
        lines = cluster.run("config", "describe", "--topic", name).stdout.splitlines()
        return [line.split() for line in lines]

    wait_for(lambda: ["cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG", "no"] in table())
    assert table()[0] == ["NAME", "VALUE", "SOURCE", "READ-ONLY"]
    cluster.run("config", "delete", "--topic", name, "cleanup.policy")

    def policy() -> tuple[str, str]:
        [row] = cluster.json("config", "describe", "--topic", name, "cleanup.policy")
        return row["value"], row["source"]

    wait_for(lambda: policy() == ("delete", "DEFAULT_CONFIG"))

    bad = cluster.run("config", "set", "--topic", name, "retention.ms=later", ok=False)
    assert bad.exit_code == 1
    assert "INVALID_CONFIG" in single_error_line(bad.stderr)
    unknown = cluster.run("config", "describe", "--topic", "t-no-such-topic", ok=False)
    assert unknown.exit_code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in single_error_line(unknown.stderr)
    neither = cluster.run("config", "describe", ok=False)
    assert neither.exit_code == 2

    [broker] = cluster.json("cluster", "brokers")
    own = {r["name"]: r for r in cluster.json("config", "describe", "--broker", str(broker["id"]))}
    assert own["log.dirs"]["source"] == "STATIC_BROKER_CONFIG"
    cluster.run("config", "set", "--broker-default", "log.retention.ms=3600000")

    # Kafka 4 formats its storage with a cluster-wide min.insync.replicas: look only at ours.
    def retention() -> dict[str, str] | None:
        defaults = cluster.json("config", "describe", "--broker-default")
        return next((r for r in defaults if r["name"] == "log.retention.ms"), None)

    try:
        wait_for(lambda: retention() is not None)
        assert retention() == {
            "name": "log.retention.ms",
            "value": "3600000",
            "source": "DYNAMIC_DEFAULT_BROKER_CONFIG",
            "read_only": False,
            "sensitive": False,
            "synonyms": [
                {
                    "name": "log.retention.ms",
                    "value": "3600000",
                    "source": "DYNAMIC_DEFAULT_BROKER_CONFIG",
                }
            ],
        }
    finally:
        cluster.run("config", "delete", "--broker-default", "log.retention.ms")
    wait_for(lambda: retention() is None)


def test_offsets_and_delete_records(cluster: Cluster) -> None:
    name = cluster.new_topic("-p", "2")
    t0 = 1_700_000_000_000
    produce(cluster.bootstrap, name, [(None, b"v%d" % i, None, 0, t0 + i) for i in range(10)])

    rows = cluster.json("offsets", name)
    assert [(r["partition"], r["earliest"], r["latest"], r["error"]) for r in rows] == [
        (0, 0, 10, None),
        (1, 0, 0, None),
    ]
    [at] = cluster.json("offsets", f"{name}:0", "--time", str(t0 + 5))
    assert (at["offset"], at["timestamp"]) == (5, t0 + 5)
    [iso] = cluster.json("offsets", f"{name}:0", "--time", "2023-11-14T22:13:20.007")
    assert (iso["offset"], iso["timestamp"]) == (7, t0 + 7)  # t0 is 2023-11-14T22:13:20Z
    [newest] = cluster.json("offsets", f"{name}:0", "--time", "max-timestamp")
    assert (newest["offset"], newest["timestamp"]) == (9, t0 + 9)
    [late] = cluster.json("offsets", f"{name}:0", "--time", str(t0 + 60_000))
    assert late["offset"] is None
    table = cluster.run("offsets", f"{name}:0").stdout.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITION", "EARLIEST", "LATEST", "ERROR"]
    assert table[1].split() == [name, "0", "0", "10", "-"]

    [deleted] = cluster.json("delete-records", f"{name}:0", "--before", "4")
    assert deleted == {"topic": name, "partition": 0, "log_start_offset": 4, "error": None}
    assert cluster.json("offsets", f"{name}:0")[0]["earliest"] == 4
    everything = cluster.json("delete-records", name, "--before", "end")
    assert [r["log_start_offset"] for r in everything] == [10, 0]

    beyond = cluster.run("delete-records", f"{name}:0", "--before", "99", ok=False)
    assert beyond.exit_code == 1
    assert "OFFSET_OUT_OF_RANGE" in beyond.stdout
    no_partition = cluster.run("offsets", f"{name}:7", ok=False)
    assert no_partition.exit_code == 1
    assert single_error_line(no_partition.stderr) == (
        f"Error: topic {name!r} has no partition 7 (it has 2)"
    )
    for args in (["offsets", name, "--time", "yesterday"], ["offsets", f"{name}:x"]):
        usage = cluster.run(*args, ok=False)
        assert usage.exit_code == 2, usage.output
        assert "Traceback" not in usage.output


def test_cluster_info_and_brokers(cluster: Cluster) -> None:
    info = cluster.json("cluster", "info")
    [broker] = info["brokers"]
    assert info["cluster_id"]
    assert info["controller_id"] == broker["id"]
    assert f"{broker['host']}:{broker['port']}" == cluster.bootstrap
    assert broker["controller"] is True
    # Bootstrap addresses are tried in turn.
    dead = f"127.0.0.1:{free_port()}"
    assert cluster.json("cluster", "info", "-b", f"{dead},{cluster.bootstrap}") == info
    lines = cluster.run("cluster", "info").stdout.splitlines()
    assert lines == [
        f"Cluster id:  {info['cluster_id']}",
        f"Controller:  {broker['id']}",
        "Brokers:     1",
    ]
    table = cluster.run("cluster", "brokers").stdout.splitlines()
    assert table[0].split() == ["ID", "HOST", "PORT", "RACK", "CONTROLLER"]
    assert table[1].split() == [str(broker["id"]), "127.0.0.1", str(broker["port"]), "-", "yes"]


def test_log_dirs(cluster: Cluster) -> None:
    name = cluster.new_topic("-p", "2")
    produce(cluster.bootstrap, name, [(None, b"v%d" % i, None, 1) for i in range(5)])
    [broker] = cluster.json("cluster", "brokers")
    found = cluster.json("log-dirs", "--topic", name)
    assert found["notes"] == []
    [node] = found["brokers"]
    assert node["broker"] == broker["id"]
    [log_dir] = node["log_dirs"]
    assert log_dir["error"] is None
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    p0, p1 = log_dir["partitions"]
    assert (p0["topic"], p0["partition"], p0["size_bytes"]) == (name, 0, 0)
    assert (p1["topic"], p1["partition"], p1["offset_lag"], p1["future"]) == (name, 1, 0, False)
    assert p1["size_bytes"] > 0
    [described] = cluster.json("topic", "describe", name)["topics"]
    assert described["partitions"][1]["size_bytes"] == p1["size_bytes"]

    lines = cluster.run("log-dirs", "--topic", name).stdout.splitlines()
    assert lines[0].startswith(f"Broker {broker['id']}  {log_dir['path']}  total ")
    assert lines[1].split() == ["TOPIC", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"]
    assert lines[3].split() == [name, "1", str(p1["size_bytes"]), "0", "no"]

    unknown = cluster.run("log-dirs", "--topic", "t-no-such-topic", ok=False)
    assert unknown.exit_code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in single_error_line(unknown.stderr)
    absent = cluster.run("log-dirs", "--broker", "4242", ok=False)
    assert absent.exit_code == 1
    assert "broker 4242 is not in the cluster" in single_error_line(absent.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "list"],
        ["topic", "describe", "x"],
        ["config", "describe", "--topic", "x"],
        ["offsets", "x"],
        ["cluster", "info"],
    ],
)
def test_unreachable_bootstrap_is_one_line(args: list[str]) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "kbroker.cli", *args, "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "KBROKER_BOOTSTRAP": address},
    )
    assert result.returncode == 1
    line = single_error_line(result.stderr)
    assert line.startswith(f"Error: cannot connect to {address}:"), line
    assert result.stdout == ""


def test_connection_profiles(kbroker_cluster: Cluster, tmp_path: Path) -> None:
    """Named profiles in a TOML file (as rpk has): the default one, --profile or
    KBROKER_PROFILE picks another, and -b given explicitly wins."""
    dead = f"127.0.0.1:{free_port()}"
    config = tmp_path / "cli.toml"
    config.write_text(
        'default = "here"\n'
        f'[profiles.here]\nbootstrap = "{kbroker_cluster.bootstrap}"\ntimeout = 5\n'
        f'[profiles.dead]\nbootstrap = "{dead}"\n'
    )

    def kbroker(*args: str, **env: str) -> Result:
        environment: dict[str, str | None] = {
            "KBROKER_CONFIG": str(config),
            "KBROKER_BOOTSTRAP": None,
            "KBROKER_PROFILE": None,
            **env,
        }
        result = CliRunner().invoke(main, list(args), env=environment)
        assert "Traceback" not in result.output
        return result

    here = kbroker("cluster", "info", "--json")
    assert here.exit_code == 0, here.output
    port = json.loads(here.stdout)["brokers"][0]["port"]
    assert f"127.0.0.1:{port}" == kbroker_cluster.bootstrap
    for result in (
        kbroker("cluster", "info", "--profile", "dead"),
        kbroker("cluster", "info", KBROKER_PROFILE="dead"),
    ):
        assert result.exit_code == 1
        assert single_error_line(result.stderr).startswith(f"Error: cannot connect to {dead}:")
    explicit = kbroker("cluster", "info", "--profile", "dead", "-b", kbroker_cluster.bootstrap)
    assert explicit.exit_code == 0, explicit.output
    from_env = kbroker(
        "cluster", "info", "--profile", "dead", KBROKER_BOOTSTRAP=kbroker_cluster.bootstrap
    )
    assert from_env.exit_code == 0, from_env.output

    unknown = kbroker("topic", "list", "--profile", "nope")
    assert unknown.exit_code == 2
    assert f"no profile 'nope' in {config} (profiles: dead, here)" in unknown.stderr
    for text, expected in [
        ("[profiles.x]\nbootstrap = 'a:1'\nport = 1\n", "profiles.x has unknown key 'port'"),
        ("[profiles.x]\ntimeout = 0\n", "profiles.x.timeout must be a positive number"),
        ('default = "y"\n[profiles.x]\n', "default profile 'y' is not defined"),
        ("[profiles.x\n", "is not valid TOML"),
    ]:
        config.write_text(text)
        bad = kbroker("topic", "list")
        assert bad.exit_code == 1
        assert expected in single_error_line(bad.stderr)


def test_json_is_stable_for_scripts(kbroker_cluster: Cluster) -> None:
    """--json prints exactly one JSON document on stdout."""
    name = kbroker_cluster.new_topic()
    result = kbroker_cluster.run("topic", "describe", name, "--json")
    assert set(json.loads(result.stdout)) == {"topics", "notes", "unreachable_brokers"}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion(shell: str) -> None:
    script = CliRunner().invoke(main, ["completion", shell])
    assert script.exit_code == 0
    assert "_KBROKER_COMPLETE" in script.stdout


def test_completion_answers_tab() -> None:
    """What the bash script asks kbroker when the user presses TAB after `kbroker to`."""
    asked = CliRunner().invoke(
        main,
        [],
        prog_name="kbroker",
        env={"_KBROKER_COMPLETE": "bash_complete", "COMP_WORDS": "kbroker to", "COMP_CWORD": "1"},
    )
    assert asked.stdout.splitlines() == ["plain,topic"]
