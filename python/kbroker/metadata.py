"""Cluster metadata: topics, their partitions and replica assignments, configs.

`MetadataStore` is the interface the broker uses; `LocalMetadataStore` keeps
the metadata of a single node in its data directory (no ZooKeeper). A
ZooKeeper-backed store sits beside it for clusters.

Runtime partition state that changes with every write (the high watermark)
lives with the partition, not here; what is here changes rarely and is
written durably before it is acted on.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

META_PROPERTIES = "meta.properties"
METADATA_FILE = "__kbroker_metadata.json"


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 (a random UUID), as Kafka makes them."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class PartitionState:
    """Leadership of one partition: who leads, in which epoch, who is in sync."""

    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": self.isr,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionState:
        return cls(
            replicas=[int(r) for r in data["replicas"]],
            leader=int(data["leader"]),
            leader_epoch=int(data.get("leader_epoch", 0)),
            isr=[int(r) for r in data.get("isr", data["replicas"])],
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
            "configs": self.configs,
            "internal": self.internal,
        }

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> TopicMetadata:
        return cls(
            name=name,
            topic_id=uuid.UUID(data["topic_id"]),
            partitions={int(p): PartitionState.from_json(s) for p, s in data["partitions"].items()},
            configs=dict(data.get("configs", {})),
            internal=bool(data.get("internal", False)),
        )


class MetadataError(Exception):
    """A metadata change that cannot be made (carries a Kafka error name)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


class MetadataStore(Protocol):
    """What the broker needs from wherever cluster metadata is kept."""

    @property
    def cluster_id(self) -> str: ...

    def topics(self) -> Mapping[str, TopicMetadata]: ...

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        internal: bool = False,
    ) -> TopicMetadata: ...

    def delete_topic(self, name: str) -> None: ...

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> TopicMetadata: ...

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    def broker_configs(self) -> Mapping[str, str]: ...

    def set_broker_configs(self, configs: Mapping[str, str]) -> None: ...

    def set_partition_state(self, name: str, partition: int, state: PartitionState) -> None: ...

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves ``count`` producer ids no broker will hand out again; returns the first."""
        ...


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class LocalMetadataStore:
    """A single node's metadata, in one JSON file in the data directory.

    Every change rewrites the file atomically (temp file, fsync, rename,
    fsync of the directory), so a crash leaves either the old or the new
    metadata, never a mix.
    """

    def __init__(self, data_dir: Path, broker_id: int) -> None:
        self._dir = data_dir
        self._path = data_dir / METADATA_FILE
        self._broker_id = broker_id
        self._topics: dict[str, TopicMetadata] = {}
        self._broker_configs: dict[str, str] = {}
        self._cluster_id = ""
        self._next_producer_id = 0

    def load(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        self._cluster_id = self._load_meta_properties()
        if self._path.exists():
            data = json.loads(self._path.read_text(encoding="utf-8"))
            self._topics = {
                name: TopicMetadata.from_json(name, t) for name, t in data.get("topics", {}).items()
            }
            self._broker_configs = dict(data.get("broker_configs", {}))
            self._next_producer_id = int(data.get("next_producer_id", 0))

    def _load_meta_properties(self) -> str:
        """Reads or creates meta.properties (cluster id and broker id)."""
        path = self._dir / META_PROPERTIES
        if path.exists():
            props = dict(
                line.split("=", 1)
                for line in path.read_text(encoding="utf-8").splitlines()
                if "=" in line and not line.startswith("#")
            )
            stored_broker = int(props.get("broker.id", self._broker_id))
            if stored_broker != self._broker_id:
                raise MetadataError(
                    "INCONSISTENT_BROKER_ID",
                    f"{path} belongs to broker {stored_broker}, not {self._broker_id}",
                )
            return props["cluster.id"]
        cluster_id = new_cluster_id()
        _write_atomically(
            path, f"version=0\ncluster.id={cluster_id}\nbroker.id={self._broker_id}\n"
        )
        return cluster_id

    def _save(self) -> None:
        data = {
            "topics": {name: t.to_json() for name, t in sorted(self._topics.items())},
            "broker_configs": self._broker_configs,
            "next_producer_id": self._next_producer_id,
        }
        _write_atomically(self._path, json.dumps(data, indent=1, sort_keys=True))

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def topics(self) -> Mapping[str, TopicMetadata]:
        return self._topics

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        internal: bool = False,
    ) -> TopicMetadata:
        if name in self._topics:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        topic = TopicMetadata(
            name=name,
            topic_id=uuid.uuid4(),
            partitions={
                p: PartitionState(replicas=list(r), leader=r[0], leader_epoch=0, isr=list(r))
                for p, r in assignment.items()
            },
            configs=dict(configs),
            internal=internal,
        )
        self._topics[name] = topic
        self._save()
        return topic

    def delete_topic(self, name: str) -> None:
        if self._topics.pop(name, None) is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        self._save()

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> TopicMetadata:
        topic = self._topics[name]
        for p, r in assignment.items():
            topic.partitions[p] = PartitionState(replicas=list(r), leader=r[0], isr=list(r))
        self._save()
        return topic

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        self._topics[name].configs = dict(configs)
        self._save()

    def broker_configs(self) -> Mapping[str, str]:
        return self._broker_configs

    def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        self._broker_configs = dict(configs)
        self._save()

    def set_partition_state(self, name: str, partition: int, state: PartitionState) -> None:
        self._topics[name].partitions[partition] = state
        self._save()

    def allocate_producer_ids(self, count: int) -> int:
        first = self._next_producer_id
        self._next_producer_id += count
        self._save()
        return first
