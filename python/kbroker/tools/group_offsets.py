"""``kbroker group reset-offsets`` and ``kbroker group delete-offsets``, as plain data.

reset-offsets follows ``kafka-consumer-groups.sh --reset-offsets``: a scope (topics,
optionally with partitions, all topics the group committed, or a CSV file), one way to
find the new offsets, clamped to what the log holds; it only plans unless told to
execute, and never changes the offsets of a group that has members.
"""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import DescribeGroupsRequest, OffsetDeleteRequest
from kbroker.tools.client import BrokerClient, ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error
from kbroker.tools.groups import commit_offsets, committed_offsets, consumer_group
from kbroker.tools.offsets import EARLIEST, LATEST, TP, list_offsets, partition_leaders

# States in which a group has no members whose offsets a reset would fight with.
INACTIVE_STATES = ("Empty", "Dead")
_NOT_READY = (
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
)
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> float:
    """An ISO 8601 duration as Kafka's ``--by-duration`` takes it (``PT30M``, ``P1DT2H``)
    -> seconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.groupdict().values()) or text.strip().upper().endswith("T"):
        raise ValueError(f"expected an ISO 8601 duration such as PT30M or P1DT2H, got {text!r}")
    d, h, mins, s = (float(m.group(k) or 0) for k in "dhms")
    return ((d * 24 + h) * 60 + mins) * 60 + s


def read_offsets_file(path: Path) -> dict[TP, int]:
    """Kafka's ``--from-file``: CSV lines ``TOPIC,PARTITION,OFFSET``."""
    out: dict[TP, int] = {}
    try:
        with path.open(newline="") as f:
            for number, row in enumerate(csv.reader(f), 1):
                if not row or not "".join(row).strip():
                    continue
                try:
                    topic, partition, offset = (v.strip() for v in row)
                    if not topic or int(partition) < 0 or int(offset) < 0:
                        raise ValueError
                except ValueError:
                    raise ClientError(
                        f"{path}:{number}: expected TOPIC,PARTITION,OFFSET, got {','.join(row)!r}"
                    ) from None
                out[(topic, int(partition))] = int(offset)
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None
    if not out:
        raise ClientError(f"{path} names no partition")
    return out


@dataclass(frozen=True)
class ResetSpec:
    """One way to choose new offsets; exactly one field is set."""

    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    to_offset: int | None = None
    shift_by: int | None = None
    to_datetime: int | None = None  # epoch ms
    by_duration: float | None = None  # seconds before now
    from_file: Mapping[TP, int] | None = None

    def check(self) -> None:
        chosen = [k for k, v in vars(self).items() if v not in (None, False)]
        if len(chosen) != 1:
            raise ValueError(
                "give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
                "--shift-by, --to-datetime, --by-duration, --from-file"
                + (
                    f" (got {', '.join('--' + c.replace('_', '-') for c in chosen)})"
                    if chosen
                    else ""
                )
            )


def group_state(coordinator: BrokerClient, group: str) -> str:
    """The group's state ("Dead" if it does not exist), once its coordinator has loaded it
    (Kafka's answers NOT_COORDINATOR for a moment after creating __consumer_offsets); a
    consumer group of KIP-848 as ConsumerGroupDescribe tells it."""
    modern = consumer_group(coordinator, group)
    if modern is not None:
        return str(modern.group_state)
    deadline = time.monotonic() + coordinator.timeout
    while True:
        resp = coordinator.request(
            ApiKey.DESCRIBE_GROUPS,
            coordinator.version(ApiKey.DESCRIBE_GROUPS),
            DescribeGroupsRequest(groups=[group]),
        )
        [d] = resp.groups
        if d.error_code not in _NOT_READY or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if d.error_code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        raise ClientError(broker_error(f"group {group!r}", d.error_code))
    return "Dead" if d.error_code == ErrorCode.GROUP_ID_NOT_FOUND else str(d.group_state)


def reset_offsets(
    cluster: Cluster,
    group: str,
    scope: Sequence[tuple[str, list[int] | None]],
    spec: ResetSpec,
    execute: bool = False,
) -> dict[str, Any]:
    """Plan (and with ``execute`` commit) new committed offsets of ``group`` for the
    partitions of ``scope`` (empty: every topic the group committed; ignored for a
    ``from_file`` spec, which names its partitions). Returns {"group", "state",
    "executed", "partitions": [{"topic", "partition", "current_offset", "new_offset"}]}.
    """
    spec.check()
    coordinator = cluster.bootstrap.for_group(group)
    try:
        state = group_state(coordinator, group)
        if execute and state not in INACTIVE_STATES:
            raise ClientError(
                f"group {group!r} is {state}: offsets can only be reset while it has no "
                "members (stop its consumers first)"
            )
        committed = {tp: o for tp, (o, _meta) in committed_offsets(coordinator, group).items()}
        wanted: list[tuple[str, list[int] | None]]
        if spec.from_file is not None:
            wanted = [(t, [p]) for t, p in spec.from_file]
        elif scope:
            wanted = list(scope)
        else:
            wanted = [(t, [p]) for t, p in sorted(committed)]
            if not wanted:
                raise ClientError(f"group {group!r} has committed no offsets (name --topic)")
        leaders = partition_leaders(cluster, wanted)
        unreachable: dict[int, str] = {}
        earliest = list_offsets(cluster, leaders, EARLIEST, leaders, unreachable)
        latest = list_offsets(cluster, leaders, LATEST, leaders, unreachable)
        at: dict[TP, dict[str, Any]] = {}
        if spec.to_datetime is not None or spec.by_duration is not None:
            ms = (
                spec.to_datetime
                if spec.to_datetime is not None
                else int((time.time() - (spec.by_duration or 0)) * 1000)
            )
            # Before 1970 is before every record (and negative times mean earliest/latest).
            ms = max(ms, 0)
            at = list_offsets(cluster, leaders, ms, leaders, unreachable)
        rows = []
        for tp in sorted(leaders):
            if leaders[tp] in unreachable:
                raise ClientError(
                    f"no offsets for {tp[0]}-{tp[1]}: its leader, broker {leaders[tp]}, "
                    f"cannot be reached ({unreachable[leaders[tp]]})"
                )
            low, high = earliest[tp]["offset"], latest[tp]["offset"]
            if low is None or high is None:
                error = earliest[tp]["error"] or latest[tp]["error"]
                raise ClientError(f"no offsets for {tp[0]}-{tp[1]}: {error}")
            current = committed.get(tp)
            if spec.to_earliest:
                new = low
            elif spec.to_latest:
                new = high
            elif spec.to_current:
                new = current if current is not None else high
            elif spec.to_offset is not None:
                new = spec.to_offset
            elif spec.shift_by is not None:
                if current is None:
                    raise ClientError(
                        f"group {group!r} has no committed offset for {tp[0]}-{tp[1]} to shift"
                    )
                new = current + spec.shift_by
            elif spec.from_file is not None:
                new = spec.from_file[tp]
            else:  # by time: the first offset at or after it, the end if none is that late
                found = at[tp]["offset"]
                new = high if found is None else found
            rows.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "current_offset": current,
                    "new_offset": min(max(new, low), high),
                }
            )
        if execute:
            errors = commit_offsets(
                coordinator, group, {(r["topic"], r["partition"]): r["new_offset"] for r in rows}
            )
            failed = [f"{t}-{p}: {e}" for (t, p), e in sorted(errors.items()) if e is not None]
            if failed:
                raise ClientError(f"group {group!r}: committing failed for {'; '.join(failed)}")
    finally:
        if coordinator is not cluster.bootstrap:
            coordinator.close()
    return {"group": group, "state": state, "executed": execute, "partitions": rows}


def delete_offsets(
    cluster: Cluster, group: str, scope: Sequence[tuple[str, list[int] | None]]
) -> list[dict[str, Any]]:
    """Remove ``group``'s committed offsets of the partitions of ``scope`` (OffsetDelete);
    per partition None when deleted or the error name. A group-wide error raises."""
    # Partitions of topics that no longer exist can still hold offsets: only complete the
    # topics given without partitions.
    whole = [(t, None) for t, ps in scope if ps is None]
    leaders = partition_leaders(cluster, whole, leaderless=True) if whole else {}
    wanted: dict[str, list[int]] = {}
    for topic, partitions in scope:
        chosen = partitions if partitions is not None else [p for t, p in leaders if t == topic]
        wanted.setdefault(topic, [])
        wanted[topic] += [p for p in chosen if p not in wanted[topic]]
    coordinator = cluster.bootstrap.for_group(group)
    try:
        T = OffsetDeleteRequest.Topic
        req = OffsetDeleteRequest(
            group_id=group,
            topics=[
                T(name=t, partitions=[T.Partition(partition_index=p) for p in sorted(ps)])
                for t, ps in wanted.items()
            ],
        )
        resp = coordinator.request(
            ApiKey.OFFSET_DELETE, coordinator.version(ApiKey.OFFSET_DELETE), req
        )
    finally:
        if coordinator is not cluster.bootstrap:
            coordinator.close()
    if resp.error_code != ErrorCode.NONE:
        raise ClientError(broker_error(f"group {group!r}", resp.error_code))
    return sorted(
        (
            {
                "topic": t.name,
                "partition": p.partition_index,
                "error": None if p.error_code == ErrorCode.NONE else error_name(p.error_code),
            }
            for t in resp.topics
            for p in t.partitions
        ),
        key=lambda r: (r["topic"], r["partition"]),
    )
