"""What ``kbroker log-dirs`` asks each broker (DescribeLogDirs), as plain data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DescribeLogDirsRequest
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error


def _bytes(value: int) -> int | None:
    return value if value >= 0 else None


def describe_log_dirs(
    cluster: Cluster, topics: Sequence[str] = (), brokers: Sequence[int] = ()
) -> dict[str, Any]:
    """Per broker (all, or ``brokers``) and log directory: its total and usable bytes (None
        before DescribeLogDirs v4) and the size, offset lag and future flag of each partition
        (of ``topics`` only, if given). A broker that lacks the API or cannot be reached (its
    connection fails) is noted, not fatal: the others are answered."""
    resp = cluster.metadata(list(topics) if topics else None)
    for t in resp.topics:
        if topics and t.error_code != ErrorCode.NONE:
            raise ClientError(broker_error(f"topic {t.name!r}", t.error_code))
    live = sorted(b.node_id for b in resp.brokers)
    if unknown := sorted(set(brokers) - set(live)):
        raise ClientError(f"broker {unknown[0]} is not in the cluster (brokers: {live})")
    T = DescribeLogDirsRequest.Topic
    req = DescribeLogDirsRequest(
        topics=[
            T(topic=t.name, partitions=sorted(p.partition_index for p in t.partitions))
            for t in resp.topics
        ]
        if topics
        else None
    )
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    for node in brokers or live:
        try:
            client = cluster.node(node)
            if not client.supports(ApiKey.DESCRIBE_LOG_DIRS):
                notes.append(f"broker {node} does not support DescribeLogDirs (Kafka API 35)")
                continue
            answer = client.request(
                ApiKey.DESCRIBE_LOG_DIRS, client.version(ApiKey.DESCRIBE_LOG_DIRS), req
            )
        except ClientError as exc:
            if not cluster.lost(node):
                raise
            notes.append(f"broker {node} could not be reached: {exc}")
            continue
        if answer.error_code != ErrorCode.NONE:
            notes.append(broker_error(f"DescribeLogDirs of broker {node}", answer.error_code))
            continue
        dirs = []
        for r in sorted(answer.results, key=lambda r: r.log_dir):
            dirs.append(
                {
                    "path": r.log_dir,
                    "error": None if r.error_code == ErrorCode.NONE else error_name(r.error_code),
                    "total_bytes": _bytes(r.total_bytes),
                    "usable_bytes": _bytes(r.usable_bytes),
                    "partitions": sorted(
                        (
                            {
                                "topic": t.name,
                                "partition": p.partition_index,
                                "size_bytes": p.partition_size,
                                "offset_lag": p.offset_lag,
                                "future": p.is_future_key,
                            }
                            for t in r.topics
                            for p in t.partitions
                        ),
                        key=lambda p: (p["topic"], p["partition"], p["future"]),
                    ),
                }
            )
        out.append({"broker": node, "log_dirs": dirs})
    return {"brokers": out, "notes": notes}
