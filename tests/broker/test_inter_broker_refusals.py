"""A single kbroker node refuses the inter-broker APIs at every version with Kafka's error
codes, on a connection that keeps serving, and changes nothing: LeaderAndIsr, StopReplica
and UpdateMetadata get STALE_CONTROLLER_EPOCH, ControlledShutdown too (Kafka's
non-controller answer), AlterPartition NOT_CONTROLLER. tests/cluster/test_inter_broker_wire.py
checks these answers against a real Kafka 3.9.1; this test needs no Kafka."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kbroker.protocol import ApiKey, ErrorCode, api
from kbroker.protocol.messages.inter_broker import (
    AlterPartitionRequest,
    ControlledShutdownRequest,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from tests.helpers import BrokerProcess, Wire, metadata, still_serving

pytestmark = pytest.mark.timeout(120)

TOPIC = "refusals"
TOPIC_ID = uuid.UUID(int=42)


def leader_and_isr() -> Any:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name=TOPIC, partition_index=0, leader=7, leader_epoch=9, isr=[7], replicas=[7]
    )
    topic = LeaderAndIsrRequest.TopicState(
        topic_name=TOPIC, topic_id=TOPIC_ID, partition_states=[state]
    )
    return LeaderAndIsrRequest(
        controller_id=7,
        controller_epoch=99,
        ungrouped_partition_states=[state],
        topic_states=[topic],
    )


def stop_replica() -> Any:
    return StopReplicaRequest(
        controller_id=7,
        controller_epoch=99,
        delete_partitions=True,
        ungrouped_partitions=[StopReplicaRequest.PartitionV0(TOPIC, 0)],
        topics=[StopReplicaRequest.TopicV1(TOPIC, [0])],
        topic_states=[
            StopReplicaRequest.TopicState(
                TOPIC, [StopReplicaRequest.TopicState.PartitionState(0, 9, True)]
            )
        ],
    )


def update_metadata() -> Any:
    state = UpdateMetadataRequest.UpdateMetadataPartitionState(
        topic_name=TOPIC, partition_index=0, leader=7, isr=[7], replicas=[7]
    )
    return UpdateMetadataRequest(
        controller_id=7,
        controller_epoch=99,
        ungrouped_partition_states=[state],
        topic_states=[UpdateMetadataRequest.TopicState(TOPIC, TOPIC_ID, [state])],
    )


def alter_partition() -> Any:
    part = AlterPartitionRequest.Topic.Partition(
        partition_index=0, leader_epoch=0, new_isr=[0], partition_epoch=0
    )
    topic = AlterPartitionRequest.Topic(topic_name=TOPIC, topic_id=TOPIC_ID, partitions=[part])
    return AlterPartitionRequest(broker_id=0, broker_epoch=1, topics=[topic])


def refused_partitions(key: int, version: int, resp: Any) -> list[tuple[Any, int, int]]:
    if key == ApiKey.LEADER_AND_ISR and version < 5:
        return [(p.topic_name, p.partition_index, p.error_code) for p in resp.partition_errors]
    if key == ApiKey.LEADER_AND_ISR:
        return [
            (t.topic_id, p.partition_index, p.error_code)
            for t in resp.topics
            for p in t.partition_errors
        ]
    return []


CASES = [
    (ApiKey.LEADER_AND_ISR, leader_and_isr, ErrorCode.STALE_CONTROLLER_EPOCH),
    (ApiKey.STOP_REPLICA, stop_replica, ErrorCode.STALE_CONTROLLER_EPOCH),
    (ApiKey.UPDATE_METADATA, update_metadata, ErrorCode.STALE_CONTROLLER_EPOCH),
    (
        ApiKey.CONTROLLED_SHUTDOWN,
        lambda: ControlledShutdownRequest(broker_id=0, broker_epoch=1),
        ErrorCode.STALE_CONTROLLER_EPOCH,
    ),
    (ApiKey.ALTER_PARTITION, alter_partition, ErrorCode.NOT_CONTROLLER),
]


def test_every_version_is_refused_and_nothing_changes(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    try:
        before = metadata(w, [TOPIC]).topics[0]
        assert before.error_code == ErrorCode.NONE
        for key, build, code in CASES:
            spec = api(key)
            for version in range(spec.min_version, spec.max_version + 1):
                resp = w.request(key, version, build())
                assert resp.error_code == code, (spec.name, version)
                ident = TOPIC if version < 5 else TOPIC_ID
                expected = [(ident, 0, code)] if key == ApiKey.LEADER_AND_ISR else []
                assert refused_partitions(key, version, resp) == expected, (spec.name, version)
                if key == ApiKey.STOP_REPLICA:
                    assert resp.partition_errors == []  # as Kafka refuses an old controller
                if key == ApiKey.CONTROLLED_SHUTDOWN:
                    assert resp.remaining_partitions == []
                if key == ApiKey.ALTER_PARTITION:
                    assert resp.topics == []
        # the same connection still serves, and the topic is as it was
        after = metadata(w, [TOPIC]).topics[0]
        assert [
            (p.partition_index, p.leader_id, p.leader_epoch, p.isr_nodes) for p in after.partitions
        ] == [
            (p.partition_index, p.leader_id, p.leader_epoch, p.isr_nodes) for p in before.partitions
        ]
    finally:
        w.close()
    still_serving(broker)
