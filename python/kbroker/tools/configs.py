"""``kbroker config describe|set|delete``: DescribeConfigs and IncrementalAlterConfigs for
topics, one broker, or the cluster-wide broker default, as plain data.

A broker's own settings are asked of that broker (as Kafka's admin client
does); topics and the cluster default of any broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kbroker.tools.client import BrokerClient, ClientError
from kbroker.tools.cluster import Cluster, broker_error

# Kafka's ConfigResource.Type, ConfigEntry.ConfigSource and AlterConfigOp.OpType
# (the wire values; the names are what --json reports).
TOPIC, BROKER = 2, 4
SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
DEFAULT_CONFIG = 5
SET, DELETE = 0, 1


@dataclass(frozen=True)
class Resource:
    """What a config command is about: a topic, broker ``id``, or the cluster default."""

    type: int
    name: str

    @property
    def label(self) -> str:
        if self.type == TOPIC:
            return f"topic {self.name!r}"
        return f"broker {self.name}" if self.name else "the cluster-wide broker default"

    @classmethod
    def of(cls, topic: str | None, broker: int | None, broker_default: bool) -> Resource:
        given = [x for x in (topic is not None, broker is not None, broker_default) if x]
        if len(given) != 1:
            raise ValueError("name exactly one of --topic, --broker, --broker-default")
        if topic is not None:
            return cls(TOPIC, topic)
        return cls(BROKER, "" if broker is None else str(broker))


def _client(cluster: Cluster, resource: Resource) -> BrokerClient:
    """The broker to ask: the one whose settings they are (a broker's own settings are
    only known to it), else any."""
    if resource.type == BROKER and resource.name:
        try:
            return cluster.node(int(resource.name))
        except ClientError as exc:
            if not cluster.lost(int(resource.name)):
                raise
            raise ClientError(f"broker {resource.name} could not be reached: {exc}") from None
    return cluster.bootstrap


def describe(
    cluster: Cluster, resource: Resource, names: Sequence[str] = (), include_defaults: bool = False
) -> list[dict[str, Any]]:
    """The settings of ``resource`` (only ``names`` if given) with value and source; without
    ``include_defaults`` the ones left at their default are skipped."""
    client = _client(cluster, resource)
    req = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.Resource(
                resource_type=resource.type,
                resource_name=resource.name,
                configuration_keys=list(names) or None,
            )
        ],
        include_synonyms=True,
    )
    resp = client.request(ApiKey.DESCRIBE_CONFIGS, client.version(ApiKey.DESCRIBE_CONFIGS), req)
    [r] = resp.results
    if r.error_code != ErrorCode.NONE:
        raise ClientError(broker_error(resource.label, r.error_code, r.error_message))
    rows = []
    for c in sorted(r.configs, key=lambda c: c.name):
        if not include_defaults and c.config_source == DEFAULT_CONFIG and c.name not in names:
            continue
        rows.append(
            {
                "name": c.name,
                "value": c.value,
                "source": SOURCES.get(c.config_source, str(c.config_source)),
                "read_only": c.read_only,
                "sensitive": c.is_sensitive,
                "synonyms": [
                    {
                        "name": s.name,
                        "value": s.value,
                        "source": SOURCES.get(s.source, str(s.source)),
                    }
                    for s in c.synonyms
                ],
            }
        )
    missing = [n for n in names if n not in {row["name"] for row in rows}]
    if missing:
        raise ClientError(f"{resource.label} has no setting {missing[0]!r}")
    return rows


def alter(
    cluster: Cluster,
    resource: Resource,
    set_values: Mapping[str, str] | None = None,
    delete: Sequence[str] = (),
    validate_only: bool = False,
) -> None:
    """Set and/or delete (back to the default) settings of ``resource`` in one request;
    ClientError with the broker's error when it refuses."""
    C = IncrementalAlterConfigsRequest.Resource.Config
    configs = [C(name=k, config_operation=SET, value=v) for k, v in (set_values or {}).items()] + [
        C(name=k, config_operation=DELETE, value=None) for k in delete
    ]
    if not configs:
        raise ClientError("nothing to change")
    client = _client(cluster, resource)
    req = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.Resource(
                resource_type=resource.type, resource_name=resource.name, configs=configs
            )
        ],
        validate_only=validate_only,
    )
    resp = client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS, client.version(ApiKey.INCREMENTAL_ALTER_CONFIGS), req
    )
    [r] = resp.responses
    if r.error_code != ErrorCode.NONE:
        raise ClientError(broker_error(resource.label, r.error_code, r.error_message))
