"""Connections from the transaction coordinator's side to the other brokers of a cluster.

`PeerConnections` keeps one `BrokerConnection` per broker, to its inter-broker
listener and secured as this broker's own connections are: the marker
channel sends WriteTxnMarkers on it, the partition side's verification its
AddPartitionsToTxn (verify only). A broker's connection is opened again when
its advertised address changes; requests on one connection are pipelined.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kbroker.metadata.cache import MetadataCache
from kbroker.network.client import BrokerConnection, BrokerUnreachable
from kbroker.security.client import InterBrokerLink


class PeerConnections:
    def __init__(self, broker_id: int, cache: MetadataCache, link: InterBrokerLink) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.link = link
        self._connections: dict[int, BrokerConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def connection(self, broker_id: int) -> BrokerConnection:
        """The connection to ``broker_id``; BrokerUnreachable when its address is unknown."""
        if self._closed:
            raise BrokerUnreachable("shutting down")
        broker = self.cache.broker(broker_id)
        address = None if broker is None else broker.address(self.link.listener)
        if address is None:
            raise BrokerUnreachable(f"no address known for broker {broker_id}")
        conn = self._connections.get(broker_id)
        if conn is not None and (conn.host, conn.port) != address:
            self._close(conn)
            conn = None
        if conn is None:
            conn = BrokerConnection(
                address[0],
                address[1],
                f"kbroker-txn-{self.broker_id}",
                security=self.link.security,
            )
            self._connections[broker_id] = conn
        return conn

    async def request(
        self, broker_id: int, api_key: int, version: int, body: Any, timeout_s: float
    ) -> Any:
        """One request to ``broker_id``; BrokerUnreachable when it fails or times out."""
        return await self.connection(broker_id).request(api_key, version, body, timeout_s)

    def _close(self, conn: BrokerConnection) -> None:
        task = asyncio.ensure_future(conn.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self._closed = True
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()
        for task in list(self._closing):
            with contextlib.suppress(Exception):
                await task
