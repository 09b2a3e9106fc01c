"""KIP-848 consumer groups (group.protocol=consumer) through real clients, against Apache
Kafka 4.1.1 (KRaft, the reference: Kafka 3.9.1 has no KIP-848) and a kbroker single node.

What a user of the consumer group protocol sees: librdkafka members sharing a topic's
partitions with the server-side assignors (``uniform`` and ``range``, whose layout is
exact), commits that survive a member leaving, subscription changes and regex
subscriptions resolved by the broker, a Java member and a librdkafka member in one group
with the Java Admin client's view of it (describeConsumerGroups, listGroups by type),
kafka-consumer-groups of Kafka 4.1.1, classic and consumer-protocol members meeting in
one group (Kafka 4.1.1's default ``group.consumer.migration.policy`` is ``bidirectional``:
the group converts each way), and a classic-only client (kafka-python) unchanged.

One node per system for the module; every test uses its own topics and groups. The node's
heartbeat interval is 1 s (Kafka's default, 5 s, would make every reassignment wait up
to 5 s for the members' next heartbeat).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka import KafkaConsumer

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import OffsetCommitRequest, OffsetFetchRequest
from kbroker.tools.client import BrokerClient
from tests.compat.systems import (
    KAFKA4_SYSTEMS,
    KAFKA4_VERSION,
    require_kafka4,
    run_kafka_tool,
    single_node,
)
from tests.helpers import create_topic, produce, topic_name, wait_for
from tests.java import run_java

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

NODE_SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
PARTITIONS = 4
GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# The bootstrap addresses of the kbroker nodes (where kbroker differs on purpose).
KBROKER_NODES: set[str] = set()


@pytest.fixture(scope="module", params=KAFKA4_SYSTEMS)
def bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"kip848-{request.param}")
    with single_node(request.param, None, root, NODE_SETTINGS) as address:
        if request.param == "kbroker":
            KBROKER_NODES.add(address)
        yield address


def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@dataclass
class Member:
    """A librdkafka consumer in a group, with what it read and the errors it was told of."""

    name: str
    consumer: Consumer
    errors: list[KafkaError]
    received: list[Any] = field(default_factory=list)
    closed: bool = False

    def close(self) -> None:
        """Leaves the group (LeaveGroup, or a heartbeat with member epoch -1)."""
        if not self.closed:
            self.closed = True
            self.consumer.close()

    def poll(self, timeout: float = 0.1) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        error = msg.error()
        if error is not None:
            self.errors.append(error)
        else:
            self.received.append(msg)

    def partitions(self, topic: str | None = None) -> list[int]:
        return sorted(
            tp.partition for tp in self.consumer.assignment() if topic is None or tp.topic == topic
        )

    def assigned(self) -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in self.consumer.assignment())

    def keys(self) -> list[str]:
        return [m.key().decode() for m in self.received]


MemberFactory = Callable[..., Member]


@pytest.fixture
def member() -> Iterator[MemberFactory]:
    """Makes librdkafka members (not subscribed yet; manual commits, from the earliest
    offset): ``member(bootstrap, group, client_id, protocol="consumer", **settings)``. The
    ones a test leaves open are closed after it."""
    made: list[Member] = []

    def make(
        bootstrap: str, group: str, name: str, protocol: str = "consumer", **conf: Any
    ) -> Member:
        errors: list[KafkaError] = []
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": errors.append,
            **conf,
        }
        made.append(Member(name, Consumer(settings), errors))
        return made[-1]

    yield make
    for m in made:
        m.close()


def poll_until(
    members: Sequence[Member], check: Callable[[], bool], what: str, timeout: float = 20
) -> float:
    """Polls every member until ``check()`` holds: the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            state = {m.consumer.memberid(): m.assigned() for m in members}
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {state}")
        for m in members:
            m.poll()
    return time.monotonic() - start


def split_between(members: Sequence[Member], topic: str) -> Callable[[], bool]:
    """Every member has partitions of ``topic``, and together they hold each exactly once."""

    def check() -> bool:
        held = [m.partitions(topic) for m in members]
        flat = sorted(p for part in held for p in part)
        return all(held) and flat == list(range(PARTITIONS))

    return check


def keyed_records(topic: str, first: int, count: int) -> list[tuple[str, str, None, int]]:
    """Records ``first``..``first+count-1``: key "k<i>" to partition i mod PARTITIONS."""
    return [(f"k{i}", f"v{i}", None, i % PARTITIONS) for i in range(first, first + count)]


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, from the admin client (OffsetFetch)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    listed = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}


def describe(bootstrap: str, group: str) -> Any:
    """The admin client's description of ``group``; asked again while its coordinator is
    still loading (just after __consumer_offsets was created, say)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    loading = {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
    deadline = time.monotonic() + 15
    while True:
        try:
            return admin.describe_consumer_groups([group])[group].result(timeout=15)
        except KafkaException as exc:
            if exc.args[0].code() not in loading or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def group_view(bootstrap: str, group: str) -> tuple[str, str, str, list[tuple[str, list[int]]]]:
    """(type, state, assignor, [(client id, partitions)]) as the admin client describes it."""
    d = describe(bootstrap, group)
    members = sorted(
        (m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
        for m in d.members
    )
    return d.type.name, d.state.name, d.partition_assignor, members


# -- librdkafka members sharing a topic (a) --------------------------------------------


@pytest.mark.parametrize("assignor", ["range", "uniform"])
def test_members_share_partitions_and_commit(
    member: MemberFactory, bootstrap: str, assignor: str
) -> None:
    topic, group = topic_name("share"), group_name()
    create_topic(bootstrap, topic, PARTITIONS)
    first = member(bootstrap, group, "first", **{"group.remote.assignor": assignor})
    second = member(bootstrap, group, "second", **{"group.remote.assignor": assignor})
    first.consumer.subscribe([topic])
    poll_until([first], lambda: first.partitions() == [0, 1, 2, 3], "the first member")
    second.consumer.subscribe([topic])
    poll_until([first, second], split_between([first, second], topic), "a split")
    assert len(first.partitions()) == len(second.partitions()) == 2
    if assignor == "range":
        # Kafka 4.1.1's range assignor orders the members (static ones first, by instance id;
        # then by member id, as strings) and hands each the next range of partitions.
        low, high = sorted([first, second], key=lambda m: m.consumer.memberid())
        assert (low.partitions(), high.partitions()) == ([0, 1], [2, 3])

    produce(bootstrap, topic, keyed_records(topic, 0, 40))
    poll_until(
        [first, second], lambda: len(first.received) + len(second.received) == 40, "40 records"
    )
    for m in (first, second):
        assert {msg.partition() for msg in m.received} <= set(m.partitions())
        m.consumer.commit(asynchronous=False)
    assert sorted(first.keys() + second.keys()) == sorted(f"k{i}" for i in range(40))
    assert group_offsets(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 10)

    # The first leaves: the second takes its partitions from its commits, re-reading nothing.
    first.close()
    poll_until([second], lambda: second.partitions() == [0, 1, 2, 3], "the second alone")
    produce(bootstrap, topic, keyed_records(topic, 40, 20))
    poll_until([second], lambda: len(second.received) >= 20 + 20, "20 more records")
    second.poll(1.0)  # a re-read record would come now
    assert sorted(second.keys()[20:]) == sorted(f"k{i}" for i in range(40, 60))
    second.consumer.commit(asynchronous=False)
    assert group_offsets(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 15)
    second.close()
    assert first.errors == second.errors == []


# -- subscriptions: a change, and a regex the broker resolves (b) ----------------------


def test_subscription_change_and_regex(member: MemberFactory, bootstrap: str) -> None:
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    first, other, later = f"{prefix}-a", f"other-{prefix}", f"{prefix}-b"
    for topic in (first, other):
        create_topic(bootstrap, topic, 2)
    m = member(bootstrap, group_name(), "subscriber")
    m.consumer.subscribe([first])
    poll_until([m], lambda: m.assigned() == [(first, 0), (first, 1)], "the first topic")
    m.consumer.subscribe([first, other])
    both = sorted([(first, 0), (first, 1), (other, 0), (other, 1)])
    poll_until([m], lambda: m.assigned() == both, "the second topic too")
    # librdkafka sends a "^..." subscription to the broker as SubscribedTopicRegex.
    m.consumer.subscribe([f"^{prefix}.*"])
    poll_until([m], lambda: m.assigned() == [(first, 0), (first, 1)], "the regex's topic")
    create_topic(bootstrap, later, 2)
    matched = sorted([(first, 0), (first, 1), (later, 0), (later, 1)])
    # Kafka 4.1.1 resolves the regexes again about 10 s after their last resolution.
    took = poll_until([m], lambda: m.assigned() == matched, "the new matching topic", 40)
    print(f"a new topic matching the regex was assigned after {took:.1f} s")
    m.close()
    assert m.errors == []


# -- a Java member and a librdkafka member in one group (c) ----------------------------


def test_java_and_librdkafka_members(member: MemberFactory, bootstrap: str) -> None:
    lib = require_kafka4()
    topic, group = topic_name("mixed"), group_name()
    create_topic(bootstrap, topic, PARTITIONS)
    rd = member(bootstrap, group, "rdkafka-member")
    rd.consumer.subscribe([topic])
    out: dict[str, str] = {}
    failed: list[BaseException] = []

    def java() -> None:
        try:
            out.update(
                run_java(
                    "ConsumerProtocol",
                    [lib],
                    bootstrap,
                    topic,
                    group,
                    str(PARTITIONS),
                    "40",
                    "2",
                    timeout=120,
                )
            )
        except BaseException as exc:  # re-raised in the test's thread
            failed.append(exc)

    runner = threading.Thread(target=java)
    runner.start()
    deadline = time.monotonic() + 130
    while runner.is_alive() and time.monotonic() < deadline:
        rd.poll()
    runner.join(1)
    if failed:
        raise failed[0]
    assert out.get("done") == "true", out
    java_partitions = [int(p) for p in out["assigned"].split(",")]
    java_keys = out["keys"].split(",") if out["keys"] else []
    rd_partitions = sorted(set(range(PARTITIONS)) - set(java_partitions))
    poll_until([rd], lambda: len(rd.received) == 40 - len(java_keys), "the librdkafka share")
    rd.consumer.commit(asynchronous=False)
    assert sorted(java_keys + rd.keys()) == sorted(f"k{i}" for i in range(40))
    assert {msg.partition() for msg in rd.received} == set(rd_partitions)
    assert group_offsets(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 10)

    joined = ",".join(str(p) for p in java_partitions)
    rd_joined = ",".join(str(p) for p in rd_partitions)
    assert {k: v for k, v in out.items() if k not in ("assigned", "keys")} == {
        "describe.type": "Consumer",
        "describe.state": "Stable",
        "describe.assignor": "uniform",
        "describe.simple": "false",
        "describe.members": "2",
        "describe.epochs": "true,true,true",
        "member.java-member.assignment": joined,
        "member.java-member.target": joined,
        "member.java-member.epoch": "positive",
        "member.java-member.upgraded": "true",
        "member.java-member.host": "/127.0.0.1",
        "member.java-member.idLength": "22",
        "member.rdkafka-member.assignment": rd_joined,
        "member.rdkafka-member.target": rd_joined,
        "member.rdkafka-member.epoch": "positive",
        "member.rdkafka-member.upgraded": "true",
        "member.rdkafka-member.host": "/127.0.0.1",
        "member.rdkafka-member.idLength": "22",
        "list.type": "Consumer",
        "list.protocol": "consumer",
        "list.state": "Stable",
        "listClassic.has": "false",
        "listStableConsumer.has": "true",
        "done": "true",
    }
    # ListGroups v5's types filter, from librdkafka too, once the Java member's partitions
    # are the librdkafka member's (while it takes them over the group is not stable yet, and
    # librdkafka showed its state as UNKNOWN on Kafka 4.1.1).
    poll_until([rd], lambda: rd.partitions() == [0, 1, 2, 3], "the Java member's partitions")
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def listed(kind: ConsumerGroupType) -> list[tuple[ConsumerGroupType, str]]:
        found = admin.list_consumer_groups(types={kind}).result(15)
        assert found.errors == []
        return [(g.type, g.state.name) for g in found.valid if g.group_id == group]

    wait_for(
        lambda: listed(ConsumerGroupType.CONSUMER) == [(ConsumerGroupType.CONSUMER, "STABLE")],
        "the group listed as a stable consumer group",
        15,
    )
    assert listed(ConsumerGroupType.CLASSIC) == []
    rd.close()
    assert rd.errors == []


# -- kafka-consumer-groups of Kafka 4.1.1 (d) ------------------------------------------


def groups_tool(bootstrap: str, *args: str) -> list[list[str]]:
    """kafka-consumer-groups (Kafka 4.1.1) run to success: its table's rows, split."""
    done = run_kafka_tool(
        GROUPS_TOOL, "--bootstrap-server", bootstrap, *args, version=KAFKA4_VERSION
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return [line.split() for line in done.stdout.splitlines() if line.strip()]


def test_consumer_groups_tool(member: MemberFactory, bootstrap: str) -> None:
    topic, group = topic_name("tool"), group_name()
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, keyed_records(topic, 0, 20))
    members = [
        member(bootstrap, group, name, **{"group.remote.assignor": "range"})
        for name in ("ca", "cb")
    ]
    for m in members:
        m.consumer.subscribe([topic])
    poll_until(members, split_between(members, topic), "a split")
    # Each member has read its own partitions to the end (a member that held all of them
    # before the split may have read them first: counting records is not enough).
    poll_until(
        members,
        lambda: (
            split_between(members, topic)()
            and all(
                tp.offset == 5
                for m in members
                for tp in m.consumer.position(list(m.consumer.assignment()))
            )
        ),
        "every member at the end of its partitions",
    )
    for m in members:
        m.consumer.commit(asynchronous=False)
    ids = {m.consumer.memberid(): m for m in members}
    stop = threading.Event()

    def keep_polling() -> None:
        while not stop.is_set():
            for m in members:
                m.poll(0.05)

    poller = threading.Thread(target=keep_polling)
    poller.start()
    try:
        described = groups_tool(bootstrap, "--describe", "--group", group, "--members", "--verbose")
        offsets = groups_tool(bootstrap, "--describe", "--group", group)
        state = groups_tool(bootstrap, "--describe", "--group", group, "--state", "--verbose")
        consumer_groups = groups_tool(bootstrap, "--list", "--type", "consumer")
        classic_groups = groups_tool(bootstrap, "--list", "--type", "classic")
    finally:
        stop.set()
        poller.join(10)

    assert described[0] == [
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "CURRENT-EPOCH",
        "CURRENT-ASSIGNMENT",
        "TARGET-EPOCH",
        "TARGET-ASSIGNMENT",
    ]
    # Range, by member id: the lower id has partitions 0 and 1.
    low, high = sorted(ids)
    assert sorted(described[1:]) == sorted(
        [
            [
                group,
                low,
                "/127.0.0.1",
                ids[low].name,
                "2",
                "2",
                f"{topic}:0,1",
                "2",
                f"{topic}:0,1",
            ],
            [
                group,
                high,
                "/127.0.0.1",
                ids[high].name,
                "2",
                "2",
                f"{topic}:2,3",
                "2",
                f"{topic}:2,3",
            ],
        ]
    )
    assert offsets[0] == [
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
    assert sorted(offsets[1:]) == sorted(
        [group, topic, str(p), "5", "5", "0", mid, "/127.0.0.1", ids[mid].name]
        for mid in ids
        for p in ids[mid].partitions()
    )
    assert state[0] == [
        "GROUP",
        "COORDINATOR",
        "(ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "GROUP-EPOCH",
        "TARGET-ASSIGNMENT-EPOCH",
        "#MEMBERS",
    ]
    assert len(state) == 2
    assert state[1][0] == group
    assert re.fullmatch(r"127\.0\.0\.1:\d+", state[1][1]), state
    assert re.fullmatch(r"\(\d+\)", state[1][2]), state
    assert state[1][3:] == ["range", "Stable", "2", "2", "2"]
    assert consumer_groups[0] == ["GROUP", "TYPE"]
    assert [group, "Consumer"] in consumer_groups[1:]
    assert classic_groups[0] == ["GROUP", "TYPE"]
    assert all(row[0] != group for row in classic_groups[1:])
    for m in members:
        m.close()
        assert m.errors == []


# -- the group's records in __consumer_offsets ----------------------------------------


def test_group_records_in_consumer_offsets(member: MemberFactory, bootstrap: str) -> None:
    """What a consumer group leaves in __consumer_offsets, read back with Kafka's own serde
    (tests/java/GroupRecords.java): Kafka's record types and versions, in Kafka's order, from
    one member's join, commits and leave."""
    topic, group = topic_name("records"), group_name()
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(f"k{i}", "v", None, i % 2) for i in range(4)])
    m = member(bootstrap, group, "recorder")
    m.consumer.subscribe([topic])
    poll_until([m], lambda: len(m.received) == 4, "4 records")
    m.consumer.commit(asynchronous=False)
    m.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic_id = str(admin.describe_topics(TopicCollection([topic]))[topic].result(15).topic_id)
    # Kafka prints a Uuid in URL-safe base64, librdkafka in the standard alphabet.
    topic_id = topic_id.replace("+", "-").replace("/", "_")

    out = run_java("GroupRecords", [require_kafka4()], bootstrap, group)
    assert out.get("done") == "true", out
    assert not any(k.startswith("undecodable.") for k in out), out

    def masked(value: str) -> str:
        value = value.replace(topic_id, "TOPIC_ID")
        value = re.sub(r"commitTimestamp=\d+", "commitTimestamp=T", value)
        return re.sub(r"metadataHash=-?[1-9]\d*", "metadataHash=HASH", value)

    records = [
        (out[f"record.{n}"], masked(out.get(f"fields.{n}", ""))) for n in range(int(out["records"]))
    ]
    assignment = "[TopicPartitions(topicId=TOPIC_ID, partitions=[0, 1])]"
    offset = (
        "OffsetCommitValue(offset=2, leaderEpoch=0, metadata='', commitTimestamp=T, "
        "expireTimestamp=-1, topicId=AAAAAAAAAAAAAAAAAAAAAA)"
    )
    expected = [
        (
            "ConsumerGroupMemberMetadataKey ConsumerGroupMemberMetadataValue@0",
            "ConsumerGroupMemberMetadataValue(instanceId=null, rackId=null, clientId='recorder', "
            f"clientHost='/127.0.0.1', subscribedTopicNames=[{topic}], subscribedTopicRegex='', "
            "rebalanceTimeoutMs=300000, serverAssignor=null, classicMemberMetadata=null)",
        ),
        (
            "ConsumerGroupMetadataKey ConsumerGroupMetadataValue@0",
            "ConsumerGroupMetadataValue(epoch=1, metadataHash=HASH)",
        ),
        (
            "ConsumerGroupTargetAssignmentMemberKey ConsumerGroupTargetAssignmentMemberValue@0",
            "ConsumerGroupTargetAssignmentMemberValue("
            "topicPartitions=[TopicPartition(topicId=TOPIC_ID, partitions=[0, 1])])",
        ),
        (
            "ConsumerGroupTargetAssignmentMetadataKey ConsumerGroupTargetAssignmentMetadataValue@0",
            "ConsumerGroupTargetAssignmentMetadataValue(assignmentEpoch=1)",
        ),
        (
            "ConsumerGroupCurrentMemberAssignmentKey ConsumerGroupCurrentMemberAssignmentValue@0",
            "ConsumerGroupCurrentMemberAssignmentValue(memberEpoch=1, previousMemberEpoch=0, "
            f"state=0, assignedPartitions={assignment}, partitionsPendingRevocation=[])",
        ),
        ("OffsetCommitKey OffsetCommitValue@4", offset),
        ("OffsetCommitKey OffsetCommitValue@4", offset),
        ("ConsumerGroupCurrentMemberAssignmentKey tombstone", ""),
        ("ConsumerGroupTargetAssignmentMemberKey tombstone", ""),
        ("ConsumerGroupMemberMetadataKey tombstone", ""),
        (
            "ConsumerGroupMetadataKey ConsumerGroupMetadataValue@0",
            "ConsumerGroupMetadataValue(epoch=2, metadataHash=0)",
        ),
    ]
    if bootstrap in KBROKER_NODES:
        expected = _as_kbroker_writes(expected, topic)
    assert records == expected


# The differences kbroker means (both sides are Kafka's schemas, read by Kafka's serde):
# - it keeps the subscribed topics in ConsumerGroupPartitionMetadata records (Kafka 3.x's,
#   which Kafka 4.1 reads but replaced with a hash of them in the group's record, whose
#   algorithm kbroker does not reproduce: its metadataHash stays 0);
# - it writes offset commits as OffsetCommitValue v3, which the Kafka 3.9.1 brokers of a
#   mixed cluster read (v4 adds only a tagged topic id).
def _as_kbroker_writes(kafka: list[tuple[str, str]], topic: str) -> list[tuple[str, str]]:
    partitions = (
        "ConsumerGroupPartitionMetadataKey ConsumerGroupPartitionMetadataValue@0",
        "ConsumerGroupPartitionMetadataValue(topics=[TopicMetadata(topicId=TOPIC_ID, "
        f"topicName='{topic}', numPartitions=2, partitionMetadata=[])])",
    )
    empty = (partitions[0], "ConsumerGroupPartitionMetadataValue(topics=[])")
    out = []
    for kind, fields in kafka:
        fields = fields.replace("metadataHash=HASH", "metadataHash=0")
        if kind == "OffsetCommitKey OffsetCommitValue@4":
            kind = "OffsetCommitKey OffsetCommitValue@3"
        if kind.startswith("ConsumerGroupMetadataKey "):
            out.append(partitions if "epoch=1" in fields else empty)
        out.append((kind, fields))
    return out


# -- refusals -----------------------------------------------------------------------


def test_unknown_assignor_and_unknown_group(member: MemberFactory, bootstrap: str) -> None:
    topic = topic_name("refused")
    create_topic(bootstrap, topic, 1)
    m = member(bootstrap, group_name(), "bogus", **{"group.remote.assignor": "bogus"})
    m.consumer.subscribe([topic])
    poll_until([m], lambda: bool(m.errors), "an error")
    # UNSUPPORTED_ASSIGNOR (112) in the heartbeat's answer: fatal to librdkafka.
    assert [(e.code(), e.fatal()) for e in m.errors] == [(KafkaError._FATAL, False)]
    assert "The assignor or its version range is not supported" in m.errors[0].str()
    assert m.partitions() == []

    # An unknown group: ConsumerGroupDescribe says GROUP_ID_NOT_FOUND; librdkafka then asks
    # DescribeGroups (a dead classic group), the Java client reports it not found.
    missing = group_name()
    view = describe(bootstrap, missing)
    assert (view.type.name, view.state.name, view.members) == ("CLASSIC", "DEAD", [])
    described = run_java("ConsumerProtocol", [require_kafka4()], "describe", bootstrap, missing)
    assert described == {"error": "GroupIdNotFoundException", "done": "true"}


# -- offset commits and fetches checked against the member epoch ----------------------


def commit_offset(
    bootstrap: str, version: int, group: str, member_id: str, epoch: int, topic: str, offset: int
) -> int:
    """OffsetCommit of partition 0 at ``offset`` as member ``member_id`` at ``epoch``: the
    partition's error code."""
    topics = [
        OffsetCommitRequest.Topic(
            name=topic,
            partitions=[
                OffsetCommitRequest.Topic.Partition(
                    partition_index=0, committed_offset=offset, committed_metadata=""
                )
            ],
        )
    ]
    body = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, topics=topics
    )
    with BrokerClient(bootstrap) as client:
        answer = client.request(ApiKey.OFFSET_COMMIT, version, body)
    return int(answer.topics[0].partitions[0].error_code)


def fetch_offset(
    bootstrap: str, group: str, member_id: str | None, epoch: int, topic: str
) -> tuple[int, list[tuple[int, int, int]]]:
    """OffsetFetch v9 of partition 0 as member ``member_id`` at ``epoch``: (the group's
    error code, [(partition, offset, error code)])."""
    asked = OffsetFetchRequest.Group(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        topics=[OffsetFetchRequest.Topic(name=topic, partition_indexes=[0])],
    )
    with BrokerClient(bootstrap) as client:
        answer = client.request(
            ApiKey.OFFSET_FETCH, 9, OffsetFetchRequest(groups=[asked], require_stable=True)
        )
    found = answer.groups[0]
    return int(found.error_code), [
        (p.partition_index, p.committed_offset, p.error_code)
        for t in found.topics
        for p in t.partitions
    ]


def test_offsets_checked_against_the_member_epoch(member: MemberFactory, bootstrap: str) -> None:
    """OffsetCommit v9+ and OffsetFetch v9+ carry the member id and epoch; a consumer group
    takes them only from a current member at its current epoch (the single member of a new
    group has epoch 1). The admin form (no member) is for an empty group only, but reads."""
    e = ErrorCode
    topic, group = topic_name("epoch"), group_name()
    create_topic(bootstrap, topic, 2)
    m = member(bootstrap, group, "epoch")
    m.consumer.subscribe([topic])
    poll_until([m], lambda: m.partitions() == [0, 1], "the member's partitions")
    me = m.consumer.memberid()
    commits = {
        epoch: commit_offset(bootstrap, 9, group, me, epoch, topic, 5) for epoch in (0, 2, 1)
    }
    # Any other epoch than the member's is stale, older or newer.
    assert commits == {0: e.STALE_MEMBER_EPOCH, 2: e.STALE_MEMBER_EPOCH, 1: e.NONE}
    assert commit_offset(bootstrap, 9, group, "not-a-member", 1, topic, 6) == e.UNKNOWN_MEMBER_ID
    assert commit_offset(bootstrap, 9, group, "", -1, topic, 6) == e.UNKNOWN_MEMBER_ID
    # A consumer-protocol member commits with OffsetCommit v9 or later only.
    assert commit_offset(bootstrap, 8, group, me, 1, topic, 6) == e.UNSUPPORTED_VERSION

    assert fetch_offset(bootstrap, group, me, 1, topic) == (e.NONE, [(0, 5, e.NONE)])
    assert fetch_offset(bootstrap, group, me, 0, topic) == (e.STALE_MEMBER_EPOCH, [])
    assert fetch_offset(bootstrap, group, me, 2, topic) == (e.STALE_MEMBER_EPOCH, [])
    assert fetch_offset(bootstrap, group, "not-a-member", 1, topic) == (e.UNKNOWN_MEMBER_ID, [])
    # No member id (null) is an admin's read; an empty one is a member unknown.
    assert fetch_offset(bootstrap, group, None, -1, topic) == (e.NONE, [(0, 5, e.NONE)])
    assert fetch_offset(bootstrap, group, "", -1, topic) == (e.UNKNOWN_MEMBER_ID, [])

    m.close()
    # The group is empty: the admin form commits, the old member is unknown.
    assert commit_offset(bootstrap, 9, group, "", -1, topic, 7) == e.NONE
    assert commit_offset(bootstrap, 9, group, me, 1, topic, 8) == e.UNKNOWN_MEMBER_ID
    assert fetch_offset(bootstrap, group, None, -1, topic) == (e.NONE, [(0, 7, e.NONE)])
    assert m.errors == []


# -- classic and consumer-protocol members in one group (e) ----------------------------


def test_migration_policy_default(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    broker = str(next(iter(admin.list_topics(timeout=10).brokers)))
    resource = ConfigResource(ConfigResource.Type.BROKER, broker)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    assert configs["group.consumer.migration.policy"].value == "bidirectional"


@pytest.mark.parametrize("first_protocol", ["classic", "consumer"])
def test_classic_and_consumer_members_meet(
    member: MemberFactory, bootstrap: str, first_protocol: str
) -> None:
    """With the bidirectional migration policy the group is a consumer group while a
    consumer-protocol member is in it (the classic member stays, rebalanced by the
    broker's assignor) and turns classic again when only classic members are left."""
    second_protocol = "consumer" if first_protocol == "classic" else "classic"
    topic, group = topic_name("meet"), group_name()
    create_topic(bootstrap, topic, PARTITIONS)
    first = member(bootstrap, group, "first", first_protocol)
    first.consumer.subscribe([topic])
    poll_until([first], lambda: first.partitions() == [0, 1, 2, 3], "the first member")
    first_type = "CLASSIC" if first_protocol == "classic" else "CONSUMER"
    first_assignor = "range" if first_protocol == "classic" else "uniform"
    assert group_view(bootstrap, group) == (
        first_type,
        "STABLE",
        first_assignor,
        [("first", [0, 1, 2, 3])],
    )

    second = member(bootstrap, group, "second", second_protocol)
    second.consumer.subscribe([topic])
    poll_until([first, second], split_between([first, second], topic), "a split")
    view = group_view(bootstrap, group)
    assert view[:3] == ("CONSUMER", "STABLE", "uniform")
    assert [(name, len(parts)) for name, parts in view[3]] == [("first", 2), ("second", 2)]
    # The Java Admin client tells the classic member from the consumer-protocol one
    # (ConsumerGroupDescribe v1's MemberType, shown as MemberDescription.upgraded).
    described = run_java("ConsumerProtocol", [require_kafka4()], "describe", bootstrap, group)
    assert described["describe.type"] == "Consumer"
    assert described["describe.members"] == "2"
    assert described["member.first.upgraded"] == str(first_protocol == "consumer").lower()
    assert described["member.second.upgraded"] == str(second_protocol == "consumer").lower()
    # Member ids: 22 characters (a Uuid in base64) for members that joined a consumer group,
    # whatever their protocol; a classic group's member keeps its "<client.id>-<uuid>".
    assert described["member.second.idLength"] == "22"
    assert described["member.first.idLength"] == ("42" if first_protocol == "classic" else "22")

    # The second member leaves: the first holds everything, in a group of its own kind again.
    second.close()
    poll_until([first], lambda: first.partitions() == [0, 1, 2, 3], "the first alone")
    wait_for(
        lambda: (
            group_view(bootstrap, group)
            == (first_type, "STABLE", first_assignor, [("first", [0, 1, 2, 3])])
        ),
        "the group's own kind again",
        15,
    )
    first.close()
    assert group_view(bootstrap, group)[:2] == (first_type, "EMPTY")
    assert first.errors == second.errors == []


def test_empty_classic_group_becomes_consumer_group(member: MemberFactory, bootstrap: str) -> None:
    topic, group = topic_name("upgrade"), group_name()
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, keyed_records(topic, 0, 8))
    classic = member(bootstrap, group, "classic", "classic")
    classic.consumer.subscribe([topic])
    poll_until([classic], lambda: len(classic.received) == 8, "8 records")
    classic.consumer.commit(asynchronous=False)
    classic.close()
    assert group_view(bootstrap, group)[:2] == ("CLASSIC", "EMPTY")
    assert group_offsets(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 2)

    produce(bootstrap, topic, keyed_records(topic, 8, 4))
    upgraded = member(bootstrap, group, "upgraded")
    upgraded.consumer.subscribe([topic])
    poll_until([upgraded], lambda: len(upgraded.received) == 4, "the 4 new records")
    upgraded.poll(1.0)  # nothing older comes after them
    assert sorted(upgraded.keys()) == ["k10", "k11", "k8", "k9"]
    assert group_view(bootstrap, group) == (
        "CONSUMER",
        "STABLE",
        "uniform",
        [("upgraded", [0, 1, 2, 3])],
    )
    upgraded.consumer.commit(asynchronous=False)
    assert group_offsets(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 3)
    upgraded.close()
    assert classic.errors == upgraded.errors == []


# -- a client without KIP-848 (f) ------------------------------------------------------


def test_classic_only_client(bootstrap: str) -> None:
    topic, group = topic_name("classic"), group_name()
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, keyed_records(topic, 0, 12))
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
    )
    try:
        keys: list[str] = []
        deadline = time.monotonic() + 30
        while len(keys) < 12 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                keys.extend(r.key.decode() for r in records)
        assert sorted(keys) == sorted(f"k{i}" for i in range(12))
        consumer.commit()
        view = group_view(bootstrap, group)
        assert view[:2] == ("CLASSIC", "STABLE")
        assert [(name, parts) for name, parts in view[3]] == [(view[3][0][0], [0, 1, 2, 3])]
    finally:
        consumer.close()
    assert group_offsets(bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 3)
    assert group_view(bootstrap, group)[:2] == ("CLASSIC", "EMPTY")
