"""APIs kbroker declares get their proper answer, never a closed connection: SaslHandshake
and SaslAuthenticate (no SASL yet), OffsetForLeaderEpoch, ElectLeaders and the reassignment
APIs (as Kafka answers them with one broker). Real clients where one sends the request
(confluent-kafka's SASL, kafka-python's admin client), kbroker's own codec otherwise."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.errors import UnknownTopicOrPartitionError

from kbroker._kbroker import build_batch
from kbroker.handlers.offset_for_leader_epoch import end_offset_for_epoch
from kbroker.log import Log, LogConfig, TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol import APIS, ApiKey, ErrorCode
from kbroker.protocol.messages.admin import ElectLeadersRequest
from kbroker.protocol.messages.core import ApiVersionsRequest, OffsetForLeaderEpochRequest
from kbroker.protocol.messages.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kbroker.replication.partition import Partition
from tests.helpers import BrokerProcess, Wire, metadata, produce_req

pytestmark = pytest.mark.timeout(120)

TOPIC = "apis"


@pytest.fixture
def wire(broker: BrokerProcess) -> Any:
    w = Wire(broker.bootstrap)
    metadata(w, [TOPIC])
    yield w
    w.close()


def test_every_declared_api_is_advertised(wire: Wire) -> None:
    resp = wire.request(
        ApiKey.API_VERSIONS,
        3,
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert advertised == {int(s.key): (s.min_version, s.max_version) for s in APIS}


def test_sasl_on_a_plaintext_listener_is_refused_with_its_errors(wire: Wire) -> None:
    for version in (0, 1):
        hs = wire.request(ApiKey.SASL_HANDSHAKE, version, SaslHandshakeRequest(mechanism="PLAIN"))
        assert (hs.error_code, hs.mechanisms) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, [])
    for version in (0, 1, 2):
        auth = wire.request(
            ApiKey.SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=b"\0u\0p")
        )
        assert auth.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert "this listener takes no SASL authentication" in auth.error_message
    # The connection still serves.
    assert metadata(wire, [TOPIC]).topics[0].error_code == 0


def test_a_sasl_client_is_told_why(broker: BrokerProcess) -> None:
    errors: list[str] = []
    seen = threading.Event()

    def on_error(err: Any) -> None:
        errors.append(err.str())
        seen.set()

    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "p",
            "error_cb": on_error,
        }
    )
    deadline = time.monotonic() + 20
    while not seen.is_set() and time.monotonic() < deadline:
        p.poll(0.2)
    assert any(
        "Unsupported SASL mechanism: broker's supported mechanisms:  " in e for e in errors
    ), errors


def epoch_request(current: int, epoch: int, topic: str = TOPIC, partition: int = 0) -> Any:
    P = OffsetForLeaderEpochRequest.Topic.Partition
    return OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            OffsetForLeaderEpochRequest.Topic(
                topic=topic,
                partitions=[
                    P(partition=partition, current_leader_epoch=current, leader_epoch=epoch)
                ],
            )
        ],
    )


def test_offset_for_leader_epoch(wire: Wire) -> None:
    batch = build_batch([(None, b"v%d" % i, []) for i in range(5)])
    assert wire.request(ApiKey.PRODUCE, 9, produce_req(TOPIC, batch)).responses
    for version in (2, 3, 4):

        def ask(current: int, epoch: int, version: int = version, **kw: Any) -> Any:
            r = wire.request(
                ApiKey.OFFSET_FOR_LEADER_EPOCH, version, epoch_request(current, epoch, **kw)
            )
            p = r.topics[0].partitions[0]
            return p.error_code, p.leader_epoch, p.end_offset

        assert ask(0, 0) == (ErrorCode.NONE, 0, 5)
        assert ask(-1, 0) == (ErrorCode.NONE, 0, 5)
        assert ask(0, 7) == (ErrorCode.NONE, -1, -1)
        assert ask(0, -1) == (ErrorCode.NONE, -1, -1)
        assert ask(3, 0)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert ask(0, 0, partition=9)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert ask(0, 0, topic="nope")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_end_offset_of_earlier_epochs(tmp_path: Path) -> None:
    """As Kafka's leader epoch cache answers (the log's cache, kept by appends and leaders)."""
    lg = Log.open(tmp_path, TopicPartition("t", 0), LogConfig())
    try:
        for epoch, n in [(0, 3), (1, 2), (3, 2)]:
            lg.append(build_batch([(None, b"x", [])] * n), epoch)
        state = PartitionState(replicas=[0], leader=0, leader_epoch=3, isr=[0])
        partition = Partition(lg, state, 0)
        answers = {e: end_offset_for_epoch(partition, e) for e in range(-1, 6)}
        assert answers == {
            -1: (-1, -1),
            0: (0, 3),
            1: (1, 5),
            2: (1, 5),  # no batch of epoch 2: the floor is 1, epoch 3 starts at 5
            3: (3, 7),
            4: (-1, -1),
            5: (-1, -1),
        }
        # Leading again in epoch 5 records where it starts; epoch 4 wrote nothing.
        partition.become_leader(PartitionState(replicas=[0], leader=0, leader_epoch=5, isr=[0]))
        assert end_offset_for_epoch(partition, 4) == (3, 7)
        assert end_offset_for_epoch(partition, 5) == (5, 7)
    finally:
        lg.close()


def test_elect_leaders_with_kafka_python(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        w = Wire(broker.bootstrap)
        metadata(w, [TOPIC])
        w.close()
        for election_type in (0, 1):
            resp = admin.elect_leaders(election_type, {TOPIC: [0], "nope": [0]}, raise_errors=False)
            got = {(r[0], p[0]): p[1] for r in resp.replica_election_results for p in r[1]}
            assert got == {
                (TOPIC, 0): ErrorCode.ELECTION_NOT_NEEDED,
                ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            # kafka-python names every partition itself when given none.
            every = admin.elect_leaders(election_type, raise_errors=False)
            assert {p[1] for r in every.replica_election_results for p in r[1]} == {
                ErrorCode.ELECTION_NOT_NEEDED
            }
    finally:
        admin.close()


def test_elect_leaders_v0(wire: Wire) -> None:
    req = ElectLeadersRequest(
        topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=TOPIC, partitions=[0, 0, 4])],
        timeout_ms=1000,
    )
    r = wire.request(ApiKey.ELECT_LEADERS, 0, req)
    [res] = r.replica_election_results
    assert [(p.partition_id, p.error_code, p.error_message) for p in res.partition_result] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (4, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {TOPIC}-4"),
    ]
    # Null asks for every partition; those needing no election are left out, as in Kafka.
    every = ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=1000)
    r = wire.request(ApiKey.ELECT_LEADERS, 2, every)
    assert r.error_code == ErrorCode.NONE
    assert [(t.topic, t.partition_result) for t in r.replica_election_results] == [(TOPIC, [])]


def test_reassignments_with_kafka_python(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory()
    w = Wire(b.bootstrap)
    metadata(w, [TOPIC])
    w.close()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        result = admin.alter_partition_reassignments(
            {
                KTP(TOPIC, 0): [0],  # where it is: done at once
                KTP("nope", 0): [0],
            }
        )
        assert result[KTP(TOPIC, 0)] is None
        assert result[KTP("nope", 0)] is UnknownTopicOrPartitionError
        for replicas, error in [([1], "broker 1"), ([0, 0], "duplicate")]:
            bad = admin.alter_partition_reassignments({KTP(TOPIC, 0): replicas})
            assert bad[KTP(TOPIC, 0)].errno == ErrorCode.INVALID_REPLICA_ASSIGNMENT, error
        cancel = admin.alter_partition_reassignments({KTP(TOPIC, 0): None})
        assert cancel[KTP(TOPIC, 0)].errno == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments({TOPIC: [0]}) == {}
    finally:
        admin.close()
