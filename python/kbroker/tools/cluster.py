"""A connection to a whole Kafka-compatible cluster, and ``kbroker cluster info|brokers``.

`Cluster` connects to the first reachable bootstrap address and opens a
connection to any other node on demand (requests that must reach a
partition's leader or one broker go there). When the broker it asks for
metadata stops answering (killed, say), the next Metadata request goes to
another reachable one: a bootstrap address or a broker the cluster named.
Versions are negotiated with ApiVersions, so the same code talks to kbroker
and to Apache Kafka; an API a broker lacks ends in a `ClientError` naming it.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DescribeClusterRequest
from kbroker.protocol.messages.core import MetadataRequest
from kbroker.security.client import ClientSecurity
from kbroker.tools.client import BrokerClient, ClientError, error_name


def broker_error(what: str, code: int, message: str | None = None) -> str:
    """One readable line for a Kafka error code: what failed, the Kafka name, its message."""
    return f"{what}: {error_name(code)}" + (f" ({message})" if message else "")


class Cluster:
    """The bootstrap broker plus, on demand, connections to the other nodes."""

    def __init__(
        self, bootstrap: str, timeout: float = 30.0, security: ClientSecurity | None = None
    ) -> None:
        addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
        if not addresses:
            raise ClientError("no bootstrap address given")
        self.timeout = timeout
        self.security = security
        self._bootstrap_addresses = addresses
        self._nodes: dict[int, BrokerClient] = {}
        self._addresses: dict[int, str] | None = None
        self.bootstrap = self._connect_any(addresses)

    def _connect_any(self, addresses: list[str]) -> BrokerClient:
        """A connection to the first of ``addresses`` that takes one."""
        failures = []
        for address in addresses:
            try:
                return BrokerClient(address, self.timeout, security=self.security)
            except ClientError as exc:
                failures.append(str(exc))
        raise ClientError("; ".join(failures) or "no broker to connect to")

    def close(self) -> None:
        for client in self._nodes.values():
            if client is not self.bootstrap:
                client.close()
        self.bootstrap.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def metadata(self, topics: list[str] | None = None, auto_create: bool = False) -> Any:
        """A Metadata response for ``topics`` (None: every topic); a missing topic is created
        only with ``auto_create`` and when the broker's auto.create.topics.enable allows it.
        A broker that fails to answer is replaced by another reachable one, each tried once."""
        T = MetadataRequest.Topic
        req = MetadataRequest(
            topics=None if topics is None else [T(topic_id=ZERO_UUID, name=t) for t in topics],
            allow_auto_topic_creation=auto_create,
        )
        failed: dict[str, str] = {}
        while True:
            client = self.bootstrap
            try:
                version = client.version(ApiKey.METADATA)
                if topics is not None and version < 1:
                    raise ClientError(f"the broker at {client.address} speaks only Metadata v0")
                resp = client.request(ApiKey.METADATA, version, req)
                break
            except ClientError as exc:
                if not client.broken:
                    raise
                # That broker is gone (killed, say): ask another.
                failed[client.address] = str(exc)
                self._replace_bootstrap(failed)
        self._addresses = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
        return resp

    def _replace_bootstrap(self, failed: dict[str, str]) -> None:
        """Connect to another broker for metadata: a bootstrap address or a broker the
        cluster named, none of ``failed`` (address -> what went wrong); ClientError saying
        what went wrong everywhere when none takes a connection."""
        old = self.bootstrap
        candidates = [*self._bootstrap_addresses, *(self._addresses or {}).values()]
        others = [a for a in dict.fromkeys(candidates) if a not in failed]
        old.close()
        self._nodes = {n: c for n, c in self._nodes.items() if c is not old}
        try:
            self.bootstrap = self._connect_any(others)
        except ClientError as exc:
            raise ClientError("; ".join([*failed.values(), str(exc)])) from None

    def lost(self, node_id: int) -> bool:
        """Whether a ClientError just met on ``node_id`` was its connection failing (no
        connection could be made, or the one there was broke) rather than an answer; a
        broken connection is dropped, so the next `node` call connects anew."""
        client = self._nodes.get(node_id)
        if client is None:
            return True
        if client.broken:
            self.forget(node_id)
            return True
        return False

    def forget(self, node_id: int) -> None:
        """Drop the connection to ``node_id`` (it failed): the next `node` call connects
        anew. The bootstrap connection is replaced at the next `metadata` call that fails."""
        client = self._nodes.pop(node_id, None)
        if client is not None and client is not self.bootstrap:
            client.close()

    def node(self, node_id: int) -> BrokerClient:
        """A connection to broker ``node_id`` (the bootstrap connection when it is that one)."""
        client = self._nodes.get(node_id)
        if client is not None:
            return client
        if self._addresses is None or node_id not in self._addresses:
            self.metadata([])
        assert self._addresses is not None
        address = self._addresses.get(node_id)
        if address is None:
            raise ClientError(f"broker {node_id} is not in the cluster")
        client = (
            self.bootstrap
            if address == self.bootstrap.address and not self.bootstrap.broken
            else BrokerClient(address, self.timeout, security=self.security)
        )
        self._nodes[node_id] = client
        return client


def controller(cluster: Cluster) -> BrokerClient:
    """A connection to the controller the metadata names (the bootstrap broker when it
    names none): where topics are created, altered and deleted and leaders elected, as
    Kafka's admin client sends them (a ZooKeeper-mode Kafka broker that is not the
    controller answers NOT_CONTROLLER). A controller that cannot be reached (killed, and
    no other elected yet) is asked for again until the cluster's timeout, then named in a
    ClientError."""
    deadline = time.monotonic() + cluster.timeout
    while True:
        node_id = cluster.metadata([]).controller_id
        if node_id < 0:
            return cluster.bootstrap
        try:
            return cluster.node(node_id)
        except ClientError as exc:
            if not cluster.lost(node_id):
                raise
            if time.monotonic() + CONTROLLER_PAUSE > deadline:
                raise ClientError(
                    f"the controller, broker {node_id}, could not be reached: {exc}"
                ) from None
        time.sleep(CONTROLLER_PAUSE)


# Seconds between two looks at the metadata while the controller it names is unreachable.
CONTROLLER_PAUSE = 0.5


def cluster_info(cluster: Cluster) -> dict[str, Any]:
    """Cluster id, controller and brokers (DescribeCluster when the broker has it, else
    Metadata, which says the same apart from the endpoint type)."""
    client = cluster.bootstrap
    if client.supports(ApiKey.DESCRIBE_CLUSTER):
        resp = client.request(
            ApiKey.DESCRIBE_CLUSTER,
            client.version(ApiKey.DESCRIBE_CLUSTER),
            DescribeClusterRequest(include_cluster_authorized_operations=False),
        )
        if resp.error_code != ErrorCode.NONE:
            raise ClientError(broker_error("DescribeCluster", resp.error_code, resp.error_message))
        brokers = [(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]
    else:
        resp = cluster.metadata([])
        brokers = [(b.node_id, b.host, b.port, b.rack) for b in resp.brokers]
    return {
        "cluster_id": resp.cluster_id,
        "controller_id": resp.controller_id if resp.controller_id >= 0 else None,
        "brokers": [
            {
                "id": node_id,
                "host": host,
                "port": port,
                "rack": rack,
                "controller": node_id == resp.controller_id,
            }
            for node_id, host, port, rack in sorted(brokers)
        ],
    }
