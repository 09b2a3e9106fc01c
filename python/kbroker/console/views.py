"""What each console page shows and each write does, asked of the cluster through
`kbroker.tools`: the functions behind ``kbroker topic``, ``group``, ``config`` and
``consume``. Blocking, like those tools: the app runs each in a worker thread with its
own `Cluster` connection.

A name the cluster does not know is `NotFound`, a value the console cannot use is
`BadInput`, a write the cluster refuses is `Refused` (each with a line for the page); a
cluster that cannot be reached or answers an error is the tools' `ClientError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kbroker.console.show import show
from kbroker.protocol import ErrorCode
from kbroker.tools import configs as config_tool
from kbroker.tools import group_offsets, groups, topics
from kbroker.tools.client import ClientError
from kbroker.tools.cluster import Cluster, cluster_info
from kbroker.tools.consume import StartSpec, records

MAX_RECORDS = 500


class NotFound(Exception):
    """A topic, partition or group the cluster does not have."""


class BadInput(Exception):
    """A value in the URL or a form that the console cannot use."""


class Refused(Exception):
    """The cluster refused a write (its error line)."""


class Forbidden(Exception):
    """The cluster's ACLs do not let the console's principal see this."""


def overview(cluster: Cluster) -> dict[str, Any]:
    """Cluster id, controller, brokers with rack and endpoint, and per broker the
    partitions it holds, leads, leads under-replicated, holds out of the ISR and holds
    offline (no leader); the cluster's offline and under-min-ISR partition counts. A
    broker that partitions name as a replica but the cluster does not list (stopped, or
    killed) is shown as down."""
    info = cluster_info(cluster)
    described = topics.describe_topics(cluster, internal=True)
    stats: dict[int, dict[str, Any]] = {}

    def of(node: int) -> dict[str, Any]:
        return stats.setdefault(
            node,
            {"replicas": 0, "led": 0, "under_replicated": 0, "out_of_isr": 0, "offline": 0},
        )

    live = {b["id"] for b in info["brokers"]}
    for node in live:
        of(node)
    partitions = offline = under_replicated = under_min_isr = 0
    for t in described["topics"]:
        floor = t["min_insync_replicas"]
        for p in t["partitions"]:
            partitions += 1
            lagging = len(p["isr"]) < len(p["replicas"])
            under_replicated += lagging
            under_min_isr += floor is not None and len(p["isr"]) < floor
            leaderless = p["leader"] is None or p["leader"] not in live
            offline += leaderless
            if not leaderless:
                of(p["leader"])["led"] += 1
                of(p["leader"])["under_replicated"] += lagging
            for r in p["replicas"]:
                of(r)["replicas"] += 1
                of(r)["out_of_isr"] += r not in p["isr"]
                of(r)["offline"] += leaderless
    brokers = [{**b, **stats[b["id"]], "down": False} for b in info["brokers"]]
    brokers += [
        {
            "id": node,
            "host": None,
            "port": None,
            "rack": None,
            "controller": False,
            **stats[node],
            "down": True,
        }
        for node in sorted(set(stats) - live)
    ]
    return {
        **info,
        "brokers": sorted(brokers, key=lambda b: b["id"]),
        "live_brokers": len(live),
        "topic_count": len(described["topics"]),
        "partition_count": partitions,
        "offline": offline,
        "under_replicated": under_replicated,
        "under_min_isr": under_min_isr,
        "notes": described["notes"],
    }


def topic_list(cluster: Cluster, search: str) -> dict[str, Any]:
    """Every topic (internal ones too) whose name contains ``search``: partitions,
    replication factor, under-replicated partitions and size (None while a leader's size
    is unknown)."""
    pattern = f".*{re.escape(search)}.*" if search else None
    names = [t["topic"] for t in topics.list_topics(cluster, pattern, internal=True)]
    if not names:
        return {"topics": [], "notes": []}
    described = topics.describe_topics(cluster, names, internal=True)
    rows = []
    for t in described["topics"]:
        sizes = [p["size_bytes"] for p in t["partitions"]]
        rows.append(
            {
                "topic": t["topic"],
                "partitions": t["partition_count"],
                "replication_factor": t["replication_factor"],
                "internal": t["internal"],
                "under_replicated": sum(
                    len(p["isr"]) < len(p["replicas"]) for p in t["partitions"]
                ),
                "size_bytes": None if None in sizes else sum(sizes),
            }
        )
    return {"topics": rows, "notes": described["notes"]}


def _check_topic(cluster: Cluster, name: str) -> None:
    """NotFound or Forbidden when the metadata says so of topic ``name``."""
    [t] = cluster.metadata([name]).topics
    if t.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION):
        raise NotFound(f"the cluster has no topic named {name!r}")
    if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        raise Forbidden(f"the cluster does not let this console describe topic {name!r}")


def topic(cluster: Cluster, name: str, all_configs: bool) -> dict[str, Any]:
    """One topic: its partitions (leader, replicas, ISR, offsets, size) and its configs
    with their sources (those left at their default only with ``all_configs``)."""
    _check_topic(cluster, name)
    described = topics.describe_topics(cluster, [name])
    found: dict[str, Any] = described["topics"][0]
    resource = config_tool.Resource(config_tool.TOPIC, name)
    found["notes"] = described["notes"]
    try:
        found["configs"] = config_tool.describe(cluster, resource, include_defaults=all_configs)
    except ClientError as exc:
        # Describing configs is a right of its own (DescribeConfigs on the topic): without
        # it the rest of the page is still shown.
        found["configs"] = []
        found["notes"] = [*found["notes"], f"its configs cannot be shown: {exc}"]
    return found


def group_list(cluster: Cluster) -> dict[str, Any]:
    unreachable: dict[int, str] = {}
    found = groups.list_groups(cluster, (), unreachable)
    return {
        "groups": found,
        "notes": [
            f"broker {node} could not be reached, the groups it coordinates are missing: {why}"
            for node, why in sorted(unreachable.items())
        ],
    }


def group(cluster: Cluster, name: str) -> dict[str, Any]:
    """A group's state, members and assignments, committed offsets and lag."""
    described = groups.describe_group(cluster, name)
    if described["state"] == "Dead" and not described["members"] and not described["offsets"]:
        raise NotFound(f"the cluster has no group named {name!r}")
    described["total_lag"] = sum(o["lag"] or 0 for o in described["offsets"])
    return described


def group_lags(cluster: Cluster, limit: int) -> dict[str, int]:
    """The total lag of each of the first ``limit`` groups (by name) the cluster lists; a
    group that cannot be described now is left out."""
    lags = {}
    for listed in groups.list_groups(cluster, (), {})[:limit]:
        try:
            described = groups.describe_group(cluster, listed["group"])
        except ClientError:
            continue
        lags[listed["group"]] = sum(o["lag"] or 0 for o in described["offsets"])
    return lags


def browse(
    cluster: Cluster, name: str, partition: int, start: str, count: int, fmt: str, limit: int
) -> dict[str, Any]:
    """Up to ``count`` records of partition ``partition`` of topic ``name``: from offset
    ``start``, from the first record at or after a time when ``start`` is ``@TIME``, or
    the last ``count`` ones when ``start`` is "end". An offset outside what the partition
    holds is BadInput. Keys, values and header values are shown as `show` does with
    ``fmt`` and ``limit``."""
    if not 1 <= count <= MAX_RECORDS:
        raise BadInput(f"count must be 1 to {MAX_RECORDS}, got {count}")
    _check_topic(cluster, name)
    [found] = topics.describe_topics(cluster, [name])["topics"]
    rows = {p["partition"]: p for p in found["partitions"]}
    if partition not in rows:
        raise NotFound(f"topic {name!r} has no partition {partition} (it has {len(rows)})")
    first, end = rows[partition]["log_start_offset"], rows[partition]["log_end_offset"]
    if start == "end":
        spec = StartSpec("from_end", count)
    elif start.startswith("@"):
        try:
            spec = StartSpec.parse(start)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    else:
        try:
            offset = int(start)
        except ValueError:
            raise BadInput(
                f"expected an offset, 'end' or @TIME (epoch ms or ISO date/time), got {start!r}"
            ) from None
        if first is not None and end is not None and not first <= offset <= end:
            where = "past the end" if offset > end else "before the start"
            raise BadInput(
                f"offset {offset} is {where} of {name}-{partition}, which holds offsets "
                f"{first} to {end - 1} (its end offset is {end})"
            )
        spec = StartSpec("offset", offset)
    # Each record is made displayable as it is read, and its bytes dropped: what is held
    # stays bounded by `count` fields of `limit` bytes whatever the records' sizes.
    shown = [
        {
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": show(r.key, fmt, limit),
            "value": show(r.value, fmt, limit),
            "headers": [(k, show(v, fmt, limit)) for k, v in r.headers],
        }
        for r in records(cluster, name, [partition], spec, count, until_end=True)
    ]
    return {
        "topic": name,
        "partition": partition,
        "partitions": sorted(rows),
        "log_start_offset": first,
        "log_end_offset": end,
        "records": shown,
    }


# -- writes: each through the same tools function as the command line ---------------------


def create_topic(
    cluster: Cluster,
    name: str,
    partitions: int,
    replication_factor: int | None,
    configs: Mapping[str, str],
    validate_only: bool,
) -> None:
    result = topics.create_topics(
        cluster,
        [name],
        partitions,
        replication_factor,
        configs=configs,
        validate_only=validate_only,
    )[name]
    if result["error"]:
        raise Refused(result["error"])


def delete_topic(cluster: Cluster, name: str) -> None:
    _check_topic(cluster, name)
    error = topics.delete_topics(cluster, [name])[name]
    if error:
        raise Refused(error)


def add_partitions(cluster: Cluster, name: str, count: int, validate_only: bool) -> None:
    _check_topic(cluster, name)
    error = topics.add_partitions(cluster, name, count, validate_only=validate_only)
    if error:
        raise Refused(error)


def alter_config(
    cluster: Cluster,
    name: str,
    set_values: Mapping[str, str],
    delete: list[str],
    validate_only: bool,
) -> None:
    _check_topic(cluster, name)
    resource = config_tool.Resource(config_tool.TOPIC, name)
    try:
        config_tool.alter(cluster, resource, set_values, delete, validate_only)
    except ClientError as exc:
        raise Refused(str(exc)) from None


def reset_offsets(
    cluster: Cluster,
    name: str,
    topic_name: str | None,
    spec: group_offsets.ResetSpec,
    execute: bool,
) -> dict[str, Any]:
    """The plan (dry run), or with ``execute`` the committed new offsets, of
    ``kbroker group reset-offsets`` for one topic or every topic the group committed."""
    group(cluster, name)  # NotFound for a group the cluster does not have
    scope = [(topic_name, None)] if topic_name else []
    if topic_name:
        _check_topic(cluster, topic_name)
    try:
        return group_offsets.reset_offsets(cluster, name, scope, spec, execute)
    except ClientError as exc:
        raise Refused(str(exc)) from None
