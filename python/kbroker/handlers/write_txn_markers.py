"""WriteTxnMarkers (27): a transaction coordinator has this broker write the COMMIT or
ABORT markers of transactions to the partitions it leads.

Each marker is written to its partitions as Kafka writes it (a control batch with the
coordinator epoch, appended as leader, acks=all), and each partition answered once the
in-sync replicas have it: NONE, or UNKNOWN_TOPIC_OR_PARTITION (not on this broker),
NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH or
TRANSACTION_COORDINATOR_FENCED (a stale marker: nothing written), REQUEST_TIMED_OUT,
KAFKA_STORAGE_ERROR. The coordinator retries the partitions that failed.

Only brokers send it: with an authorizer it needs ClusterAction on the cluster, or every
partition is answered CLUSTER_AUTHORIZATION_FAILED and nothing is written. Its time
counts against no quota (it is replication work).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.inter_broker import WriteTxnMarkersResponse
from kbroker.replication.txn import TxnMarker

if TYPE_CHECKING:
    from kbroker.broker import Broker

MarkerResult = WriteTxnMarkersResponse.Marker
TopicResult = WriteTxnMarkersResponse.Marker.Topic
PartitionResult = WriteTxnMarkersResponse.Marker.Topic.Partition

# How long a marker waits for the in-sync replicas: Kafka's request.timeout.ms default,
# which its handler uses.
MARKER_TIMEOUT_MS = 30_000


def _partitions(marker: Any) -> list[TopicPartition]:
    """The marker's partitions, each once, in request order."""
    seen: dict[TopicPartition, None] = {}
    for topic in marker.topics:
        for index in topic.partition_indexes:
            seen.setdefault(TopicPartition(topic.name, index))
    return list(seen)


def _result(producer_id: int, errors: dict[TopicPartition, ErrorCode]) -> Any:
    topics: dict[str, list[Any]] = {}
    for tp, code in errors.items():
        topics.setdefault(tp.topic, []).append(
            PartitionResult(partition_index=tp.partition, error_code=code)
        )
    return MarkerResult(
        producer_id=producer_id,
        topics=[TopicResult(name=name, partitions=parts) for name, parts in topics.items()],
    )


def handle_write_txn_markers(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(broker, ctx, Op.CLUSTER_ACTION):
        return WriteTxnMarkersResponse(
            markers=[
                _result(
                    m.producer_id,
                    dict.fromkeys(_partitions(m), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                )
                for m in request.markers
            ]
        )
    writes = [
        broker.replica_manager.write_txn_markers(
            TxnMarker(
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                coordinator_epoch=m.coordinator_epoch,
                committed=m.transaction_result,
                partitions=_partitions(m),
            ),
            MARKER_TIMEOUT_MS,
        )
        for m in request.markers
    ]
    if all(w.done() for w in writes):
        return _response(request, [w.result() for w in writes])
    return _answer_when_written(request, writes)


async def _answer_when_written(
    request: Any, writes: list[asyncio.Future[dict[TopicPartition, ErrorCode]]]
) -> Any:
    return _response(request, list(await asyncio.gather(*writes)))


def _response(request: Any, results: list[dict[TopicPartition, ErrorCode]]) -> Any:
    return WriteTxnMarkersResponse(
        markers=[
            _result(m.producer_id, errors)
            for m, errors in zip(request.markers, results, strict=True)
        ]
    )


HANDLERS = {ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers}
