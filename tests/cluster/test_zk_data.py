"""The znode codecs: Kafka 3.9.1's own bytes decode, every value round-trips, and any other
input is refused with ZkDataError alone (property tests over bytes and over JSON values)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.cluster import zk_data as d
from kbroker.cluster.errors import ZkDataError
from kbroker.log.log import TopicPartition
from kbroker.metadata.model import PartitionState

# Bytes a live Kafka 3.9.1 broker wrote (read with kazoo from its chroot).
KAFKA_REGISTRATION = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://127.0.0.1:29092"],"jmx_port":-1,"port":29092,'
    b'"host":"127.0.0.1","version":5,"timestamp":"1795554102096"}'
)
KAFKA_CLUSTER_ID = b'{"version":"1","id":"v6Up0jTWTrCkSjvuh4ihpQ"}'
KAFKA_ASSIGNMENT = (
    b'{"partitions":{"0":[7],"1":[7],"2":[7]},"topic_id":"oHGgMVQkRNKj-zoebdShhw",'
    b'"adding_replicas":{},"removing_replicas":{},"version":3}'
)
KAFKA_STATE = b'{"controller_epoch":1,"leader":7,"version":1,"leader_epoch":0,"isr":[7]}'
KAFKA_CONTROLLER = (
    b'{"version":2,"brokerid":7,"timestamp":"1795554102231","kraftControllerEpoch":-1}'
)
KAFKA_TOPIC_CONFIG = b'{"version":1,"config":{"retention.ms":"12345"}}'
KAFKA_CONFIG_CHANGE = b'{"version":2,"entity_path":"brokers/<default>"}'
KAFKA_PID_BLOCK = b'{"version":1,"broker":7,"block_start":"0","block_end":"999"}'
KAFKA_FEATURES = b'{"features":{},"version":2,"status":1}'


def test_what_kafka_wrote_decodes() -> None:
    reg = d.decode_broker_registration(7, KAFKA_REGISTRATION)
    assert reg.endpoints == (d.EndPoint("PLAINTEXT", "127.0.0.1", 29092, "PLAINTEXT"),)
    assert (reg.jmx_port, reg.timestamp_ms, reg.rack, reg.version) == (-1, 1795554102096, None, 5)
    assert d.decode_cluster_id(KAFKA_CLUSTER_ID) == "v6Up0jTWTrCkSjvuh4ihpQ"
    assignment = d.decode_topic_assignment(KAFKA_ASSIGNMENT)
    assert assignment.replicas() == {0: [7], 1: [7], 2: [7]}
    assert d.encode_topic_assignment(assignment).count(b"oHGgMVQkRNKj-zoebdShhw") == 1
    assert d.decode_partition_state(KAFKA_STATE, zk_version=3) == d.LeaderAndIsr(
        7, 0, (7,), 1, 0, 3
    )
    assert d.decode_controller(KAFKA_CONTROLLER) == d.ControllerRegistration(7, 1795554102231, -1)
    assert d.decode_controller_epoch(b"1") == 1
    assert d.decode_entity_config(KAFKA_TOPIC_CONFIG).as_dict() == {"retention.ms": "12345"}
    change = d.decode_config_change(KAFKA_CONFIG_CHANGE)
    assert (change.entity_type, change.entity_name) == ("brokers", "<default>")
    assert d.decode_producer_id_block(KAFKA_PID_BLOCK) == d.ProducerIdBlock(7, 0, 999)
    assert d.decode_features(KAFKA_FEATURES) == d.FinalizedFeatures(True, ())


def test_our_bytes_match_kafkas_field_for_field() -> None:
    """Same JSON objects as Kafka's (key order aside) for the same values."""
    reg = d.decode_broker_registration(7, KAFKA_REGISTRATION)
    ours = d.encode_broker_registration(reg, timestamp_ms=1795554102096)
    assert json.loads(ours) == json.loads(KAFKA_REGISTRATION)
    for encode, decode, kafka in [
        (d.encode_topic_assignment, d.decode_topic_assignment, KAFKA_ASSIGNMENT),
        (d.encode_partition_state, d.decode_partition_state, KAFKA_STATE),
        (d.encode_entity_config, d.decode_entity_config, KAFKA_TOPIC_CONFIG),
        (d.encode_config_change, d.decode_config_change, KAFKA_CONFIG_CHANGE),
        (d.encode_producer_id_block, d.decode_producer_id_block, KAFKA_PID_BLOCK),
        (d.encode_features, d.decode_features, KAFKA_FEATURES),
    ]:
        assert json.loads(encode(decode(kafka))) == json.loads(kafka)
    assert json.loads(
        d.encode_controller(d.decode_controller(KAFKA_CONTROLLER), 1795554102231)
    ) == (json.loads(KAFKA_CONTROLLER))
    assert json.loads(d.encode_cluster_id("v6Up0jTWTrCkSjvuh4ihpQ")) == json.loads(KAFKA_CLUSTER_ID)


def test_older_versions_kafka_still_reads() -> None:
    v1 = d.decode_broker_registration(
        3, b'{"version":1,"host":"h","port":9092,"jmx_port":9999,"timestamp":"5"}'
    )
    assert v1.endpoints == (d.EndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),)
    # v2-v3: endpoints without the protocol map (listener names are protocol names).
    v3 = d.decode_broker_registration(
        3,
        b'{"version":3,"host":"h","port":1,"jmx_port":-1,"rack":"r1",'
        b'"endpoints":["PLAINTEXT://h:1","SSL://[::1]:2"]}',
    )
    assert v3.endpoints[1] == d.EndPoint("SSL", "::1", 2, "SSL")
    assert v3.rack == "r1" and v3.timestamp_ms is None
    assert v3.endpoints[1].connection_string == "SSL://[::1]:2"
    old_controller = d.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"9"}')
    assert old_controller == d.ControllerRegistration(2, 9, -1)
    no_id = d.decode_topic_assignment(b'{"version":1,"partitions":{"1":[1,2],"0":[2,1]}}')
    assert no_id.topic_id is None and [a.partition for a in no_id.partitions] == [0, 1]
    v1_change = d.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"t"}')
    assert v1_change.entity_path == "topics/t"
    recovering = d.decode_partition_state(
        b'{"version":1,"leader":1,"leader_epoch":4,"isr":[1],"controller_epoch":2,'
        b'"leader_recovery_state":1}'
    )
    assert recovering.leader_recovery_state == d.LEADER_RECOVERING
    assert d.decode_entity_config(b"") == d.EntityConfig()
    assert d.decode_producer_id_block(b"") is None


def test_paths() -> None:
    assert d.broker_path(3) == "/brokers/ids/3"
    assert d.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert d.broker_config_path(None) == "/config/brokers/<default>"
    assert d.broker_config_path(1) == "/config/brokers/1"
    assert d.topic_config_path("t") == "/config/topics/t"
    assert d.delete_topic_path("t") == "/admin/delete_topics/t"
    assert d.sequence_number("config_change_0000000042", d.CONFIG_CHANGE_PREFIX) == 42
    assert d.sequence_number("/isr_change_notification/isr_change_0000000001", "isr_change_") == 1
    for bad in ["", "a/b", "..", "x" * 256]:
        with pytest.raises(ZkDataError):
            d.topic_path(bad)
    with pytest.raises(ZkDataError):
        d.broker_path(-1)
    with pytest.raises(ZkDataError):
        d.sequence_number("config_change_x", d.CONFIG_CHANGE_PREFIX)


def test_partition_state_joins_the_brokers_view() -> None:
    leadership = d.LeaderAndIsr(2, 5, (2, 3), 7, zk_version=4)
    state = leadership.to_partition_state([2, 3, 4])
    assert state == PartitionState(
        replicas=[2, 3, 4], leader=2, leader_epoch=5, isr=[2, 3], controller_epoch=7, version=4
    )
    assert d.LeaderAndIsr.from_partition_state(state) == leadership


# -- round trips ----------------------------------------------------------------------

ids = st.integers(0, d.INT32_MAX)
epochs = st.integers(-1, d.INT32_MAX)
names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)
hosts = st.sampled_from(["127.0.0.1", "broker-1.example", "::1", ""])
endpoints = st.builds(
    d.EndPoint,
    listener=st.from_regex(r"[A-Z][A-Z_]{0,10}", fullmatch=True),
    host=hosts,
    port=st.integers(0, 65535),
    security_protocol=st.sampled_from(d.SECURITY_PROTOCOLS),
)


@st.composite
def registrations(draw: st.DrawFn) -> d.BrokerRegistration:
    eps = draw(st.lists(endpoints, max_size=4, unique_by=lambda e: e.listener))
    features = draw(
        st.lists(
            st.builds(d.SupportedFeature, names, st.integers(0, 10), st.integers(0, 10)),
            unique_by=lambda f: f.name,
            max_size=3,
        )
    )
    return d.BrokerRegistration(
        broker_id=draw(ids),
        endpoints=tuple(eps),
        rack=draw(st.none() | names),
        jmx_port=draw(st.integers(-1, 65535)),
        timestamp_ms=draw(st.integers(0, 2**62)),
        features=tuple(features),
    )


@given(registrations())
def test_registration_round_trips(reg: d.BrokerRegistration) -> None:
    data = d.encode_broker_registration(reg, reg.timestamp_ms or 0)
    back = d.decode_broker_registration(reg.broker_id, data)
    assert back == reg
    plain = reg.plaintext
    obj = json.loads(data)
    assert (obj["host"], obj["port"]) == ((plain.host, plain.port) if plain else (None, -1))


replica_lists = st.lists(ids, max_size=5).map(tuple)


@st.composite
def assignments(draw: st.DrawFn) -> d.TopicAssignment:
    partitions = draw(st.lists(st.integers(0, d.INT32_MAX), unique=True, max_size=6))
    return d.TopicAssignment(
        tuple(
            d.ReplicaAssignment(p, draw(replica_lists), draw(replica_lists), draw(replica_lists))
            for p in sorted(partitions)
        ),
        draw(st.none() | st.uuids()),
    )


@given(assignments())
def test_assignment_round_trips(assignment: d.TopicAssignment) -> None:
    assert d.decode_topic_assignment(d.encode_topic_assignment(assignment)) == assignment


@given(ids, epochs, st.lists(ids, max_size=5), epochs, st.sampled_from([0, 1]))
def test_partition_state_round_trips(
    leader: int, epoch: int, isr: list[int], controller_epoch: int, recovery: int
) -> None:
    state = d.LeaderAndIsr(leader, epoch, tuple(isr), controller_epoch, recovery)
    assert d.decode_partition_state(d.encode_partition_state(state)) == state
    assert ("leader_recovery_state" in json.loads(d.encode_partition_state(state))) == bool(
        recovery
    )


@given(ids, st.integers(0, 2**62), st.integers(-1, 100), st.integers(0, d.INT32_MAX))
def test_controller_round_trips(broker: int, ts: int, kraft: int, epoch: int) -> None:
    reg = d.ControllerRegistration(broker, ts, kraft)
    assert d.decode_controller(d.encode_controller(reg, ts)) == reg
    assert d.decode_controller_epoch(d.encode_controller_epoch(epoch)) == epoch


@given(st.dictionaries(names, st.text(max_size=30), max_size=5), names)
def test_config_round_trips(configs: dict[str, str], name: str) -> None:
    config = d.EntityConfig.of(configs)
    assert d.decode_entity_config(d.encode_entity_config(config)).as_dict() == configs
    change = d.ConfigChange(f"topics/{name}")
    assert d.decode_config_change(d.encode_config_change(change)) == change


partition_sets = st.frozensets(st.builds(TopicPartition, names, st.integers(0, d.INT32_MAX)))


@given(partition_sets, st.dictionaries(st.builds(TopicPartition, names, ids), replica_lists))
def test_admin_and_notification_round_trips(
    partitions: frozenset[TopicPartition], moves: dict[TopicPartition, tuple[int, ...]]
) -> None:
    assert d.decode_isr_change(d.encode_isr_change(partitions)) == partitions
    assert (
        d.decode_preferred_replica_election(d.encode_preferred_replica_election(partitions))
        == partitions
    )
    assert d.decode_partition_reassignment(d.encode_partition_reassignment(moves)) == moves


@given(ids, st.integers(0, 2**62), st.integers(1, 10**6))
def test_producer_id_block_round_trips(broker: int, first: int, size: int) -> None:
    block = d.ProducerIdBlock(broker, first, first + size - 1)
    assert d.decode_producer_id_block(d.encode_producer_id_block(block)) == block
    assert block.size == size and block.next_first == first + size


@given(ids)
def test_small_codecs_round_trip(broker: int) -> None:
    assert d.decode_log_dir_event(d.encode_log_dir_event(broker)) == broker
    assert d.decode_cluster_id(d.encode_cluster_id(f"id-{broker}")) == f"id-{broker}"
    features = d.FinalizedFeatures(True, (("metadata.version", 3),))
    assert d.decode_features(d.encode_features(features)) == features


# -- garbage in ------------------------------------------------------------------------

DECODERS: dict[str, Callable[[bytes], object]] = {
    "registration": lambda b: d.decode_broker_registration(1, b),
    "cluster_id": d.decode_cluster_id,
    "assignment": d.decode_topic_assignment,
    "state": d.decode_partition_state,
    "controller": d.decode_controller,
    "controller_epoch": d.decode_controller_epoch,
    "config": d.decode_entity_config,
    "config_change": d.decode_config_change,
    "reassignment": d.decode_partition_reassignment,
    "preferred": d.decode_preferred_replica_election,
    "isr_change": d.decode_isr_change,
    "log_dir_event": d.decode_log_dir_event,
    "pid_block": d.decode_producer_id_block,
    "features": d.decode_features,
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Keys the decoders look for, so generated objects reach past the first check.
KEYS = [
    "version", "host", "port", "jmx_port", "endpoints", "listener_security_protocol_map",
    "rack", "features", "timestamp", "partitions", "topic_id", "adding_replicas",
    "removing_replicas", "leader", "leader_epoch", "isr", "controller_epoch",
    "leader_recovery_state", "brokerid", "kraftControllerEpoch", "config", "entity_path",
    "entity_type", "entity_name", "topic", "partition", "replicas", "broker", "block_start",
    "block_end", "status", "id", "event",
]  # fmt: skip
objects = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8)


def _only_zk_data_error(decode: Callable[[bytes], object], data: bytes) -> None:
    try:
        decode(data)
    except ZkDataError as exc:
        assert str(exc)
    # Anything else propagates and fails the test.


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_raise_only_zk_data_error(name: str, data: bytes) -> None:
    _only_zk_data_error(DECODERS[name], data)


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=80, deadline=None)
@given(obj=objects | json_values)
def test_foreign_json_raises_only_zk_data_error(name: str, obj: Any) -> None:
    _only_zk_data_error(DECODERS[name], json.dumps(obj).encode())


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("registration", b'{"version":5,"jmx_port":-1,"endpoints":["nope"]}', "not an endpoint"),
        ("registration", b'{"version":0,"jmx_port":-1}', "'version'"),
        ("registration", b'{"version":5,"endpoints":[]}', "'jmx_port' is missing"),
        (
            "registration",
            b'{"version":5,"jmx_port":1,"endpoints":["X://h:1"],'
            b'"listener_security_protocol_map":{"X":"TLS"}}',
            "unknown security protocol",
        ),
        ("assignment", b'{"partitions":{"zero":[1]}}', "not a partition number"),
        ("assignment", b'{"partitions":{"0":[1],"00":[2]}}', "listed twice"),
        ("assignment", b'{"partitions":{"0":[true]}}', "broker id"),
        ("assignment", b'{"partitions":{},"topic_id":"550e8400-e29b-41d4-a716"}', "topic_id"),
        ("state", b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1,'
         b'"leader_recovery_state":2}', "leader_recovery_state"),
        ("state", b'{"leader":1.0,"leader_epoch":0,"isr":[1],"controller_epoch":1}', "'leader'"),
        ("controller_epoch", b"{}", "not a decimal epoch"),
        ("controller_epoch", b"99999999999", "not a decimal epoch"),
        ("pid_block", b'{"broker":1,"block_start":"10","block_end":"9"}', "before block_start"),
        ("pid_block", b'{"broker":1,"block_start":"1e3","block_end":"9"}', "decimal string"),
        ("pid_block", b'{"broker":1,"block_start":"0","block_end":"99999999999999999999"}',
         "decimal string"),
        ("config", b'{"version":1,"config":{"a":1}}', "must be a string"),
        ("config_change", b'{"version":2,"entity_path":"topics"}', "<type>/<name>"),
        ("cluster_id", b"\xff\xfe", "not JSON"),
        ("cluster_id", b"[" * 100_000, "not JSON"),
        ("state", b"1" * 5000, "partition state: not JSON"),
        ("state", b"[1]", "expected a JSON object"),
        ("assignment", None, "no data"),
    ],
)  # fmt: skip
def test_garbage_is_named(name: str, data: bytes | None, says: str) -> None:
    decode: Any = DECODERS[name]
    with pytest.raises(ZkDataError, match=says):
        decode(data)


def test_topic_ids_are_kafkas_base64_not_uuid_hex() -> None:
    topic_id = uuid.UUID("a071a031-5424-44d2-a3fb-3a1e6dd4a187")
    data = d.encode_topic_assignment(d.TopicAssignment.of({0: [1]}, topic_id))
    assert json.loads(data)["topic_id"] == "oHGgMVQkRNKj-zoebdShhw"
