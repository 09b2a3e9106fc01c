"""``kbroker consume``: read the records of assigned partitions of one topic over Fetch.

Where to start (`StartSpec`): beginning, end, an absolute offset, ``-N``
(N before the end), ``+N`` (N after the beginning) or ``@WHEN`` (the first
record at or after a time). `records` yields records in offset order per
partition until ``count`` records, the end offsets as of the start
(``until_end``), or forever.
"""

from __future__ import annotations

import base64
import struct
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbroker._kbroker import KBrokerError, decode_records, validate_batches
from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode
from kbroker.protocol.messages.core import FetchRequest
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error
from kbroker.tools.group_member import GroupMember
from kbroker.tools.offsets import EARLIEST, LATEST, list_offsets, parse_time

MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 1 << 20
FETCH_MAX_BYTES = 16 << 20
MAX_DECOMPRESSED = 64 << 20
_LOG_OVERHEAD = 12  # base offset and length in front of each batch
_BATCH_HEADER = 61


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    def to_json(self) -> dict[str, Any]:
        """key, value and header values as text when they are UTF-8, else as
        ``key_base64``/``value_base64`` (the text field is then null)."""
        out: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
        }
        for name, data in (("key", self.key), ("value", self.value)):
            text = _text(data)
            out[name] = text
            if data is not None and text is None:
                out[f"{name}_base64"] = base64.b64encode(data).decode()
        out["headers"] = [[k, _text(v)] for k, v in self.headers]
        return out


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class StartSpec:
    kind: str  # "beginning", "end", "offset", "from_end", "from_beginning", "time"
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> StartSpec:
        spec = text.strip()
        if spec in ("beginning", "earliest"):
            return cls("beginning")
        if spec in ("end", "latest"):
            return cls("end")
        if spec.startswith("@"):
            return cls("time", parse_time(spec[1:]))
        if spec[:1] in "+-" and spec[1:].isdigit():
            return cls("from_end" if spec[0] == "-" else "from_beginning", int(spec[1:]))
        if spec.isdigit():
            return cls("offset", int(spec))
        raise ValueError(
            f"expected beginning, end, OFFSET, -N, +N or @TIME (epoch ms or ISO), got {text!r}"
        )


def _batches(data: memoryview, topic: str, partition: int) -> Iterator[tuple[int, list[Any]]]:
    """(next offset, records) of each whole batch in a fetched record set; a partial batch
    at the end (the fetch size cut it) is left for the next fetch."""
    position = 0
    while len(data) - position >= _LOG_OVERHEAD:
        (length,) = struct.unpack_from(">i", data, position + 8)
        total = length + _LOG_OVERHEAD
        if length < _BATCH_HEADER - _LOG_OVERHEAD:
            raise ClientError(f"invalid batch length {length} from {topic}-{partition}")
        if position + total > len(data):
            return
        raw = bytes(data[position : position + total])  # decode_records takes bytes
        try:
            [info] = validate_batches(raw, total, True, MAX_DECOMPRESSED)
            records = [] if info.is_control else decode_records(raw, MAX_DECOMPRESSED)
        except KBrokerError as exc:
            raise ClientError(f"invalid batch from {topic}-{partition}: {exc}") from None
        yield info.base_offset + info.last_offset_delta + 1, records
        position += total


# Partition errors of a Fetch or ListOffsets that pass by themselves: the leader moved or is
# being elected. Kafka's consumers then ask the metadata again and go to the new leader.
_LEADER_MOVED = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
_LEADER_MOVED_NAMES = frozenset(error_name(code) for code in _LEADER_MOVED)
# Seconds between two looks at the metadata while a partition waits for a leader.
RETRY_PAUSE = 0.5


class Fetcher:
    """Reads partitions of one topic from their leaders, one Fetch per leader a round.

    A partition whose leader cannot be reached (killed, say) or answers that it leads it no
    more waits: the others are read meanwhile, the metadata is asked again every
    RETRY_PAUSE seconds and the partition is read from the leader it names, as Kafka's
    consumers and kcat do through a leader change. A partition still waiting after the
    cluster's timeout ends the reading in a ClientError naming it, its leader and why."""

    def __init__(self, cluster: Cluster, topic: str, read_committed: bool = False) -> None:
        self.cluster = cluster
        self.topic = topic
        self.read_committed = read_committed
        [meta] = self._describe()
        self.topic_id = meta.topic_id
        self.leaders = {p.partition_index: p.leader_id for p in meta.partitions}
        # partition -> (since when it waits, why)
        self.waiting: dict[int, tuple[float, str]] = {}
        self._retry_at = 0.0

    def _describe(self) -> list[Any]:
        resp = self.cluster.metadata([self.topic])
        for t in resp.topics:
            if t.error_code != ErrorCode.NONE:
                raise ClientError(broker_error(f"topic {t.name!r}", t.error_code))
        return list(resp.topics)

    def check_partitions(self, partitions: Iterable[int]) -> None:
        """ClientError for a partition the topic does not have."""
        for p in partitions:
            if p not in self.leaders:
                raise ClientError(
                    f"topic {self.topic!r} has no partition {p} (it has {len(self.leaders)})"
                )

    def _wait(self, partition: int, why: str) -> None:
        since = self.waiting.get(partition, (time.monotonic(), ""))[0]
        self.waiting[partition] = (since, why)

    def _due(self) -> list[int]:
        """Partitions to try again now (those that wait are tried once a pause has passed
        and the metadata was asked again); ClientError for one that waited too long."""
        if not self.waiting:
            return []
        now = time.monotonic()
        for p, (since, why) in sorted(self.waiting.items()):
            if now - since > self.cluster.timeout:
                raise ClientError(
                    f"cannot read {self.topic}-{p}: {why}, and no other broker took over "
                    f"within {self.cluster.timeout:g}s"
                )
        if now < self._retry_at:
            return []
        self._retry_at = now + RETRY_PAUSE
        try:
            [meta] = self._describe()
        except ClientError:
            return []  # no broker answers for now: ask again after the pause
        self.leaders.update({p.partition_index: p.leader_id for p in meta.partitions})
        return sorted(self.waiting)

    def _leaders_of(self, partitions: Iterable[int]) -> dict[int, list[int]]:
        """leader -> partitions to ask it for now: those not waiting and those due again;
        a partition without a leader waits."""
        due = set(self._due())
        by_node: dict[int, list[int]] = {}
        for p in sorted(partitions):
            if p in self.waiting and p not in due:
                continue
            leader = self.leaders[p]
            if leader < 0:
                self._wait(p, "it has no leader (LEADER_NOT_AVAILABLE)")
                continue
            by_node.setdefault(leader, []).append(p)
        return by_node

    def _unreachable(self, node: int, why: str) -> str:
        return f"its leader, broker {node}, cannot be reached ({why})"

    def start(
        self,
        unstarted: set[int],
        start: StartSpec,
        positions: dict[int, int],
        ends: dict[int, int],
        committed: Mapping[int, int] | None = None,
    ) -> None:
        """Find where to start reading the ``unstarted`` partitions (``committed``'s offset,
        else ``start``'s) and their end offsets now, into ``positions`` and ``ends``; those
        found leave ``unstarted``, those whose leader cannot be asked wait."""
        by_node = self._leaders_of(unstarted)
        leaders = {(self.topic, p): node for node, ps in by_node.items() for p in ps}
        if not leaders:
            self._pause_if_idle()
            return
        unreachable: dict[int, str] = {}
        earliest = list_offsets(self.cluster, leaders, EARLIEST, leaders, unreachable)
        latest = list_offsets(self.cluster, leaders, LATEST, leaders, unreachable)
        at: dict[tuple[str, int], dict[str, Any]] = {}
        if start.kind == "time":
            at = list_offsets(self.cluster, leaders, start.value, leaders, unreachable)
        for tp, node in sorted(leaders.items()):
            p = tp[1]
            if node in unreachable:
                self._wait(p, self._unreachable(node, unreachable[node]))
                continue
            errors = [r[tp]["error"] for r in (earliest, latest, at) if tp in r and r[tp]["error"]]
            if errors:
                if errors[0] in _LEADER_MOVED_NAMES:
                    self._wait(p, f"its leader, broker {node}, answered {errors[0]}")
                    continue
                raise ClientError(f"cannot list the offsets of {tp[0]}-{p}: {errors[0]}")
            first, end = earliest[tp]["offset"], latest[tp]["offset"]
            found = at[tp]["offset"] if tp in at else None
            position = {
                "beginning": first,
                "end": end,
                "offset": start.value,
                "from_end": max(first, end - start.value),
                "from_beginning": min(end, first + start.value),
                "time": end if found is None else found,
            }[start.kind]
            if not first <= position <= end:
                raise ClientError(
                    f"offset {position} is outside {tp[0]}-{p}, which holds offsets {first} "
                    f"to {end} (OFFSET_OUT_OF_RANGE)"
                )
            if committed is not None and p in committed:
                position = committed[p]
            positions[p], ends[p] = position, end
            unstarted.discard(p)
            self.waiting.pop(p, None)

    def _pause_if_idle(self) -> None:
        """Nothing could be asked this round: wait for the next look at the metadata."""
        time.sleep(max(0.0, min(self._retry_at - time.monotonic(), RETRY_PAUSE)) or 0.05)

    def fetch(self, positions: dict[int, int], wanted: Iterable[int]) -> list[Record]:
        """The records after ``positions`` of the ``wanted`` partitions (waiting a little
        when there are none); advances ``positions`` past what it read."""
        by_node = self._leaders_of(wanted)
        if not by_node:
            self._pause_if_idle()
            return []
        out: list[Record] = []
        for node, partitions in by_node.items():
            try:
                client = self.cluster.node(node)
                version = client.version(ApiKey.FETCH)
                resp = client.request(
                    ApiKey.FETCH, version, self._request(version, positions, partitions)
                )
            except ClientError as exc:
                if not self.cluster.lost(node):
                    raise
                for p in partitions:
                    self._wait(p, self._unreachable(node, str(exc)))
                continue
            if resp.error_code != ErrorCode.NONE:
                raise ClientError(f"fetch from broker {node} failed: {error_name(resp.error_code)}")
            for t in resp.responses:
                for part in t.partitions:
                    if part.error_code in _LEADER_MOVED:
                        self._wait(
                            part.partition_index,
                            f"its leader, broker {node}, answered {error_name(part.error_code)}",
                        )
                        continue
                    self.waiting.pop(part.partition_index, None)
                    out += self._read(part, positions)
        return out

    def _request(self, version: int, positions: dict[int, int], partitions: list[int]) -> Any:
        T = FetchRequest.Topic
        return FetchRequest(
            max_wait_ms=min(MAX_WAIT_MS, int(self.cluster.timeout * 500)),  # answered in time
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            isolation_level=1 if self.read_committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=[
                T(
                    topic=self.topic,
                    topic_id=self.topic_id if version >= 13 else ZERO_UUID,
                    partitions=[
                        T.Partition(
                            partition=p,
                            fetch_offset=positions[p],
                            partition_max_bytes=PARTITION_MAX_BYTES,
                        )
                        for p in partitions
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )

    def _read(self, part: Any, positions: dict[int, int]) -> list[Record]:
        p = part.partition_index
        if part.error_code != ErrorCode.NONE:
            raise ClientError(
                f"fetching {self.topic}-{p} at offset {positions[p]} failed: "
                f"{error_name(part.error_code)}"
            )
        data = memoryview(part.records or b"")
        before = positions[p]
        out = []
        for next_offset, batch in _batches(data, self.topic, p):
            for offset, ts, key, value, headers in batch:
                if offset >= positions[p]:  # a compressed batch may start before the position
                    out.append(Record(self.topic, p, offset, ts, key, value, headers))
            positions[p] = max(positions[p], next_offset)
        if len(data) and positions[p] == before:
            raise ClientError(
                f"{self.topic}-{p} answered at offset {before} with no whole batch "
                f"({len(data)} bytes)"
            )
        return out


def records(
    cluster: Cluster,
    topic: str,
    partitions: Sequence[int] | None,
    start: StartSpec,
    count: int | None = None,
    until_end: bool = False,
    read_committed: bool = False,
) -> Iterator[Record]:
    """The records of the assigned ``partitions`` (None: all) from ``start``."""
    fetcher = Fetcher(cluster, topic, read_committed)
    wanted = sorted(fetcher.leaders) if partitions is None else sorted(set(partitions))
    fetcher.check_partitions(wanted)
    unstarted = set(wanted)
    positions: dict[int, int] = {}
    ends: dict[int, int] = {}
    seen = 0
    while True:
        if unstarted:
            fetcher.start(unstarted, start, positions, ends)
        active = [p for p in positions if not until_end or positions[p] < ends[p]]
        if not active and not unstarted:
            return
        for record in fetcher.fetch(positions, active):
            yield record
            seen += 1
            if count is not None and seen >= count:
                return


def group_records(
    cluster: Cluster,
    topic: str,
    group: str,
    start: StartSpec,
    count: int | None = None,
    until_end: bool = False,
    read_committed: bool = False,
) -> Iterator[Record]:
    """The records of the partitions the group ``group`` assigns this member, from the
    group's committed offsets (``start`` where it has none), committing what was yielded
    after each fetch and when done; leaves the group at the end."""
    fetcher = Fetcher(cluster, topic, read_committed)
    member = GroupMember(cluster, group, topic)
    seen = 0
    consumed: dict[int, int] = {}
    unstarted: set[int] = set()
    committed: dict[int, int] = {}
    positions: dict[int, int] = {}
    ends: dict[int, int] = {}
    try:
        while True:
            if member.generation < 0:
                member.join()
                consumed, positions, ends = {}, {}, {}
                unstarted = set(member.partitions)
                committed = member.committed()
            if unstarted:
                fetcher.start(unstarted, start, positions, ends, committed)
            active = [p for p in positions if not until_end or positions[p] < ends[p]]
            if not active and not unstarted and until_end:
                return
            for record in fetcher.fetch(positions, active) if active or unstarted else []:
                yield record
                consumed[record.partition] = record.offset + 1
                seen += 1
                if count is not None and seen >= count:
                    return
            member.commit(consumed)
            if not active and not unstarted:
                time.sleep(MAX_WAIT_MS / 1000)
            member.heartbeat()
    finally:
        member.close(consumed, quiet=sys.exc_info()[0] is not None)


def render(fmt: str, record: Record) -> bytes:
    """kcat's -f format: %t topic, %p partition, %o offset, %T timestamp, %k key, %s value,
    %K/%S their lengths (-1 for null), %h headers as k=v,...; \\n \\t \\\\ escapes."""
    out = bytearray()
    i = 0
    while i < len(fmt):
        c = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if c == "%" and nxt:
            out += _field(nxt, record)
            i += 2
        elif c == "\\" and nxt in ("n", "t", "\\"):
            out += {"n": b"\n", "t": b"\t", "\\": b"\\"}[nxt]
            i += 2
        else:
            out += c.encode()
            i += 1
    return bytes(out)


def _field(name: str, r: Record) -> bytes:
    if name == "k":
        return r.key or b""
    if name == "s":
        return r.value or b""
    simple = {
        "t": r.topic,
        "p": r.partition,
        "o": r.offset,
        "T": r.timestamp,
        "K": -1 if r.key is None else len(r.key),
        "S": -1 if r.value is None else len(r.value),
        "%": "%",
    }
    if name in simple:
        return str(simple[name]).encode()
    if name == "h":
        return b",".join(k.encode() + b"=" + (v or b"") for k, v in r.headers)
    raise ValueError(f"unknown format field %{name}")


def check_format(fmt: str) -> None:
    """ValueError naming the first unknown %-field of ``fmt``."""
    render(fmt, Record("t", 0, 0, 0, None, None, []))
