"""Kafka's own command-line tools, from the Kafka 3.9.1 jars, against Kafka 3.9.1 (ZooKeeper
mode) and a kbroker single node: what a user sees must be the same.

One scenario per system, tool after tool on one topic and one group: kafka-topics (create
with a config, describe, add partitions, list, delete), the console producer and consumer,
kafka-get-offsets, kafka-consumer-groups (describe, reset, delete), kafka-delete-records,
kafka-log-dirs, kafka-configs (alter, describe, delete a config), kafka-leader-election,
kafka-reassign-partitions (execute and verify) and kafka-broker-api-versions. Outputs are
compared after only what differs by nature is taken out (topic ids, ports, paths).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.kafka_zk import require_kafka
from tests.compat.systems import BROKER_ID, SYSTEMS, run_kafka_tool, single_node
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", params=SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    require_kafka()
    root = tmp_path_factory.mktemp(f"tools-{request.param}")
    settings = {"group.initial.rebalance.delay.ms": "0"}
    with single_node(request.param, zookeeper, root, settings) as address:
        yield address


def tool(main: str, *args: str, stdin: str = "") -> str:
    """What Kafka's tool class ``main`` printed on stdout; it must succeed."""
    done = run_kafka_tool(main, *args, stdin=stdin)
    assert done.returncode == 0, f"{main} {args}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def rows(out: str) -> list[list[str]]:
    """The whitespace-split lines of a table the tools print, without blank lines."""
    return [line.split() for line in out.splitlines() if line.strip()]


def test_the_tools_see_the_same(bootstrap: str, tmp_path: Path) -> None:
    b = ("--bootstrap-server", bootstrap)
    topic, group = f"tools-{uuid.uuid4().hex[:6]}", f"tools-g-{uuid.uuid4().hex[:6]}"

    created = tool(
        TOPICS,
        *b,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=12345",
    )
    assert created.strip() == f"Created topic {topic}."
    tool(TOPICS, *b, "--alter", "--topic", topic, "--partitions", "3")
    described = re.sub(
        r"TopicId: \S+", "TopicId: ID", tool(TOPICS, *b, "--describe", "--topic", topic)
    )
    assert described.splitlines() == [
        f"Topic: {topic}\tTopicId: ID\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: retention.ms=12345",
        *[
            f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0\t"
            "Elr: N/A\tLastKnownElr: N/A"
            for p in range(3)
        ],
    ]
    assert topic in tool(TOPICS, *b, "--list").split()

    # Keyed records go where Kafka's partitioner puts them: the same offsets on both.
    records = [f"k{i % 5}:v{i}" for i in range(30)]
    tool(
        "kafka.tools.ConsoleProducer",
        *b,
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin="".join(f"{r}\n" for r in records),
    )
    consumed = tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        *b,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "30",
        "--timeout-ms",
        "60000",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=:",
    )
    assert sorted(consumed.split()) == sorted(records)
    ends = tool("org.apache.kafka.tools.GetOffsetShell", *b, "--topic", topic)
    assert ends.split() == [f"{topic}:0:6", f"{topic}:1:12", f"{topic}:2:12"]

    described = rows(tool(GROUPS, *b, "--describe", "--group", group))
    header = described.index(
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
    )
    assert sorted(tuple(r[1:6]) for r in described[header + 1 :]) == [
        (topic, "0", "6", "6", "0"),
        (topic, "1", "12", "12", "0"),
        (topic, "2", "12", "12", "0"),
    ]
    # The tool prints this table's rows without line breaks: read it as 4-token rows.
    reset = tool(
        GROUPS,
        *b,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:0,1",
        "--to-offset",
        "3",
        "--execute",
    ).split()
    assert reset[:4] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert sorted(tuple(reset[k + 1 : k + 4]) for k in range(4, len(reset), 4)) == [
        (topic, "0", "3"),
        (topic, "1", "3"),
    ]

    plan = tmp_path / "delete.json"
    plan.write_text(
        json.dumps({"partitions": [{"topic": topic, "partition": 1, "offset": 5}], "version": 1})
    )
    deleted = tool(
        "org.apache.kafka.tools.DeleteRecordsCommand", *b, "--offset-json-file", str(plan)
    )
    assert f"partition: {topic}-1\tlow_watermark: 5" in deleted.splitlines()
    earliest = tool("org.apache.kafka.tools.GetOffsetShell", *b, "--topic", topic, "--time", "-2")
    assert earliest.split() == [f"{topic}:0:0", f"{topic}:1:5", f"{topic}:2:0"]

    dirs_out = tool(
        "org.apache.kafka.tools.LogDirsCommand", *b, "--describe", "--topic-list", topic
    )
    (brokers_line,) = [line for line in dirs_out.splitlines() if line.startswith("{")]
    (broker,) = json.loads(brokers_line)["brokers"]
    (log_dir,) = broker["logDirs"]
    assert broker["broker"] == BROKER_ID and log_dir["error"] is None
    assert sorted(p["partition"] for p in log_dir["partitions"]) == [
        f"{topic}-{p}" for p in range(3)
    ]
    assert all(p["offsetLag"] == 0 and not p["isFuture"] for p in log_dir["partitions"])

    entity = ("--entity-type", "topics", "--entity-name", topic)
    assert tool(
        CONFIGS, *b, *entity, "--alter", "--add-config", "retention.ms=1000,cleanup.policy=compact"
    ).strip() == (f"Completed updating config for topic {topic}.")
    assert tool(CONFIGS, *b, *entity, "--describe").splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
    ]
    tool(CONFIGS, *b, *entity, "--alter", "--delete-config", "retention.ms,cleanup.policy")
    assert tool(CONFIGS, *b, *entity, "--describe").splitlines() == [
        f"Dynamic configs for topic {topic} are:"
    ]

    elected = tool(
        "org.apache.kafka.tools.LeaderElectionCommand",
        *b,
        "--election-type",
        "preferred",
        "--topic",
        topic,
        "--partition",
        "0",
    )
    assert elected.strip() == f"Valid replica already elected for partitions {topic}-0"

    moves = tmp_path / "reassign.json"
    moves.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": 0, "replicas": [BROKER_ID], "log_dirs": ["any"]}
                ],
            }
        )
    )
    executed = tool(REASSIGN, *b, "--execute", "--reassignment-json-file", str(moves))
    assert f"Successfully started partition reassignment for {topic}-0" in executed
    verified = tool(REASSIGN, *b, "--verify", "--reassignment-json-file", str(moves))
    assert verified.splitlines() == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        "",
        f"Clearing broker-level throttles on broker {BROKER_ID}",
        f"Clearing topic-level throttles on topic {topic}",
    ]

    versions = tool("kafka.admin.BrokerApiVersionsCommand", *b)
    assert re.search(r"\(id: 0 rack: null\) -> \(", versions), versions[:500]
    assert "Produce(0): 0 to 11 [usable: 11]" in versions

    assert tool(GROUPS, *b, "--delete", "--group", group).strip() == (
        f"Deletion of requested consumer groups ('{group}') was successful."
    )
    tool(TOPICS, *b, "--delete", "--topic", topic)
    assert topic not in tool(TOPICS, *b, "--list").split()


def test_replication_throttles(bootstrap: str, request: pytest.FixtureRequest) -> None:
    """kafka-reassign-partitions --throttle sets these: Kafka throttles, kbroker does not,
    so it refuses a limit in one line rather than accept it and not keep it."""
    b = ("--bootstrap-server", bootstrap)
    broker = ("--entity-type", "brokers", "--entity-name", str(BROKER_ID))
    done = run_kafka_tool(
        CONFIGS, *b, *broker, "--alter", "--add-config", "leader.replication.throttled.rate=1000"
    )
    if request.node.callspec.params["bootstrap"] == "kafka":
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        assert done.returncode == 1
        assert "replication throttling is not supported" in done.stdout + done.stderr
    # Clearing them works on both: kafka-reassign-partitions --verify does it (above).
