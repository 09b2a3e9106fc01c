"""`kbroker partition elect-leaders` and `kbroker partition reassign` against a real Apache
Kafka node and against kbroker, both single nodes: a reassignment to the same broker, a
preferred election that is not needed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Cluster
from tests.helpers import single_error_line, wait_for


def test_elect_leaders_and_reassign(cluster: Cluster, tmp_path: Path) -> None:
    topic = cluster.new_topic("-p", "2")
    [broker] = cluster.json("cluster", "brokers")
    me = broker["id"]

    # generate needs only Metadata: it works on both.
    generated = json.loads(
        cluster.run(
            "partition", "reassign", "generate", "--topics", topic, "--brokers", str(me)
        ).stdout
    )
    expected = {
        "version": 1,
        "partitions": [
            {"topic": topic, "partition": 0, "replicas": [me]},
            {"topic": topic, "partition": 1, "replicas": [me]},
        ],
    }
    assert generated == {"current": expected, "proposed": expected}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(generated["proposed"]))

    elected = cluster.json("partition", "elect-leaders", "--topic", topic)
    assert elected == [
        {
            "topic": topic,
            "partition": p,
            "error": "ELECTION_NOT_NEEDED",
            "message": elected[p]["message"],
        }
        for p in (0, 1)
    ]
    table = cluster.run("partition", "elect-leaders", "--topic", f"{topic}:1").stdout
    assert table.splitlines()[1].split()[:3] == [topic, "1", "ELECTION_NOT_NEEDED"]
    assert cluster.run("partition", "elect-leaders", "--all-topic-partitions").exit_code == 0

    started = cluster.json("partition", "reassign", "execute", str(plan), "--wait")
    assert [(r["partition"], r["error"]) for r in started] == [(0, None), (1, None)]

    def verified() -> bool:
        return cluster.run("partition", "reassign", "verify", str(plan), ok=False).exit_code == 0

    wait_for(verified)
    rows = cluster.json("partition", "reassign", "verify", str(plan))
    assert [(r["partition"], r["replicas"], r["status"]) for r in rows] == [
        (0, [me], "complete"),
        (1, [me], "complete"),
    ]
    cancelled = cluster.json("partition", "reassign", "cancel", str(plan))
    assert [r["error"] for r in cancelled] == ["NO_REASSIGNMENT_IN_PROGRESS"] * 2


def test_partition_refusals(cluster: Cluster, tmp_path: Path) -> None:
    topic = cluster.new_topic()
    usage = [
        ["partition", "elect-leaders"],
        ["partition", "elect-leaders", "--topic", topic, "--all-topic-partitions"],
        ["partition", "elect-leaders", "--topic", topic, "--election-type", "random"],
        ["partition", "reassign", "generate", "--topics", topic, "--brokers", "one"],
    ]
    for args in usage:
        assert cluster.run(*args, ok=False).exit_code == 2, args
    absent = cluster.run("partition", "reassign", "generate", "--topics", topic,
                         "--brokers", "4242", ok=False)  # fmt: skip
    assert absent.exit_code == 1
    assert "broker 4242 is not in the cluster" in single_error_line(absent.stderr)
    unknown = cluster.run("partition", "reassign", "generate", "--topics", "t-no-such",
                          "--brokers", "1", ok=False)  # fmt: skip
    assert unknown.exit_code == 1
    plan = tmp_path / "plan.json"
    bad_plan = "not a reassignment plan"
    for text, expected in [
        ("{", "is not JSON"),
        ('{"partitions": [{"topic": "x", "partition": -1, "replicas": [1]}]}', bad_plan),
        ('{"partitions": [{"topic": "x", "partition": 0, "replicas": [1, 1]}]}', bad_plan),
        ('{"version": 1, "partitions": []}', "names no partition"),
    ]:  # fmt: skip
        plan.write_text(text)
        bad = cluster.run("partition", "reassign", "verify", str(plan), ok=False)
        assert bad.exit_code == 1
        assert expected in single_error_line(bad.stderr)
    missing = cluster.run("partition", "reassign", "verify", str(tmp_path / "none.json"), ok=False)
    assert missing.exit_code == 1
    assert "cannot read" in single_error_line(missing.stderr)
