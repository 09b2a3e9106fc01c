"""The inter-broker APIs of a ZooKeeper-mode cluster.

LeaderAndIsr (4), StopReplica (5) and UpdateMetadata (6) are a controller's orders
to a broker; ControlledShutdown (7), AlterPartition (56) and AllocateProducerIds (67)
are a broker's requests to the controller (kbroker's brokers reserve their producer
id blocks in ZooKeeper themselves; Kafka 3.x brokers ask the controller).

A cluster member (`Broker.cluster`) carries the orders out: LeaderAndIsr and
StopReplica through the replica manager, UpdateMetadata into the metadata cache.
An order from an older controller than one already heard from is refused with
STALE_CONTROLLER_EPOCH, one meant for an earlier registration of this broker
with STALE_BROKER_EPOCH, and neither changes anything.

A single node has no controller, so no order can come from a current one
(STALE_CONTROLLER_EPOCH, as Kafka answers an order from an older controller)
and it is not the controller (NOT_CONTROLLER, as Kafka's non-controller brokers
answer). Each refusal is the one Kafka 3.9.1 gives
(tests/cluster/test_inter_broker_wire.py compares them field for field): a
LeaderAndIsr refusal lists every partition asked about, a StopReplica refusal none.

With an authorizer, every one of them needs ClusterAction on the cluster, checked
before anything else, as Kafka does: a sender without it (a client posing as a
controller or a broker) is answered CLUSTER_AUTHORIZATION_FAILED, with every
partition of a LeaderAndIsr or StopReplica request, and nothing changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kbroker.controller.isr_changes import IsrAnswer, IsrChange
from kbroker.errors import KafkaError
from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.log import TopicPartition
from kbroker.metadata.cache import BrokerInfo, ControllerPartitionState
from kbroker.metadata.model import PartitionState
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.inter_broker import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    ControlledShutdownResponse,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)
from kbroker.replication.replica_manager import LeaderAndIsrOrder, StopReplicaOrder

if TYPE_CHECKING:
    from kbroker.broker import Broker

IsrPartitionError = LeaderAndIsrResponse.LeaderAndIsrPartitionError
TopicError = LeaderAndIsrResponse.TopicError
StopReplicaError = StopReplicaResponse.PartitionError


def leader_and_isr_response(
    request: Any,
    version: int,
    code: int,
    errors: Mapping[TopicPartition, ErrorCode] | None = None,
) -> Any:
    """The answer to a LeaderAndIsr request: every partition in it with `code`, or with
    its own code in ``errors`` (the top-level code stays `code`)."""

    def of(topic: str, index: int) -> int:
        return code if errors is None else errors.get(TopicPartition(topic, index), code)

    if version < 2:
        partition_errors = [
            IsrPartitionError(
                topic_name=p.topic_name,
                partition_index=p.partition_index,
                error_code=of(p.topic_name, p.partition_index),
            )
            for p in request.ungrouped_partition_states
        ]
        return LeaderAndIsrResponse(error_code=code, partition_errors=partition_errors)
    if version < 5:
        partition_errors = [
            IsrPartitionError(
                topic_name=t.topic_name,
                partition_index=p.partition_index,
                error_code=of(t.topic_name, p.partition_index),
            )
            for t in request.topic_states
            for p in t.partition_states
        ]
        return LeaderAndIsrResponse(error_code=code, partition_errors=partition_errors)
    topics = [
        TopicError(
            topic_id=t.topic_id,
            partition_errors=[
                IsrPartitionError(
                    partition_index=p.partition_index,
                    error_code=of(t.topic_name, p.partition_index),
                )
                for p in t.partition_states
            ],
        )
        for t in request.topic_states
    ]
    return LeaderAndIsrResponse(error_code=code, topics=topics)


def _stop_replica_partitions(request: Any, version: int) -> list[tuple[str, int]]:
    if version == 0:
        return [(p.topic_name, p.partition_index) for p in request.ungrouped_partitions]
    if version < 3:
        return [(t.name, i) for t in request.topics for i in t.partition_indexes]
    return [
        (t.topic_name, p.partition_index) for t in request.topic_states for p in t.partition_states
    ]


def stop_replica_response(request: Any, version: int, code: int) -> Any:
    """The answer to a StopReplica request: every partition in it with `code`."""
    return StopReplicaResponse(
        error_code=code,
        partition_errors=[
            StopReplicaError(topic_name=topic, partition_index=index, error_code=code)
            for topic, index in _stop_replica_partitions(request, version)
        ],
    )


def _partition_states(
    request: Any, version: int, grouped_from: int, ids_from: int
) -> Iterator[tuple[str, uuid.UUID | None, Any]]:
    """(topic, topic id or None, partition state) of a LeaderAndIsr or UpdateMetadata
    request: ungrouped partitions before ``grouped_from``, topic ids from ``ids_from``."""
    if version < grouped_from:
        for p in request.ungrouped_partition_states:
            yield p.topic_name, None, p
        return
    for t in request.topic_states:
        topic_id = t.topic_id if version >= ids_from else None
        for p in t.partition_states:
            yield t.topic_name, topic_id, p


def leader_and_isr_orders(request: Any, version: int) -> list[LeaderAndIsrOrder]:
    """The partitions of a LeaderAndIsr request as the replica manager's orders (each
    with its leader's address, from the request's live leaders)."""
    endpoints = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
    return [
        LeaderAndIsrOrder(
            TopicPartition(topic, p.partition_index),
            PartitionState(
                replicas=list(p.replicas),
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                isr=list(p.isr),
                controller_epoch=p.controller_epoch,
                version=p.partition_epoch,
            ),
            topic_id,
            bool(version >= 1 and p.is_new),
            endpoints.get(p.leader),
        )
        for topic, topic_id, p in _partition_states(request, version, 2, 5)
    ]


def stop_replica_orders(request: Any, version: int) -> list[StopReplicaOrder]:
    """The partitions of a StopReplica request as the replica manager's orders (before v3
    the request names no leader epoch, and one delete flag covers every partition)."""
    if version < 3:
        return [
            StopReplicaOrder(TopicPartition(topic, index), -1, bool(request.delete_partitions))
            for topic, index in _stop_replica_partitions(request, version)
        ]
    return [
        StopReplicaOrder(
            TopicPartition(t.topic_name, p.partition_index), p.leader_epoch, p.delete_partition
        )
        for t in request.topic_states
        for p in t.partition_states
    ]


_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def _listener_name(endpoint: Any, version: int) -> str:
    """An UpdateMetadata endpoint's listener name (v3+), or before v3 the name of its
    security protocol (a listener named after its protocol, as Kafka then had)."""
    if version >= 3:
        return str(endpoint.listener)
    return _PROTOCOL_NAMES.get(endpoint.security_protocol, str(endpoint.security_protocol))


def update_metadata_contents(
    request: Any, version: int
) -> tuple[list[BrokerInfo], list[ControllerPartitionState]]:
    """An UpdateMetadata request of any version as the metadata cache takes it: the live
    brokers with every endpoint (a v0 broker's one is its PLAINTEXT listener; before v3
    an endpoint is named by its security protocol) and the partition states."""
    brokers = []
    for b in request.live_brokers:
        if version == 0:
            endpoints: tuple[tuple[str, str, int], ...] = (("PLAINTEXT", b.v0_host, b.v0_port),)
        else:
            endpoints = tuple((_listener_name(e, version), e.host, e.port) for e in b.endpoints)
        brokers.append(BrokerInfo(b.id, endpoints, b.rack if version >= 2 else None))
    partitions = [
        ControllerPartitionState(
            topic,
            p.partition_index,
            PartitionState(
                replicas=list(p.replicas),
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                isr=list(p.isr),
                controller_epoch=p.controller_epoch,
                version=p.zk_version,
                offline_replicas=list(p.offline_replicas) if version >= 4 else [],
            ),
            topic_id,
        )
        for topic, topic_id, p in _partition_states(request, version, 5, 7)
    ]
    return brokers, partitions


def _stale_broker_epoch(broker: Broker, request: Any, version: int, since: int) -> bool:
    """True when the order was meant for an earlier registration of this broker (Kafka's
    KIP-380 check: the request's broker epoch, from version ``since``, is older than
    this registration's; -1 names none)."""
    if version < since or request.broker_epoch == -1:
        return False
    assert broker.cluster is not None
    current = broker.cluster.broker_epoch
    return current is not None and request.broker_epoch < current


def _refusal(broker: Broker, request: Any, version: int, epoch_since: int) -> ErrorCode | None:
    """The code an order is refused with before anything changes, or None."""
    if broker.cluster is None:
        return ErrorCode.STALE_CONTROLLER_EPOCH
    if _stale_broker_epoch(broker, request, version, epoch_since):
        return ErrorCode.STALE_BROKER_EPOCH
    return None


UNAUTHORIZED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _from_broker(broker: Broker, ctx: RequestContext) -> bool:
    """Whether the sender may send what only controllers and brokers send."""
    return authorize_cluster(broker, ctx, Op.CLUSTER_ACTION)


async def handle_leader_and_isr(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not _from_broker(broker, ctx):
        return leader_and_isr_response(request, version, UNAUTHORIZED)
    refused = _refusal(broker, request, version, 2)
    if refused is not None:
        return leader_and_isr_response(request, version, refused)
    orders = leader_and_isr_orders(request, version)
    # A topic new to this broker: its configs before its logs open.
    await broker.load_topic_configs({o.tp.topic for o in orders})
    errors = broker.replica_manager.become_leader_or_follower(
        request.controller_epoch, orders, broker.open_log
    )
    if errors is None:
        return leader_and_isr_response(request, version, ErrorCode.STALE_CONTROLLER_EPOCH)
    return leader_and_isr_response(request, version, ErrorCode.NONE, errors)


def handle_stop_replica(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not _from_broker(broker, ctx):
        return stop_replica_response(request, version, UNAUTHORIZED)
    refused = _refusal(broker, request, version, 1)
    if refused is not None:
        # Kafka lists no partition when it refuses a whole StopReplica.
        return StopReplicaResponse(error_code=refused, partition_errors=[])
    errors = broker.replica_manager.stop_replicas(
        request.controller_epoch, stop_replica_orders(request, version)
    )
    if errors is None:
        return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH, partition_errors=[])
    return StopReplicaResponse(
        error_code=ErrorCode.NONE,
        partition_errors=[
            StopReplicaError(topic_name=tp.topic, partition_index=tp.partition, error_code=code)
            for tp, code in errors.items()
        ],
    )


def handle_update_metadata(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not _from_broker(broker, ctx):
        return UpdateMetadataResponse(error_code=UNAUTHORIZED)
    refused = _refusal(broker, request, version, 5)
    if refused is not None:
        return UpdateMetadataResponse(error_code=refused)
    if not broker.replica_manager.accepts_controller(request.controller_epoch):
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    brokers, partitions = update_metadata_contents(request, version)
    broker.apply_update_metadata(request.controller_id, brokers, partitions)
    return UpdateMetadataResponse(error_code=ErrorCode.NONE)


async def handle_controlled_shutdown(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not _from_broker(broker, ctx):
        return ControlledShutdownResponse(error_code=UNAUTHORIZED, remaining_partitions=[])
    controller = None if broker.cluster is None else broker.cluster.controller
    if controller is None:
        # Kafka's non-controller answers with its "controller moved" error, code 11.
        code = ErrorCode.STALE_CONTROLLER_EPOCH
        return ControlledShutdownResponse(error_code=code, remaining_partitions=[])
    epoch = request.broker_epoch if ctx.api_version >= 2 else -1
    try:
        remaining = await controller.controlled_shutdown(request.broker_id, epoch)
    except KafkaError as exc:
        return ControlledShutdownResponse(error_code=exc.code, remaining_partitions=[])
    return ControlledShutdownResponse(
        error_code=ErrorCode.NONE,
        remaining_partitions=[
            ControlledShutdownResponse.RemainingPartition(
                topic_name=tp.topic, partition_index=tp.partition
            )
            for tp in sorted(remaining)
        ],
    )


def alter_partition_changes(request: Any, version: int) -> list[IsrChange]:
    """The partitions of an AlterPartition request as the controller's `IsrChange`s (topics
    by id from v2, ISR members with their broker epochs from v3)."""
    changes = []
    for t in request.topics:
        for p in t.partitions:
            if version >= 3:
                isr = [b.broker_id for b in p.new_isr_with_epochs]
                epochs: list[int] | None = [b.broker_epoch for b in p.new_isr_with_epochs]
            else:
                isr, epochs = list(p.new_isr), None
            changes.append(
                IsrChange(
                    topic=t.topic_name if version < 2 else "",
                    partition=p.partition_index,
                    leader_epoch=p.leader_epoch,
                    isr=isr,
                    partition_epoch=p.partition_epoch,
                    leader_recovery_state=p.leader_recovery_state if version >= 1 else 0,
                    topic_id=t.topic_id if version >= 2 else None,
                    isr_epochs=epochs,
                )
            )
    return changes


def alter_partition_response(answers: list[IsrAnswer], version: int) -> Any:
    """The controller's answers grouped by topic (by name before v2, by id from v2), in
    the order the request named them."""
    topics: dict[object, list[Any]] = {}
    for a in answers:
        key = a.change.topic_id if version >= 2 else a.change.topic
        state = a.state
        topics.setdefault(key, []).append(
            AlterPartitionResponse.Topic.Partition(
                partition_index=a.change.partition,
                error_code=a.error,
                leader_id=-1 if state is None else state.leader,
                leader_epoch=-1 if state is None else state.leader_epoch,
                isr=[] if state is None else list(state.isr),
                leader_recovery_state=0,
                partition_epoch=-1 if state is None else state.version,
            )
        )
    return AlterPartitionResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        topics=[
            AlterPartitionResponse.Topic(
                partitions=partitions,
                **({"topic_id": key} if version >= 2 else {"topic_name": key}),
            )
            for key, partitions in topics.items()
        ],
    )


async def handle_alter_partition(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    """A leader's ISR change, for the controller; other brokers answer NOT_CONTROLLER."""
    if not _from_broker(broker, ctx):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=UNAUTHORIZED, topics=[])
    controller = None if broker.cluster is None else broker.cluster.controller
    if controller is None:
        return AlterPartitionResponse(
            throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, topics=[]
        )
    version = ctx.api_version
    changes = alter_partition_changes(request, version)
    try:
        answers = await controller.alter_partition(
            request.broker_id, request.broker_epoch, changes, version
        )
    except KafkaError as exc:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=exc.code, topics=[])
    return alter_partition_response(answers, version)


async def handle_allocate_producer_ids(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    """A block of producer ids for a broker, from the controller; others answer
    NOT_CONTROLLER. A refusal carries no block (start and length 0, as Kafka's)."""

    def refused(code: int) -> Any:
        return AllocateProducerIdsResponse(
            throttle_time_ms=0, error_code=code, producer_id_start=0, producer_id_len=0
        )

    if not _from_broker(broker, ctx):
        return refused(UNAUTHORIZED)
    controller = None if broker.cluster is None else broker.cluster.controller
    if controller is None:
        return refused(ErrorCode.NOT_CONTROLLER)
    try:
        block = await controller.allocate_producer_ids(request.broker_id, request.broker_epoch)
    except KafkaError as exc:
        return refused(exc.code)
    return AllocateProducerIdsResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        producer_id_start=block.first,
        producer_id_len=block.last - block.first + 1,
    )


HANDLERS = {
    ApiKey.ALLOCATE_PRODUCER_IDS: handle_allocate_producer_ids,
    ApiKey.LEADER_AND_ISR: handle_leader_and_isr,
    ApiKey.STOP_REPLICA: handle_stop_replica,
    ApiKey.UPDATE_METADATA: handle_update_metadata,
    ApiKey.CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
    ApiKey.ALTER_PARTITION: handle_alter_partition,
}
