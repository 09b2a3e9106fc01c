"""`TxnHost`: what the transaction coordinator uses of the broker it runs in.

Settings and topics, ``__transaction_state`` through the replica manager,
new producer ids, the way to the other brokers (the inter-broker listener,
secured as the broker's own connections are), and creating its topic on
first use; naming them here (instead of the `Broker` class) keeps the
coordinator below the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kbroker.config import BrokerConfig
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.model import TopicMetadata
from kbroker.replication.replica_manager import ReplicaManager
from kbroker.security.client import InterBrokerLink
from kbroker.txn.producer_ids import ProducerIds


class TxnHost(Protocol):
    config: BrokerConfig
    metadata_cache: MetadataCache
    replica_manager: ReplicaManager
    producer_ids: ProducerIds
    broker_id: int
    inter_broker: InterBrokerLink

    @property
    def in_cluster(self) -> bool: ...

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        internal: bool = False,
    ) -> TopicMetadata: ...
