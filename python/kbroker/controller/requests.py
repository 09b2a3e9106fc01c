"""The controller's orders as Kafka 3.9's inter-broker requests: UpdateMetadata v8,
LeaderAndIsr v7 and StopReplica v4, built from the `ControllerContext`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kbroker.controller.context import ControllerContext, LiveBroker, TopicAssignment
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.protocol.messages.inter_broker import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

UPDATE_METADATA_VERSION = 8
LEADER_AND_ISR_VERSION = 7
STOP_REPLICA_VERSION = 4
# The leader (UpdateMetadata) and leader epoch (StopReplica) of a topic being deleted.
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def _endpoints(b: LiveBroker) -> list[Any]:
    endpoints = b.endpoints or (("PLAINTEXT", b.host, b.port, "PLAINTEXT"),)
    return [
        UpdateMetadataRequest.Broker.Endpoint(
            port=port,
            host=host,
            listener=listener,
            security_protocol=SECURITY_PROTOCOL_IDS.get(protocol, 0),
        )
        for listener, host, port, protocol in endpoints
    ]


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(set(tps)):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _states_by_topic(
    ctx: ControllerContext, tps: Iterable[TopicPartition]
) -> Iterator[tuple[TopicAssignment, list[tuple[int, PartitionState]]]]:
    """The known states of ``tps``, grouped by topic (topics and partitions sorted)."""
    for name, partitions in _by_topic(tps).items():
        topic = ctx.topics.get(name)
        if topic is None:
            continue
        known = [(p, ctx.states.get(TopicPartition(name, p))) for p in partitions]
        states = [(p, state) for p, state in known if state is not None]
        if states:
            yield topic, states


def update_metadata(
    ctx: ControllerContext,
    tps: Iterable[TopicPartition],
    broker_epoch: int,
    deleting: frozenset[str] = frozenset(),
) -> Any:
    """UpdateMetadata v8 for one broker: every live broker and the states of ``tps``
    (partitions of the topics ``deleting`` with leader LEADER_DURING_DELETE)."""
    live = set(ctx.live)
    topics = []
    for topic, states in _states_by_topic(ctx, tps):
        partitions = []
        for p, state in states:
            replicas = topic.partitions.get(p, state.replicas)
            partitions.append(
                UpdateMetadataPartitionState(
                    partition_index=p,
                    controller_epoch=state.controller_epoch,
                    leader=LEADER_DURING_DELETE if topic.name in deleting else state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=list(state.isr),
                    zk_version=state.version,
                    replicas=list(replicas),
                    offline_replicas=[r for r in replicas if r not in live],
                )
            )
        topics.append(
            UpdateMetadataRequest.TopicState(
                topic_name=topic.name, topic_id=topic.topic_id, partition_states=partitions
            )
        )
    return UpdateMetadataRequest(
        controller_id=ctx.controller_id,
        is_kraft_controller=False,
        controller_epoch=ctx.epoch,
        broker_epoch=broker_epoch,
        topic_states=topics,
        live_brokers=[
            UpdateMetadataRequest.Broker(id=b.broker_id, endpoints=_endpoints(b), rack=b.rack)
            for b in sorted(ctx.live.values(), key=lambda b: b.broker_id)
        ],
    )


def leader_and_isr(
    ctx: ControllerContext,
    tps: Iterable[TopicPartition],
    broker_epoch: int,
    new: frozenset[TopicPartition] = frozenset(),
) -> Any:
    """LeaderAndIsr v7 for one broker: the states of ``tps`` (its replicas)."""
    topics = []
    leaders: set[int] = set()
    for topic, states in _states_by_topic(ctx, tps):
        partitions = []
        for p, state in states:
            leaders.add(state.leader)
            partitions.append(
                LeaderAndIsrPartitionState(
                    partition_index=p,
                    controller_epoch=state.controller_epoch,
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=list(state.isr),
                    partition_epoch=state.version,
                    replicas=list(topic.partitions.get(p, state.replicas)),
                    adding_replicas=list(topic.adding.get(p, [])),
                    removing_replicas=list(topic.removing.get(p, [])),
                    is_new=TopicPartition(topic.name, p) in new,
                    leader_recovery_state=0,
                )
            )
        topics.append(
            LeaderAndIsrRequest.TopicState(
                topic_name=topic.name, topic_id=topic.topic_id, partition_states=partitions
            )
        )
    return LeaderAndIsrRequest(
        controller_id=ctx.controller_id,
        is_kraft_controller=False,
        controller_epoch=ctx.epoch,
        broker_epoch=broker_epoch,
        type=0,
        topic_states=topics,
        live_leaders=[
            LeaderAndIsrRequest.LiveLeader(broker_id=b.broker_id, host_name=b.host, port=b.port)
            for b in sorted(ctx.live.values(), key=lambda b: b.broker_id)
            if b.broker_id in leaders
        ],
    )


def stop_replica(
    ctx: ControllerContext,
    tps: Iterable[TopicPartition],
    broker_epoch: int,
    delete: bool,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
) -> Any:
    """StopReplica v4 for one broker: its replicas of ``tps``, each named with its leader
    epoch (a broker refuses an epoch older than its own); without ``leader_epochs`` the
    topics are being deleted (EPOCH_DURING_DELETE)."""
    return StopReplicaRequest(
        controller_id=ctx.controller_id,
        is_kraft_controller=False,
        controller_epoch=ctx.epoch,
        broker_epoch=broker_epoch,
        topic_states=[
            StopReplicaRequest.TopicState(
                topic_name=name,
                partition_states=[
                    StopReplicaRequest.TopicState.PartitionState(
                        partition_index=p,
                        leader_epoch=EPOCH_DURING_DELETE
                        if leader_epochs is None
                        else leader_epochs[TopicPartition(name, p)],
                        delete_partition=delete,
                    )
                    for p in partitions
                ],
            )
            for name, partitions in _by_topic(tps).items()
        ],
    )
