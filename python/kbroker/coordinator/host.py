"""`CoordinatorHost`: what the group coordinator uses of the broker it runs in.

The coordinator reads settings and topics, appends to and reads
``__consumer_offsets`` through the replica manager, reports storage failures,
creates its topic on first use, and reads each group's own configs
(`group_configs`: ``consumer_session_timeout_ms(group_id)``,
``consumer_heartbeat_interval_ms(group_id)``); naming those here (instead of the
`Broker` class) keeps the coordinator below the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kbroker.config import BrokerConfig
from kbroker.coordinator.group_configs import GroupConfigs
from kbroker.log import LogManager
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.model import TopicMetadata
from kbroker.replication.replica_manager import ReplicaManager


class CoordinatorHost(Protocol):
    config: BrokerConfig
    metadata_cache: MetadataCache
    replica_manager: ReplicaManager
    logs: LogManager
    group_configs: GroupConfigs

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
