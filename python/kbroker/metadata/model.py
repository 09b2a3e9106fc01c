"""The metadata's value types: a partition's leadership state and a topic's description.

Shared by the metadata backends (which persist them) and the metadata cache
(which serves them); plain data with their JSON forms, nothing else.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionState:
    """Leadership of one partition: who leads, in which epoch, who is in sync."""

    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    # The epoch of the controller that last changed it (-1: no controller, a single node).
    controller_epoch: int = -1
    # The version of the stored state it was read from (a znode's version in
    # cluster mode): a conditional write of the next state names it. Not persisted.
    version: int = 0
    # Replicas on brokers that are not alive (cluster mode, from the controller). Not persisted.
    offline_replicas: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "controller_epoch": self.controller_epoch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionState:
        return cls(
            replicas=[int(r) for r in data["replicas"]],
            leader=int(data["leader"]),
            leader_epoch=int(data.get("leader_epoch", 0)),
            isr=[int(r) for r in data.get("isr", data["replicas"])],
            controller_epoch=int(data.get("controller_epoch", -1)),
        )


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": str(self.topic_id),
            "partitions": {str(p): s.to_json() for p, s in sorted(self.partitions.items())},
            "configs": dict(self.configs),
            "internal": self.internal,
        }

    def copy(self) -> TopicMetadata:
        return TopicMetadata.from_json(self.name, self.to_json())

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> TopicMetadata:
        configs = data.get("configs", {})
        if not isinstance(configs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
        ):
            raise ValueError(f"configs of topic {name!r} are not a map of strings")
        return cls(
            name=name,
            topic_id=uuid.UUID(data["topic_id"]),
            partitions={int(p): PartitionState.from_json(s) for p, s in data["partitions"].items()},
            configs=dict(configs),
            internal=bool(data.get("internal", False)),
        )
