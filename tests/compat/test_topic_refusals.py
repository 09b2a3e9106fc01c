"""What a user reads when a topic cannot be created: Kafka 3.9.1's words, through real tools.

Admin tools and consoles print the error message a CreateTopics refusal carries, so
kbroker answers each refusal with the error code and the message Kafka 3.9.1 gives:
illegal names (empty, ``.``, ``..``, too long, other characters), a name taken, a name
colliding with another once ``.`` and ``_`` are confused, partition counts and
replication factors out of range, and replica assignments that are not a 0-based run.
The same requests go to a Kafka 3.9.1 broker (ZooKeeper mode) and to a kbroker single
node, through confluent-kafka's AdminClient and Kafka's own ``kafka-topics`` tool.
Where kbroker words a refusal on purpose differently (a replica assignment naming an
unregistered broker: Kafka 3.9.1 in ZooKeeper mode creates that topic leaderless, kbroker
refuses it with INVALID_REPLICA_ASSIGNMENT), this module does not ask.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import CreateTopicsRequest
from kbroker.tools.client import BrokerClient
from tests.compat.systems import SYSTEMS, run_kafka_tool, single_node
from tests.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

NAME_CHARS = "contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
LONG = "x" * 250


@pytest.fixture(scope="module", params=SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"refusals-{request.param}")
    with single_node(request.param, zookeeper, root) as address:
        yield address


def refusals(
    bootstrap: str, topics: list[NewTopic], validate_only: bool = False
) -> dict[str, tuple[str, str]]:
    """(error name, message) of each topic's CreateTopics answer (("", "") if created, or
    if it would be with ``validate_only``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    answers = {}
    for name, future in admin.create_topics(
        topics, operation_timeout=20, validate_only=validate_only
    ).items():
        try:
            future.result(30)
            answers[name] = ("", "")
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            answers[name] = (err.name(), err.str())
    return answers


def test_illegal_names(bootstrap: str) -> None:
    names = ["", ".", "..", LONG, "bad name", "bad/x", "x" * 249]
    assert refusals(bootstrap, [NewTopic(n, 1, 1) for n in names], validate_only=True) == {
        "": ("TOPIC_EXCEPTION", "Topic name is invalid: the empty string is not allowed"),
        ".": ("TOPIC_EXCEPTION", "Topic name is invalid: '.' is not allowed"),
        "..": ("TOPIC_EXCEPTION", "Topic name is invalid: '..' is not allowed"),
        LONG: (
            "TOPIC_EXCEPTION",
            f"Topic name is invalid: the length of '{LONG}' is longer than the max allowed "
            "length 249",
        ),
        "bad name": ("TOPIC_EXCEPTION", f"Topic name is invalid: 'bad name' {NAME_CHARS}"),
        "bad/x": ("TOPIC_EXCEPTION", f"Topic name is invalid: 'bad/x' {NAME_CHARS}"),
        "x" * 249: ("", ""),
    }


def test_taken_and_colliding_names(bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:6]
    dotted, underscored = f"c.{tag}", f"c_{tag}"
    assert refusals(bootstrap, [NewTopic(dotted, 1, 1)]) == {dotted: ("", "")}
    assert refusals(bootstrap, [NewTopic(dotted, 1, 1), NewTopic(underscored, 1, 1)]) == {
        dotted: ("TOPIC_ALREADY_EXISTS", f"Topic '{dotted}' already exists."),
        underscored: (
            "TOPIC_EXCEPTION",
            f"Topic '{underscored}' collides with existing topics: {dotted}",
        ),
    }


def test_counts(bootstrap: str) -> None:
    assert refusals(
        bootstrap,
        [
            NewTopic("no-partitions", 0, 1),
            NewTopic("two-replicas", 1, 2),
            NewTopic("no-replicas", 1, 0),
        ],
    ) == {
        "no-partitions": ("INVALID_PARTITIONS", "Number of partitions must be larger than 0."),
        "two-replicas": (
            "INVALID_REPLICATION_FACTOR",
            "Replication factor: 2 larger than available brokers: 1.",
        ),
        "no-replicas": ("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0."),
    }


def test_assignment_not_a_run_from_0(bootstrap: str) -> None:
    """A replica assignment for partition 1 alone (the Java AdminClient can send one; the
    request is written here by kbroker's own client, the same bytes to both)."""
    assignment = CreateTopicsRequest.Topic.Assignment(partition_index=1, broker_ids=[0])
    topic = CreateTopicsRequest.Topic(
        name="from-1",
        num_partitions=-1,
        replication_factor=-1,
        assignments=[assignment],
        configs=[],
    )
    with BrokerClient(bootstrap, timeout=30) as client:
        resp = client.request(
            ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[topic], timeout_ms=20000)
        )
    ((code, message),) = [(t.error_code, t.error_message) for t in resp.topics]
    assert (code, message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "partitions should be a consecutive 0-based integer sequence",
    )


def test_kafka_topics_tool_prints_the_reason(bootstrap: str) -> None:
    done = run_kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        "bad name",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert (
        f"Error while executing topic command : Topic name is invalid: 'bad name' {NAME_CHARS}"
        in done.stdout
    ), (done.stdout, done.stderr[-2000:])
