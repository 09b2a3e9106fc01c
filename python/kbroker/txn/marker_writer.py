"""How the marker channel writes markers on a broker: this broker's replica manager for the
partitions it leads, WriteTxnMarkers (v1, as Kafka 3.9 sends it) over the inter-broker
listener for another broker's.

Each marker is answered per partition; a request that could not be sent or answered
raises `MarkerDestinationUnreachable` (the channel sends its markers again), and a marker
the other broker did not answer for gets UNKNOWN_SERVER_ERROR for its partitions (retried
too).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kbroker.log import TopicPartition
from kbroker.network.client import BrokerUnreachable
from kbroker.protocol import ApiKey
from kbroker.protocol.errors import ErrorCode, to_error_code
from kbroker.protocol.messages.inter_broker import WriteTxnMarkersRequest
from kbroker.replication.txn import TxnMarker
from kbroker.txn.markers import MarkerDestinationUnreachable
from kbroker.txn.peers import PeerConnections

if TYPE_CHECKING:
    from kbroker.txn.host import TxnHost

WRITE_TXN_MARKERS_VERSION = 1
# How long the leaders may take to write and replicate markers (Kafka's
# request.timeout.ms, which its WriteTxnMarkers handler waits at most).
MARKER_TIMEOUT_MS = 30_000
# The request's own bound: the leader's wait, and some time to answer.
REQUEST_TIMEOUT_S = MARKER_TIMEOUT_MS / 1000 + 5

Errors = dict[TopicPartition, ErrorCode]


class BrokerMarkerWriter:
    def __init__(self, host: TxnHost, peers: PeerConnections) -> None:
        self.host = host
        self.peers = peers

    async def __call__(self, broker_id: int, markers: list[TxnMarker]) -> list[Errors]:
        if broker_id == self.host.broker_id:
            return await self._local(markers)
        return await self._remote(broker_id, markers)

    async def _local(self, markers: list[TxnMarker]) -> list[Errors]:
        writes = [
            self.host.replica_manager.write_txn_markers(m, MARKER_TIMEOUT_MS) for m in markers
        ]
        return list(await asyncio.gather(*writes))

    async def _remote(self, broker_id: int, markers: list[TxnMarker]) -> list[Errors]:
        Marker = WriteTxnMarkersRequest.Marker
        request = WriteTxnMarkersRequest(
            markers=[
                Marker(
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    transaction_result=m.committed,
                    topics=[
                        Marker.Topic(name=topic, partition_indexes=indexes)
                        for topic, indexes in _by_topic(m.partitions).items()
                    ],
                    coordinator_epoch=m.coordinator_epoch,
                )
                for m in markers
            ]
        )
        try:
            answer = await self.peers.request(
                broker_id,
                ApiKey.WRITE_TXN_MARKERS,
                WRITE_TXN_MARKERS_VERSION,
                request,
                REQUEST_TIMEOUT_S,
            )
        except BrokerUnreachable as exc:
            raise MarkerDestinationUnreachable(str(exc)) from None
        # Answers are keyed by producer id (the channel sends one marker per producer).
        by_producer: dict[int, Errors] = {}
        for result in answer.markers:
            errors = by_producer.setdefault(result.producer_id, {})
            for topic in result.topics:
                for p in topic.partitions:
                    errors[TopicPartition(topic.name, p.partition_index)] = to_error_code(
                        p.error_code
                    )
        return [
            {
                tp: by_producer.get(m.producer_id, {}).get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                for tp in m.partitions
            }
            for m in markers
        ]


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return by_topic
