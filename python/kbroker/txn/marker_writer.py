"""How the marker channel writes markers on a broker: this broker's replica manager for the
partitions it leads, WriteTxnMarkers over the inter-broker listener for the others'."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbroker.log import TopicPartition
from kbroker.protocol.errors import ErrorCode
from kbroker.txn.markers import MarkerDestinationUnreachable, TxnMarker
from kbroker.txn.peers import PeerConnections

if TYPE_CHECKING:
    from kbroker.txn.host import TxnHost


class BrokerMarkerWriter:
    def __init__(self, host: TxnHost, peers: PeerConnections) -> None:
        self.host = host
        self.peers = peers

    async def __call__(
        self, broker_id: int, markers: list[TxnMarker]
    ) -> list[dict[TopicPartition, ErrorCode]]:
        # The partition side (control batches, WriteTxnMarkers) is not merged yet.
        raise MarkerDestinationUnreachable(f"markers cannot be written on broker {broker_id} yet")
