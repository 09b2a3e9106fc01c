"""Copy the offsets old consumers kept in ZooKeeper into committed group offsets.

Consumers before Kafka's offset manager stored each position as a znode
``/consumers/[group]/offsets/[topic]/[partition]`` holding the offset as
decimal text. `read_zk_offsets` walks that tree (under an optional chroot);
`import_offsets` commits what it found through OffsetCommit, as a consumer
outside any generation would, so the broker checks and persists it like any
other commit. Offsets a group already committed to the broker are kept
unless ``overwrite`` is set, so the import can be run again safely.

kazoo is thread-based and blocking; the CLI runs this synchronously.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kbroker.tools.client import BrokerClient
from kbroker.tools.groups import commit_offsets, committed_offsets

log = logging.getLogger(__name__)

CONSUMERS_PATH = "/consumers"

ZkOffsets = dict[str, dict[tuple[str, int], int]]


class ZkImportError(Exception):
    pass


@dataclass
class GroupImport:
    group: str
    imported: dict[tuple[str, int], int] = field(default_factory=dict)
    kept: dict[tuple[str, int], int] = field(default_factory=dict)  # already committed
    failed: dict[tuple[str, int], str] = field(default_factory=dict)  # error name
    unreadable: list[str] = field(default_factory=list)  # znode paths


def _parse_offset(data: bytes) -> int | None:
    try:
        value = int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return value if value >= 0 else None


def read_zk_offsets(
    connect: str, groups: Iterable[str] = (), timeout: float = 15.0
) -> tuple[ZkOffsets, dict[str, list[str]]]:
    """group -> {(topic, partition): offset}, and group -> unreadable znodes.

    ``connect`` is a ZooKeeper connect string, ``host:port[,host:port...][/chroot]``.
    """
    try:
        from kazoo.client import KazooClient
        from kazoo.exceptions import KazooException, NoNodeError
    except ImportError:
        raise ZkImportError("the ZooKeeper import needs kazoo: pip install kazoo") from None
    zk = KazooClient(hosts=connect, timeout=timeout)
    try:
        zk.start(timeout=timeout)
    except Exception as exc:
        raise ZkImportError(f"cannot connect to ZooKeeper at {connect}: {exc}") from None
    offsets: ZkOffsets = {}
    unreadable: dict[str, list[str]] = {}
    try:
        wanted = list(groups)
        if not wanted:
            try:
                wanted = sorted(zk.get_children(CONSUMERS_PATH))
            except NoNodeError:
                return {}, {}
        for group in wanted:
            base = f"{CONSUMERS_PATH}/{group}/offsets"
            found: dict[tuple[str, int], int] = {}
            bad: list[str] = []
            try:
                topics = sorted(zk.get_children(base))
            except NoNodeError:
                topics = []
            for topic in topics:
                try:
                    partitions = zk.get_children(f"{base}/{topic}")
                except NoNodeError:
                    continue
                for name in sorted(partitions):
                    path = f"{base}/{topic}/{name}"
                    try:
                        data, _ = zk.get(path)
                    except NoNodeError:
                        continue
                    offset = _parse_offset(data or b"")
                    if not name.isdigit() or offset is None:
                        bad.append(path)
                        continue
                    found[(topic, int(name))] = offset
            offsets[group] = found
            if bad:
                unreadable[group] = bad
    except KazooException as exc:
        raise ZkImportError(f"reading ZooKeeper at {connect} failed: {exc!r}") from None
    finally:
        zk.stop()
        zk.close()
    return offsets, unreadable


def import_offsets(
    client: BrokerClient,
    offsets: ZkOffsets,
    unreadable: dict[str, list[str]] | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
) -> list[GroupImport]:
    """Commits each group's ZooKeeper offsets to its coordinator; one report per group."""
    reports = []
    for group, found in sorted(offsets.items()):
        report = GroupImport(group, unreadable=(unreadable or {}).get(group, []))
        reports.append(report)
        coordinator = client.for_group(group)
        try:
            existing = {} if overwrite else committed_offsets(coordinator, group)
            todo = {}
            for tp, offset in found.items():
                if tp in existing:
                    report.kept[tp] = existing[tp][0]
                else:
                    todo[tp] = offset
            if dry_run or not todo:
                report.imported = todo
                continue
            for tp, error in commit_offsets(coordinator, group, todo).items():
                if error is None:
                    report.imported[tp] = todo[tp]
                else:
                    report.failed[tp] = error
        finally:
            if coordinator is not client:
                coordinator.close()
        log.info("group %s: %d offsets imported from ZooKeeper", group, len(report.imported))
    return reports
