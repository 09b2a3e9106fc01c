"""``kbroker produce``: lines of stdin or files as records of one topic, over Produce.

Records go to ``--partition``, else keyed records to the partition Kafka's
default partitioner picks (murmur2 of the key, as the Java client and
librdkafka's ``murmur2_random`` do, so keys land where other producers put
them), else round-robin, one batch at a time. Records are sent in batches as
input arrives: a batch is flushed when it is full or when no more input is
ready, so an interactive session sees each line sent at once.

A topic that does not exist is created by the broker when its
auto.create.topics.enable allows it (the Metadata request asks for it, as kcat
and Kafka's console producer do), and the producer waits, within its timeout,
until every partition it writes to has a leader. A batch whose leader cannot be
reached or has moved is sent again to the leader the metadata names next, until
the timeout (see `Producer.flush`).
"""

from __future__ import annotations

import re
import select
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import ProduceRequest
from kbroker.tools.client import ClientError, error_name
from kbroker.tools.cluster import Cluster, broker_error
from kbroker.tools.configs import BROKER, Resource, describe

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
CHUNK = 1 << 16

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as an unsigned int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length - length % 4
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class Producer:
    """Batches records per partition and sends them to the leaders (`flush`)."""

    cluster: Cluster
    topic: str
    partition: int | None = None
    codec: int = 0
    acks: int = -1
    batch_records: int = 1000
    sent: int = field(init=False, default=0)
    _leaders: dict[int, int] = field(init=False, default_factory=dict)
    _pending: dict[int, list[Record]] = field(init=False, default_factory=dict)
    _pending_count: int = field(init=False, default=0)
    _next: int = field(init=False, default=0)
    # Whether the broker created the topic for this producer (auto.create.topics.enable).
    created: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._leaders, self.created = producer_leaders(self.cluster, self.topic, self.partition)

    def add(
        self,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes | None]],
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Queue a record (for ``partition`` if given, else as the producer chooses; with
        ``timestamp`` ms, else now)."""
        if partition is not None:
            if partition not in self._leaders:
                raise ClientError(
                    f"topic {self.topic!r} has no partition {partition} to produce to"
                    + (f" (--partition is {self.partition})" if self.partition is not None else "")
                )
        elif self.partition is not None:
            partition = self.partition
        elif key is not None:
            partition = default_partition(key, len(self._leaders))
        else:
            partition = sorted(self._leaders)[self._next % len(self._leaders)]
        self._pending.setdefault(partition, []).append(
            (key, value, headers, int(time.time() * 1000) if timestamp is None else timestamp)
        )
        self._pending_count += 1
        if self._pending_count >= self.batch_records:
            self.flush()

    def flush(self) -> None:
        """Send what is pending, one request per leader. A partition whose leader cannot be
        reached, or answers with an error Kafka's producers retry (not the leader any more,
        too few replicas in sync...), is sent again to the leader the metadata names then,
        until the cluster's timeout, as kcat does through a leader change (without
        idempotence a record may then be written twice, as there). ClientError on any other
        refusal, or when the timeout passes."""
        if not self._pending:
            return
        batches = {
            partition: (build_batch(records, codec=self.codec), len(records))
            for partition, records in sorted(self._pending.items())
        }
        self._pending.clear()
        self._pending_count = 0
        self._next += 1
        deadline = time.monotonic() + self.cluster.timeout
        pause = 0.05
        while True:
            retry = self._send(batches)
            if not retry:
                return
            if time.monotonic() + pause > deadline:
                partition, why = min(retry.items())
                raise ClientError(f"producing to {self.topic}-{partition} failed: {why}")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
            self._refresh_leaders()

    def _send(self, batches: dict[int, tuple[bytes, int]]) -> dict[int, str]:
        """Send ``batches`` (partition -> (batch, records)) to their leaders; those taken
        leave ``batches`` and count as sent. Returns partition -> why, for those to send
        again; ClientError for a refusal that is final."""
        by_leader: dict[int, list[int]] = {}
        for partition in sorted(batches):
            by_leader.setdefault(self._leaders[partition], []).append(partition)
        retry: dict[int, str] = {}
        for node, partitions in by_leader.items():
            P = ProduceRequest.Topic.Partition
            req = ProduceRequest(
                transactional_id=None,
                acks=self.acks,
                timeout_ms=int(self.cluster.timeout * 1000),
                topic_data=[
                    ProduceRequest.Topic(
                        name=self.topic,
                        partition_data=[P(index=p, records=batches[p][0]) for p in partitions],
                    )
                ],
            )
            answers: dict[int, int]
            try:
                client = self.cluster.node(node)
                version = client.version(ApiKey.PRODUCE)
                if self.acks == 0:
                    client.send(ApiKey.PRODUCE, version, req)
                    answers = dict.fromkeys(partitions, ErrorCode.NONE)
                else:
                    resp = client.request(ApiKey.PRODUCE, version, req)
                    answers = self._answers(resp)
            except ClientError as exc:
                if not self.cluster.lost(node):
                    raise
                retry.update((p, str(exc)) for p in partitions)
                continue
            for p in partitions:
                code = answers.get(p, ErrorCode.NONE)
                if code == ErrorCode.NONE:
                    self.sent += batches.pop(p)[1]
                else:
                    retry[p] = error_name(code)
        return retry

    def _answers(self, resp: Any) -> dict[int, int]:
        """partition -> error code of a Produce response, NONE or one to retry;
        ClientError for any other."""
        answers: dict[int, int] = {}
        for t in resp.responses:
            for p in t.partition_responses:
                if p.error_code != ErrorCode.NONE and p.error_code not in _RETRIABLE_PRODUCE:
                    detail = p.error_message or "; ".join(
                        e.batch_index_error_message or "" for e in p.record_errors
                    )
                    raise ClientError(
                        f"producing to {t.name}-{p.index} failed: {error_name(p.error_code)}"
                        + (f" ({detail})" if detail else "")
                    )
                answers[p.index] = p.error_code
        return answers

    def _refresh_leaders(self) -> None:
        """Take the leaders the metadata names now (a partition without one keeps its last)."""
        try:
            resp = self.cluster.metadata([self.topic])
        except ClientError:
            return  # no broker answers at the moment: the next try asks again
        for t in resp.topics:
            if t.name == self.topic and t.error_code == ErrorCode.NONE:
                for p in t.partitions:
                    if p.partition_index in self._leaders and p.leader_id >= 0:
                        self._leaders[p.partition_index] = p.leader_id


# Produce errors Kafka's producers send again: the leader moved or is being elected, too
# few replicas in sync for now, a request or disk that timed out or failed.
_RETRIABLE_PRODUCE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


# Topic and partition errors that pass by themselves: a topic just created, a leader
# being elected.
_RETRIABLE = frozenset({ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER})


def producer_leaders(
    cluster: Cluster, topic: str, partition: int | None = None
) -> tuple[dict[int, int], bool]:
    """partition -> leader id of ``topic`` (only ``partition`` when given), and whether the
    broker created the topic on being asked (its auto.create.topics.enable). Waits up to the
    cluster's timeout for the topic to appear and for leaders, as a Kafka producer does (a
    KRaft broker answers UNKNOWN_TOPIC_OR_PARTITION until the topic it asked its controller
    for exists). ClientError for a topic the broker does not create, a partition the topic
    lacks, or a topic or leader still missing at the timeout."""
    deadline = time.monotonic() + cluster.timeout
    auto_create = False
    pause = 0.05
    while True:
        resp = cluster.metadata([topic], auto_create=auto_create)
        found = next((t for t in resp.topics if t.name == topic), None)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None else found.error_code
        leaders = (
            {} if found is None else {p.partition_index: p.leader_id for p in found.partitions}
        )
        problem: str
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if not auto_create and _auto_creation(cluster, resp) is False:
                raise ClientError(
                    broker_error(f"topic {topic!r}", code)
                    + ": it does not exist and the broker does not create topics on first use "
                    "(auto.create.topics.enable=false); create it with `kbroker topic create`"
                )
            if not auto_create:
                auto_create = True  # ask again, now letting the broker create it
                continue
            problem = (
                broker_error(f"topic {topic!r}", code)
                + f": the broker did not create it within {cluster.timeout:g}s"
            )
        elif code in _RETRIABLE or (code == ErrorCode.NONE and not leaders):
            problem = broker_error(f"topic {topic!r}", code or ErrorCode.LEADER_NOT_AVAILABLE)
        elif code != ErrorCode.NONE:
            raise ClientError(broker_error(f"topic {topic!r}", code))
        elif partition is not None and partition not in leaders:
            raise ClientError(
                f"topic {topic!r} has no partition {partition} (it has {len(leaders)})"
            )
        else:
            wanted = sorted(leaders) if partition is None else [partition]
            leaderless = [p for p in wanted if leaders[p] < 0]
            if not leaderless:
                return {p: leaders[p] for p in wanted}, auto_create
            problem = f"{topic}-{leaderless[0]} has no leader (LEADER_NOT_AVAILABLE)"
        if time.monotonic() + pause > deadline:
            raise ClientError(problem)
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _auto_creation(cluster: Cluster, metadata: Any) -> bool | None:
    """The auto.create.topics.enable of the broker the cluster's Metadata requests go to
    (found among the brokers of ``metadata`` by its address), or None when it cannot be
    told (another address, or DescribeConfigs refused)."""
    address = cluster.bootstrap.address
    ids = [b.node_id for b in metadata.brokers if f"{b.host}:{b.port}" == address]
    if len(metadata.brokers) == 1:
        ids = [metadata.brokers[0].node_id]
    if len(ids) != 1:
        return None
    try:
        [row] = describe(
            cluster, Resource(BROKER, str(ids[0])), ["auto.create.topics.enable"], True
        )
    except (ClientError, ValueError):
        return None
    value = row["value"]
    return None if value is None else str(value).lower() == "true"


def _more_ready(stream: BinaryIO) -> bool:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # an in-memory stream: everything is there
        return True
    return bool(select.select([fd], [], [], 0)[0])


def read_lines(streams: Sequence[BinaryIO], max_line_bytes: int) -> Iterator[bytes | None]:
    """The lines of each stream in turn (without the newline), and None whenever no more
    input is ready yet (the moment to send what was read). A last line without a newline
    counts; a line longer than ``max_line_bytes`` is an error."""
    for stream in streams:
        read = getattr(stream, "read1", stream.read)
        tail = b""
        while True:
            chunk = read(CHUNK)
            if not chunk:
                break
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            if any(len(line) > max_line_bytes for line in (tail, *lines)):
                raise ClientError(f"a line is longer than {max_line_bytes} bytes")
            yield from lines
            if not _more_ready(stream):
                yield None
        if tail:
            yield tail
    yield None


def produce_lines(
    producer: Producer,
    streams: Sequence[BinaryIO],
    key_separator: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
    max_line_bytes: int = 1 << 20,
    fmt: re.Pattern[bytes] | None = None,
) -> int:
    """Produce each input line as a record (``KEY<sep>VALUE`` with ``key_separator``, or
    the fields of ``fmt``, an `input_format`); returns the number of records sent."""
    number = 0
    for line in read_lines(streams, max_line_bytes):
        if line is None:
            producer.flush()
            continue
        number += 1
        if fmt is not None:
            _add_formatted(producer, fmt, line, number, headers)
            continue
        key = None
        if key_separator is not None:
            key, sep, line = line.partition(key_separator)
            if not sep:
                producer.flush()
                raise ClientError(
                    f"line {number} has no key separator {key_separator.decode(errors='replace')!r}"
                    f" ({producer.sent} records were sent)"
                )
        producer.add(key, line, list(headers))
    producer.flush()
    return producer.sent


# The fields an input format (-f) may hold, each at most once, and what they match.
_INPUT_FIELDS = {"k": rb".*?", "s": rb".*?", "h": rb".*?", "p": rb"\d+", "T": rb"\d+"}


def _add_formatted(
    producer: Producer,
    fmt: re.Pattern[bytes],
    line: bytes,
    number: int,
    headers: Sequence[tuple[str, bytes]],
) -> None:
    match = fmt.fullmatch(line)
    try:
        if match is None:
            raise ValueError("it does not match the format")
        fields = match.groupdict()
        found = _headers(fields["h"]) if fields.get("h") is not None else []
        producer.add(
            fields.get("k"),
            fields["s"],
            [*headers, *found],
            partition=int(fields["p"]) if fields.get("p") is not None else None,
            timestamp=int(fields["T"]) if fields.get("T") is not None else None,
        )
    except (ValueError, ClientError) as exc:
        producer.flush()
        raise ClientError(f"line {number}: {exc} ({producer.sent} records were sent)") from None


def input_format(fmt: str) -> re.Pattern[bytes]:
    """A kcat-like format for input lines (``%k\\t%s``, ``%p:%k=%s``): %k key, %s value,
    %h headers as k=v,..., %p partition, %T timestamp (ms), %% a percent sign; \\t and
    \\\\ escapes; a trailing \\n is the end of the line. The line must match it whole."""
    text = fmt[:-2] if fmt.endswith("\\n") else fmt.removesuffix("\n")
    pattern = bytearray()
    seen: set[str] = set()
    i = 0
    while i < len(text):
        c = text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if c == "%" and nxt == "%":
            pattern += re.escape(b"%")
        elif c == "%":
            if nxt not in _INPUT_FIELDS:
                raise ValueError(
                    f"unknown input field %{nxt} (input formats take %k %s %h %p %T %%)"
                    if nxt
                    else "the format ends with a lone %"
                )
            if nxt in seen:
                raise ValueError(f"%{nxt} appears twice in the format")
            seen.add(nxt)
            pattern += b"(?P<" + nxt.encode() + b">" + _INPUT_FIELDS[nxt] + b")"
        elif c == "\\" and nxt in ("t", "\\"):
            pattern += re.escape(b"\t" if nxt == "t" else b"\\")
        else:
            pattern += re.escape(c.encode())
            i += 1
            continue
        i += 2
    if "s" not in seen:
        raise ValueError("the format needs %s (the value)")
    return re.compile(bytes(pattern), re.DOTALL)


def _headers(text: bytes) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for pair in text.split(b",") if text else []:
        name, sep, value = pair.partition(b"=")
        if not sep or not name:
            raise ValueError(f"expected KEY=VALUE headers, got {pair.decode(errors='replace')!r}")
        out.append((name.decode(errors="replace"), value))
    return out
