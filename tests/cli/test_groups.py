"""`kbroker group list|describe|reset-offsets|delete-offsets|delete` against a real kbroker
node and a real Apache Kafka node, cross-checked with a real client (confluent_kafka)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import OFFSET_INVALID, Consumer

from tests.cli.conftest import Cluster
from tests.helpers import committed, produce, single_error_line, wait_for

T0 = 1_600_000_000_000  # record i of each partition has timestamp T0 + i


def test_reset_offsets_every_way(cluster: Cluster, tmp_path: Path) -> None:
    topic = cluster.new_topic("-p", "2")
    for p in (0, 1):
        produce(cluster.bootstrap, topic, [(None, b"v%d" % i, None, p, T0 + i) for i in range(5)])
    group = f"g-{topic}"

    def reset(*args: str) -> dict[int, int]:
        plan = cluster.json("group", "reset-offsets", group, *args)
        assert plan["group"] == group
        return {r["partition"]: r["new_offset"] for r in plan["partitions"]}

    def offsets() -> list[int]:
        return list(committed(cluster.bootstrap, group, topic, 2, timeout=20).values())

    # Dry run by default: the plan, nothing committed.
    plan = cluster.json("group", "reset-offsets", group, "--topic", topic, "--to-offset", "2")
    assert plan == {
        "group": group,
        "state": plan["state"],
        "executed": False,
        "partitions": [
            {"topic": topic, "partition": 0, "current_offset": None, "new_offset": 2},
            {"topic": topic, "partition": 1, "current_offset": None, "new_offset": 2},
        ],
    }
    assert offsets() == [OFFSET_INVALID, OFFSET_INVALID]
    shown = cluster.run("group", "reset-offsets", group, "--topic", topic, "--to-offset", "2")
    assert shown.stdout.splitlines()[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"
    ]  # fmt: skip
    assert shown.stdout.splitlines()[1].split() == [group, topic, "0", "-", "2"]
    assert "Dry run" in shown.stderr

    assert reset("--topic", topic, "--to-offset", "2", "--execute") == {0: 2, 1: 2}
    assert offsets() == [2, 2]
    [described] = cluster.json("group", "describe", group)
    assert described["state"] == "Empty" and described["members"] == []
    assert [(o["current_offset"], o["log_end_offset"], o["lag"]) for o in described["offsets"]] == [
        (2, 5, 3),
        (2, 5, 3),
    ]
    listed = {g["group"]: g["state"] for g in cluster.json("group", "list")}
    assert listed[group] == "Empty"
    assert group in cluster.run("group", "list").stdout

    # Each way of choosing, clamped to [log start, log end].
    assert reset("--topic", topic, "--shift-by", "-5", "--execute") == {0: 0, 1: 0}
    assert reset("--all-topics", "--shift-by", "1", "--execute") == {0: 1, 1: 1}
    assert reset("--topic", f"{topic}:1", "--to-offset", "99", "--execute") == {1: 5}
    assert offsets() == [1, 5]
    assert reset("--all-topics", "--to-current") == {0: 1, 1: 5}
    assert reset("--topic", topic, "--to-earliest") == {0: 0, 1: 0}
    assert reset("--topic", topic, "--to-latest") == {0: 5, 1: 5}
    at = datetime.fromtimestamp((T0 + 3) / 1000, UTC).isoformat(timespec="milliseconds")
    assert reset("--topic", topic, "--to-datetime", at) == {0: 3, 1: 3}
    assert reset("--topic", topic, "--by-duration", "P36500D") == {0: 0, 1: 0}
    assert reset("--topic", topic, "--by-duration", "PT1M") == {0: 5, 1: 5}  # none that late
    csv = tmp_path / "offsets.csv"
    csv.write_text(f"{topic},0,4\n{topic},1,1\n")
    assert reset("--from-file", str(csv), "--execute") == {0: 4, 1: 1}
    assert offsets() == [4, 1]

    # Bad usage: exit 2; a bad file or unknown topic: one line, exit 1; nothing committed.
    for args in (
        ["--topic", topic],
        ["--topic", topic, "--to-offset", "1", "--to-latest"],
        ["--to-latest"],
        ["--topic", topic, "--all-topics", "--to-latest"],
        ["--topic", topic, "--by-duration", "30 minutes"],
        ["--topic", topic, "--to-datetime", "yesterday"],
        ["--topic", topic, "--to-offset", "-1"],
        ["--topic", topic, "--to-latest", "--dry-run", "--execute"],
    ):
        bad = cluster.run("group", "reset-offsets", group, *args, ok=False)
        assert bad.exit_code == 2, (args, bad.output)
    csv.write_text(f"{topic},0,four\n")
    bad_file = cluster.run("group", "reset-offsets", group, "--from-file", str(csv), ok=False)
    assert bad_file.exit_code == 1
    assert "expected TOPIC,PARTITION,OFFSET" in single_error_line(bad_file.stderr)
    unknown = cluster.run(
        "group", "reset-offsets", group, "--topic", "t-no-such", "--to-latest", ok=False
    )
    assert unknown.exit_code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in single_error_line(unknown.stderr)
    assert offsets() == [4, 1]


def test_active_group_is_refused_and_offsets_deleted(cluster: Cluster) -> None:
    topic = cluster.new_topic("-p", "2")
    other = cluster.new_topic()
    group = f"g-{topic}"
    cluster.run("group", "reset-offsets", group, "--topic", topic, "--topic", other,
                "--to-latest", "--execute")  # fmt: skip
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([topic])

        def stable() -> bool:
            consumer.poll(0.2)
            [d] = cluster.json("group", "describe", group)
            return d["state"] == "Stable" and len(d["members"]) == 1

        wait_for(stable, timeout=40)
        text = cluster.run("group", "describe", group).stdout
        assert f"Group {group}: Stable classic group (consumer/range), 1 members" in text
        # Planning is fine while the group is active; applying is not.
        assert (
            cluster.json("group", "reset-offsets", group, "--all-topics", "--to-earliest")["state"]
            == "Stable"
        )
        refused = cluster.run("group", "reset-offsets", group, "--all-topics", "--to-earliest",
                              "--execute", ok=False)  # fmt: skip
        assert refused.exit_code == 1
        assert f"group {group!r} is Stable" in single_error_line(refused.stderr)
        # The topic the member consumes keeps its offsets; the other one's go.
        subscribed = cluster.run("group", "delete-offsets", group, topic, ok=False)
        assert subscribed.exit_code == 1
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in subscribed.stdout
        assert cluster.json("group", "delete-offsets", group, other) == [
            {"topic": other, "partition": 0, "error": None}
        ]
    finally:
        consumer.close()
    assert committed(cluster.bootstrap, group, other, 1, timeout=20) == {0: OFFSET_INVALID}
    assert committed(cluster.bootstrap, group, topic, 2, timeout=20) == {0: 0, 1: 0}

    table = cluster.run("group", "delete-offsets", group, f"{topic}:1").stdout.splitlines()
    assert table[1].split() == [topic, "1", "deleted"]
    assert committed(cluster.bootstrap, group, topic, 2, timeout=20) == {0: 0, 1: OFFSET_INVALID}
    gone = cluster.run("group", "delete-offsets", "g-no-such-group", topic, ok=False)
    assert gone.exit_code == 1
    assert "GROUP_ID_NOT_FOUND" in single_error_line(gone.stderr)

    assert cluster.run("group", "delete", group).stdout.strip() == f"{group}: deleted"
    assert group not in [g["group"] for g in cluster.json("groups", "list")]  # the old name


def test_a_consumer_protocol_group_is_described_listed_and_protected(cluster: Cluster) -> None:
    """A group of KIP-848's protocol: described through ConsumerGroupDescribe (members,
    epochs, assignments, the assignor), listed with its type, and its offsets are not reset
    while it has members."""
    topic = cluster.new_topic("-p", "2")
    group = f"g848-{topic}"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])

        def stable() -> bool:
            consumer.poll(0.2)
            [d] = cluster.json("group", "describe", group)
            return d["state"] == "Stable" and sum(len(m["assignment"]) for m in d["members"]) == 1

        wait_for(stable, timeout=40)
        [d] = cluster.json("group", "describe", group)
        assert (d["type"], d["protocol_type"], d["protocol"]) == ("consumer", "consumer", "uniform")
        [member] = d["members"]
        assert member["assignment"] == {topic: [0, 1]} and member["member_epoch"] >= 1
        assert sorted((o["partition"], o["member_id"]) for o in d["offsets"]) == [
            (0, member["member_id"]),
            (1, member["member_id"]),
        ]
        text = cluster.run("group", "describe", group).stdout
        assert f"Group {group}: Stable consumer group (consumer/uniform), 1 members" in text
        listed = {g["group"]: g for g in cluster.json("group", "list")}
        assert (listed[group]["type"], listed[group]["state"]) == ("consumer", "Stable")
        refused = cluster.run("group", "reset-offsets", group, "--all-topics", "--to-earliest",
                              "--execute", ok=False)  # fmt: skip
        assert refused.exit_code == 1
        assert f"group {group!r} is Stable" in single_error_line(refused.stderr)
    finally:
        consumer.close()
