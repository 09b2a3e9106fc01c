"""`kbroker produce` and `kbroker consume` against a real kbroker node and a real Apache
Kafka node, cross-checked with a real client (confluent_kafka)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.cli import main
from tests.cli.conftest import Cluster
from tests.helpers import BrokerProcess, committed, single_error_line, wait_for

KBROKER = [sys.executable, "-m", "kbroker.cli"]


def produce(cluster: Cluster, *args: str, lines: bytes) -> subprocess.CompletedProcess[str]:
    """`kbroker produce` as a user runs it: a process reading a pipe."""
    return subprocess.run(
        [*KBROKER, "produce", *args, "-b", cluster.bootstrap, "--timeout", "20"],
        input=lines.decode(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def consume_json(cluster: Cluster, topic: str, *args: str) -> list[dict[str, object]]:
    out = cluster.run("consume", topic, "--from", "beginning", "--until-end", "--json", *args)
    return [json.loads(line) for line in out.stdout.splitlines()]


def client_read(cluster: Cluster, topic: str, partitions: int, count: int) -> list[object]:
    """What a real client reads: (partition, key, value, headers) of ``count`` records."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "cli-test",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[object] = []
        for _ in range(100):
            if len(got) >= count:
                break
            for m in consumer.consume(count, timeout=0.2):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.key(), m.value(), m.headers() or []))
        return sorted(got, key=repr)  # type: ignore[arg-type]
    finally:
        consumer.close()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_produce_lines_as_a_client_reads_them(cluster: Cluster, compression: str) -> None:
    topic = cluster.new_topic("-p", "3")
    keys = [f"key-{i}" for i in range(12)]
    lines = "".join(f"{k}:value {k}\n" for k in keys).encode()
    result = produce(cluster, topic, "-K", ":", "-H", "source=cli", "-z", compression, lines=lines)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"Produced 12 records to {topic}."

    # The keys land where a Java-compatible client (librdkafka's murmur2_random) puts them.
    reference = Producer({"bootstrap.servers": cluster.bootstrap, "partitioner": "murmur2_random"})
    placed: dict[str, int] = {}
    other = cluster.new_topic("-p", "3")
    for k in keys:
        reference.produce(
            other,
            key=k,
            value=b"",
            on_delivery=lambda e, m: placed.__setitem__(m.key().decode(), m.partition()),
        )
    assert reference.flush(20) == 0
    expected = sorted(
        ((placed[k], k.encode(), f"value {k}".encode(), [("source", b"cli")]) for k in keys),
        key=repr,
    )
    assert client_read(cluster, topic, 3, 12) == expected


def test_consume_what_a_client_produced(cluster: Cluster) -> None:
    topic = cluster.new_topic()
    t0 = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(5):
        producer.produce(
            topic, key=f"k{i}", value=f"v{i}", headers=[("h", f"x{i}".encode())], timestamp=t0 + i
        )
    producer.produce(topic, key=None, value=b"\xff\xfe")  # not UTF-8
    assert producer.flush(20) == 0

    records = consume_json(cluster, topic)
    assert records[0] == {
        "topic": topic,
        "partition": 0,
        "offset": 0,
        "timestamp": t0,
        "key": "k0",
        "value": "v0",
        "headers": [["h", "x0"]],
    }
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert (records[5]["key"], records[5]["value"], records[5]["value_base64"]) == (
        None,
        None,
        "//4=",
    )

    fmt = "%t/%p/%o/%T %k=%s [%h] %K %S\\n"
    out = cluster.run("consume", topic, "-o", "2", "-c", "2", "-f", fmt)
    assert out.stdout.splitlines() == [
        f"{topic}/0/2/{t0 + 2} k2=v2 [h=x2] 2 2",
        f"{topic}/0/3/{t0 + 3} k3=v3 [h=x3] 2 2",
    ]
    assert out.stderr.strip() == "Consumed 2 records."

    def values(*start: str) -> list[object]:
        return [r["value"] for r in consume_json(cluster, topic, *start)]

    assert values("--from", "-2") == ["v4", None]
    assert values("--from", "+4") == ["v4", None]
    assert values("--from", f"@{t0 + 3}") == ["v3", "v4", None]
    assert values("--from", "end") == []
    assert [r["value"] for r in consume_json(cluster, topic, "-c", "1")] == ["v0"]


def test_produce_with_an_input_format(cluster: Cluster) -> None:
    """-f: each line's partition, timestamp, key, headers and value, as a client reads them."""
    topic = cluster.new_topic("-p", "2")
    t0 = 1_700_000_000_000
    lines = (
        f"1|{t0}|k1|a=1,b=|one|with|bars\n"  # the value is what is left: bars and all
        f"0|{t0 + 1}||c=3|two\n"  # an empty key, one header
        f"1|{t0 + 2}|k3||three\n"  # no headers
    ).encode()
    result = produce(cluster, topic, "-f", "%p|%T|%k|%h|%s\\n", "-H", "src=cli", lines=lines)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"Produced 3 records to {topic}."
    got = [
        (r["partition"], r["timestamp"], r["key"], r["headers"], r["value"])
        for r in consume_json(cluster, topic)
    ]
    assert sorted(got, key=repr) == sorted(
        [
            (1, t0, "k1", [["src", "cli"], ["a", "1"], ["b", ""]], "one|with|bars"),
            (0, t0 + 1, "", [["src", "cli"], ["c", "3"]], "two"),
            (1, t0 + 2, "k3", [["src", "cli"]], "three"),
        ],
        key=repr,
    )

    tabbed = produce(cluster, topic, "-p", "0", "-f", "%k\\t%s", lines=b"key\tvalue\n")
    assert tabbed.returncode == 0, tabbed.stderr
    last = consume_json(cluster, topic, "-p", "0")[-1]
    assert (last["key"], last["value"]) == ("key", "value")

    mismatch = produce(cluster, topic, "-f", "%p|%s", lines=b"0|fine\nnot a partition|x\n")
    assert mismatch.returncode == 1
    assert single_error_line(mismatch.stderr) == (
        "Error: line 2: it does not match the format (1 records were sent)"
    )
    no_partition = produce(cluster, topic, "-f", "%p|%s", lines=b"7|x\n")
    assert no_partition.returncode == 1
    assert "has no partition 7" in single_error_line(no_partition.stderr)
    bad_headers = produce(cluster, topic, "-f", "%h|%s", lines=b"novalue|x\n")
    assert bad_headers.returncode == 1
    assert "expected KEY=VALUE headers" in single_error_line(bad_headers.stderr)
    for fmt in ("%k", "%q %s", "%s %s", "%s%", "%o %s"):
        usage = produce(cluster, topic, "-f", fmt, lines=b"x\n")
        assert usage.returncode == 2, fmt
        assert "Traceback" not in usage.stderr
    both = produce(cluster, topic, "-f", "%s", "-K", ":", lines=b"x\n")
    assert both.returncode == 2


def test_produce_acks_zero_and_to_one_partition(cluster: Cluster) -> None:
    topic = cluster.new_topic("-p", "2")
    result = produce(cluster, topic, "--acks", "0", "-p", "1", lines=b"a\nb\nlast-without-newline")
    assert result.returncode == 0, result.stderr
    wait_for(lambda: len(consume_json(cluster, topic)) == 3)
    assert [(r["partition"], r["value"]) for r in consume_json(cluster, topic)] == [
        (1, "a"),
        (1, "b"),
        (1, "last-without-newline"),
    ]


def test_produce_and_consume_refusals(cluster: Cluster) -> None:
    topic = cluster.new_topic("-p", "2")
    no_separator = produce(cluster, topic, "-K", ":", lines=b"k:v\nno separator\nk:w\n")
    assert no_separator.returncode == 1
    assert single_error_line(no_separator.stderr) == (
        "Error: line 2 has no key separator ':' (1 records were sent)"
    )
    assert [r["value"] for r in consume_json(cluster, topic)] == ["v"]

    no_partition = produce(cluster, topic, "-p", "5", lines=b"x\n")
    assert no_partition.returncode == 1
    assert "has no partition 5 (it has 2)" in single_error_line(no_partition.stderr)
    too_long = produce(cluster, topic, "--max-line-bytes", "10", lines=b"x" * 100 + b"\n")
    assert too_long.returncode == 1
    assert single_error_line(too_long.stderr) == "Error: a line is longer than 10 bytes"

    beyond = cluster.run("consume", topic, "-p", "0", "--from", "99", "-e", ok=False)
    assert beyond.exit_code == 1
    assert single_error_line(beyond.stderr) == (
        f"Error: offset 99 is outside {topic}-0, which holds offsets 0 to 1 (OFFSET_OUT_OF_RANGE)"
    )
    for args in (["--from", "soon"], ["-f", "%q"]):
        usage = cluster.run("consume", topic, *args, ok=False)
        assert usage.exit_code == 2
        assert "Traceback" not in usage.output


def test_produce_creates_a_missing_topic_as_the_broker_allows(cluster: Cluster) -> None:
    """As kcat -P and Kafka's console producer: the Metadata request lets the broker create
    the topic (auto.create.topics.enable, true on both nodes), and the producer waits for
    its leader; the user is told the topic was created."""
    topic = f"t-auto-{uuid.uuid4().hex[:8]}"
    result = produce(cluster, topic, "-K", ":", lines=b"k1:a\nk2:b\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"Created topic {topic}: it did not exist and the broker creates topics on first use "
        "(auto.create.topics.enable).",
        f"Produced 2 records to {topic}.",
    ]
    wait_for(lambda: len(consume_json(cluster, topic)) == 2)
    assert sorted((r["key"], r["value"]) for r in consume_json(cluster, topic)) == [
        ("k1", "a"),
        ("k2", "b"),
    ]
    again = produce(cluster, topic, lines=b"c\n")
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip() == f"Produced 1 records to {topic}."


def test_produce_to_a_missing_topic_the_broker_does_not_create(tmp_path: Path) -> None:
    node = BrokerProcess(tmp_path / "data")
    node.start("auto.create.topics.enable=false")
    try:
        cluster = Cluster("kbroker", node.bootstrap)
        unknown = produce(cluster, "t-no-such-topic", lines=b"x\n")
        assert unknown.returncode == 1
        assert single_error_line(unknown.stderr) == (
            "Error: topic 't-no-such-topic': UNKNOWN_TOPIC_OR_PARTITION: it does not exist and "
            "the broker does not create topics on first use (auto.create.topics.enable=false); "
            "create it with `kbroker topic create`"
        )
        assert cluster.json("topic", "list") == []
    finally:
        node.kill()


def console_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """`kbroker ARGS` as a user of Kafka's console tools would type it."""
    return subprocess.run(
        [*KBROKER, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_kafka_console_tool_flags(cluster: Cluster, tmp_path: Path) -> None:
    """kafka-console-producer.sh and kafka-console-consumer.sh command lines, with
    `kbroker produce` / `kbroker consume` in place of the script, do what they do there."""
    topic = cluster.new_topic("-p", "2")
    lines = tmp_path / "lines.txt"
    lines.write_text("k1:a\nk2:b\nk3:c\n")
    produced = console_tool(
        "produce", "--bootstrap-server", cluster.bootstrap, "--topic", topic, str(lines),
        "--property", "parse.key=true", "--property", "key.separator=:",
        "--request-required-acks", "1", "--compression-codec",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.strip() == f"Produced 3 records to {topic}."
    tabbed = produce(cluster, "--topic", topic, "--property", "parse.key=true", lines=b"k4\td\n")
    assert tabbed.returncode == 0, tabbed.stderr  # Kafka's key.separator is a tab

    consumed = console_tool(
        "consume", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", "4", "--isolation-level", "read_committed",
        "--json",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted((r["key"], r["value"]) for r in records) == [
        ("k1", "a"),
        ("k2", "b"),
        ("k3", "c"),
        ("k4", "d"),
    ]

    # --offset (with --partition, as there): from that offset of the partition.
    [first] = [r for r in records if r["offset"] == 0][:1]
    at_one = cluster.run(
        "consume", "--topic", topic, "--partition", str(first["partition"]),
        "--offset", "earliest", "--max-messages", "1", "--json",
    )  # fmt: skip
    assert [json.loads(line)["value"] for line in at_one.stdout.splitlines()] == [first["value"]]

    # Flags that say what one of ours says, given with it, and what has no equivalent here.
    for args, message in [
        (["consume", topic, "--from-beginning", "--from", "end"], "say the same"),
        (["consume", topic, "--max-messages", "1", "-c", "2"], "say the same"),
        (["consume", "--topic", topic, "other"], "two topics given"),
        (["consume", topic, "--property", "print.key=true"], "--format"),
        (["produce", topic, "--property", "parse.headers=true"], "parse.headers is not taken"),
        (["produce", topic, "--request-required-acks", "1", "--acks", "0"], "say the same"),
        (["produce", "--topic", topic, "no-such-file"], "'no-such-file': No such file"),
        (["consume"], "Missing argument 'TOPIC'"),
        (["produce"], "Missing argument 'TOPIC'"),
    ]:
        refused = cluster.run(*args, ok=False)
        assert refused.exit_code == 2, (args, refused.output)
        assert message in refused.stderr, (args, refused.stderr)


def test_consume_as_a_group_member(cluster: Cluster) -> None:
    topic = cluster.new_topic("-p", "2")
    for p in ("0", "1"):
        assert produce(cluster, topic, "-p", p, lines=b"a\nb\nc\n").returncode == 0

    def group_read(*args: str) -> list[tuple[int, int]]:
        records = consume_json(cluster, topic, "--group", "g1", *args)
        return [(r["partition"], r["offset"]) for r in records]

    # A new group starts where --from says, reads what it is assigned (everything, alone)
    # and commits what it printed.
    assert sorted(group_read()) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert committed(cluster.bootstrap, "g1", topic, 2, timeout=20) == {0: 3, 1: 3}

    # The next run continues from the committed offsets (not --from).
    assert produce(cluster, topic, "-p", "1", lines=b"d\ne\n").returncode == 0
    assert group_read() == [(1, 3), (1, 4)]

    # With --count, only what was printed is committed.
    assert produce(cluster, topic, "-p", "0", lines=b"f\ng\n").returncode == 0
    assert group_read("--count", "1") == [(0, 3)]
    assert committed(cluster.bootstrap, "g1", topic, 2, timeout=20) == {0: 4, 1: 5}
    assert group_read() == [(0, 4)]

    # The member left: the group is empty again (a new member is assigned everything).
    described = CliRunner().invoke(
        main, ["groups", "describe", "g1", "-b", cluster.bootstrap, "--json"]
    )
    assert described.exit_code == 0, described.output
    assert json.loads(described.stdout)[0]["state"] == "Empty"

    usage = cluster.run("consume", topic, "--group", "g1", "-p", "0", ok=False)
    assert usage.exit_code == 2
    assert "--group assigns the partitions" in usage.stderr


def test_group_shared_with_a_client(cluster: Cluster) -> None:
    """A `kbroker consume --group` process and a librdkafka consumer in one group split the
    partitions (whichever leads assigns with the range assignor) and each reads its own."""
    topic = cluster.new_topic("-p", "2")
    group = f"g-{topic}"

    def members() -> list[dict[str, object]]:
        result = CliRunner().invoke(
            main, ["groups", "describe", group, "-b", cluster.bootstrap, "--json"]
        )
        if result.exit_code != 0:
            return []
        [described] = json.loads(result.stdout)
        return described["members"] if described["state"] == "Stable" else []  # type: ignore[no-any-return]

    cli = subprocess.Popen(
        [*KBROKER, "consume", topic, "-g", group, "--from", "beginning", "--count", "1", "--json",
         "-b", cluster.bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    client = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "partition.assignment.strategy": "range",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        wait_for(lambda: len(members()) == 1)
        client.subscribe([topic])

        def split() -> bool:
            client.poll(0.2)
            found = members()
            # The client's own view too: the group can be Stable before its SyncGroup answer
            # has been taken by a poll.
            return (
                len(found) == 2
                and all(len(m["assignment"].get(topic, [])) == 1 for m in found)  # type: ignore[attr-defined]
                and len(client.assignment()) == 1
            )

        wait_for(split, timeout=40)
        [mine] = [tp.partition for tp in client.assignment()]
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        for p in (0, 1):
            producer.produce(topic, value=f"for {p}".encode(), partition=p)
        assert producer.flush(20) == 0

        wait_for(lambda: client.poll(0.2) is not None)  # the client reads its record
        out, err = cli.communicate(timeout=30)
        [record] = [json.loads(line) for line in out.splitlines()]
        assert {record["partition"], mine} == {0, 1}
        assert record["value"] == f"for {record['partition']}"
        assert err.strip() == "Consumed 1 records."
    finally:
        client.close()
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
