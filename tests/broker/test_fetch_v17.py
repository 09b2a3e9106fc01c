"""Fetch v17, the version a Kafka 3.9 follower (and a 3.9 Java consumer) sends: by topic id,
with the follower's ReplicaState and ReplicaDirectoryId tagged fields accepted."""

from __future__ import annotations

import uuid

import pytest

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import FetchRequest, MetadataRequest
from tests.helpers import BrokerProcess, Wire, produce_req

pytestmark = pytest.mark.timeout(60)

TOPIC = "v17"


def test_fetch_v17_by_topic_id(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    try:
        meta = w.request(
            ApiKey.METADATA,
            12,
            MetadataRequest(
                topics=[MetadataRequest.Topic(name=TOPIC)], allow_auto_topic_creation=True
            ),
        )
        topic_id = meta.topics[0].topic_id
        assert topic_id.int != 0
        batch = build_batch([(None, b"v%d" % i, []) for i in range(3)])
        assert w.request(ApiKey.PRODUCE, 9, produce_req(TOPIC, batch)).responses
        for state, directory in [(None, uuid.UUID(int=0)), ((-1, -1), uuid.uuid4())]:
            part = FetchRequest.Topic.Partition(
                partition=0,
                fetch_offset=0,
                partition_max_bytes=1 << 20,
                replica_directory_id=directory,
            )
            req = FetchRequest(
                replica_state=None if state is None else FetchRequest.ReplicaState(*state),
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                topics=[FetchRequest.Topic(topic_id=topic_id, partitions=[part])],
            )
            resp = w.request(ApiKey.FETCH, 17, req)
            assert resp.error_code == ErrorCode.NONE
            [t] = resp.responses
            [p] = t.partitions
            assert (t.topic_id, p.error_code, p.high_watermark) == (topic_id, ErrorCode.NONE, 3)
            records = bytes(p.records)
            # the same batch; only its partition leader epoch (bytes 12-15) is the broker's
            assert (records[:12], records[16:]) == (batch[:12], batch[16:])
    finally:
        w.close()


def test_fetch_as_a_broker_that_is_no_replica_is_refused(broker: BrokerProcess) -> None:
    """A fetch naming a replica id reads up to the log end, past the high watermark: only
    a replica of the partition may (NOT_LEADER_OR_FOLLOWER otherwise, as Kafka answers)."""
    w = Wire(broker.bootstrap)
    try:
        batch = build_batch([(None, b"x", [])])
        assert w.request(ApiKey.PRODUCE, 9, produce_req(TOPIC, batch)).responses
        for version, fields in ((12, {"replica_id": 7}), (17, {"replica_state": (7, 1)})):
            part = FetchRequest.Topic.Partition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
            )
            state = fields.get("replica_state")
            req = FetchRequest(
                replica_id=fields.get("replica_id", -1),
                replica_state=None if state is None else FetchRequest.ReplicaState(*state),
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                topics=[FetchRequest.Topic(topic=TOPIC, topic_id=_topic_id(w), partitions=[part])],
            )
            resp = w.request(ApiKey.FETCH, version, req)
            [t] = resp.responses
            [p] = t.partitions
            assert (p.error_code, bytes(p.records)) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, b"")
    finally:
        w.close()


def _topic_id(w: Wire) -> uuid.UUID:
    meta = w.request(
        ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.Topic(name=TOPIC)])
    )
    return meta.topics[0].topic_id  # type: ignore[no-any-return]
