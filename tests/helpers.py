"""What many tests share: a broker process, free ports, waiting, and talking to a broker.

Two ways to talk to a broker: through a real client (confluent-kafka: `create_topic`,
`produce`, `consume_all`, `committed`) and at the byte level through `Wire`, kbroker's
own client plus raw frames, with request builders (`metadata`, `produce_req`,
`fetch_req`, `init_producer_id`) for what real clients never send. Fixtures stay in
the conftest.py files; this module holds no fixture.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.ports import free_port
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.admin import CreateTopicsRequest
from kbroker.protocol.messages.core import (
    ApiVersionsRequest,
    FetchRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
)
from kbroker.tools.client import BrokerClient

T = TypeVar("T")

KBROKER = [sys.executable, "-m", "kbroker.cli"]


# -- processes and waiting --------------------------------------------------------


@dataclass
class BrokerProcess:
    """One broker subprocess on loopback; restartable on the same data dir and port."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # Runs in the child before exec (e.g. to lower its resource limits).
    preexec: Callable[[], None] | None = None
    # More `kbroker serve` options (e.g. ["--log-format", "json"]).
    args: list[str] = field(default_factory=list)
    # Several listeners (Kafka's `listeners` setting) instead of one PLAINTEXT listener on
    # `port`; `port` must be one of theirs (the start waits until it accepts connections).
    listeners: str | None = None
    # The `kbroker` to run (default: this interpreter's, from the source tree), and the
    # environment it runs in (default: this process's).
    command: list[str] = field(default_factory=lambda: list(KBROKER))
    env: Mapping[str, str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *settings: str, timeout: float = 30.0) -> BrokerProcess:
        args = [*self.command, "serve", "--data-dir", str(self.data_dir)]
        if self.listeners is None:
            args += ["--listen", self.bootstrap]
        else:
            args += ["--set", f"listeners={self.listeners}"]
        for s in (*self.extra, *settings):
            args += ["--set", s]
        args += self.args
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"
        out = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=self.preexec, env=self.env
        )
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start listening in {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(
    check: Callable[[], T], what: str = "a condition", timeout: float = 30.0, interval: float = 0.2
) -> T:
    """Calls `check` until it returns something true, and returns that.

    Fails (AssertionError) when `timeout` seconds pass first; `check` may fail
    sooner by raising.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def knows_controller(bootstrap: str, conf: Mapping[str, Any] | None = None) -> bool:
    """Whether the broker at ``bootstrap`` names a controller in its Metadata. One that
    just started may not know it yet, and librdkafka's admin client, told so, waits for
    its next metadata refresh (minutes) before it sends CreateTopics anywhere. ``conf``:
    the client's security settings, when the listener has any."""
    try:
        md = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})}).list_topics(timeout=5)
    except Exception:
        return False
    return md.controller_id >= 0


def single_error_line(output: str) -> str:
    """A CLI's error output: exactly one line, never a traceback."""
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def topic_name(prefix: str = "t") -> str:
    """A fresh topic name: tests sharing a broker never see each other's records."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- through a real client (confluent-kafka) ---------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    """Creates a topic (replication factor 1) with the given topic configs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=configs)], operation_timeout=10
    )
    futures[name].result(timeout=15)


def send(
    producer: Producer,
    topic: str,
    records: Iterable[tuple[Any, ...]],
    flush_timeout: float = 30,
) -> list[Any]:
    """Produces (key, value[, headers[, partition[, timestamp]]]) records with `producer`,
    flushes, and returns the delivery reports, (error, message) each."""
    reports: list[Any] = []
    for rec in records:
        key, value, *rest = rec
        kwargs: dict[str, Any] = {}
        if rest and rest[0] is not None:
            kwargs["headers"] = rest[0]
        if len(rest) > 1 and rest[1] is not None:
            kwargs["partition"] = rest[1]
        if len(rest) > 2 and rest[2] is not None:
            kwargs["timestamp"] = rest[2]
        producer.produce(
            topic,
            key=key,
            value=value,
            on_delivery=lambda err, msg: reports.append((err, msg)),
            **kwargs,
        )
        producer.poll(0)
    assert producer.flush(flush_timeout) == 0
    return reports


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[Any, ...]],
    flush_timeout: float = 30,
    **conf: Any,
) -> list[Any]:
    """`send` through a new producer (linger.ms 5 unless `conf` says otherwise)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    return send(producer, topic, records, flush_timeout)


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: int | Iterable[int],
    expected: int,
    timeout: float = 20,
    conf: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Reads partitions (a count: 0..n-1, or which) from offset 0, without a group,
    until `expected` messages came or `timeout` passed; returns the messages. ``conf``:
    more consumer settings (security)."""
    numbers = range(partitions) if isinstance(partitions, int) else partitions
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **(conf or {}),
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in numbers])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        c.close()
    return out


def read_error(
    bootstrap: str, topic: str, timeout: float = 15, extra: dict[str, Any] | None = None
) -> int | None:
    """The error code a consumer gets reading partition 0 of ``topic`` from offset 0 (None
    when it reads a record instead); ``extra``: more consumer settings (SASL ...)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **(extra or {}),
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                return None if msg.error() is None else int(msg.error().code())
        raise AssertionError(f"no record and no error from {topic} within {timeout} s")
    finally:
        c.close()


def committed(
    bootstrap: str, group: str, topic: str, partitions: int | Iterable[int], timeout: float = 10
) -> dict[int, int]:
    """Partition -> the group's committed offset (negative when none), as a client sees it."""
    numbers = range(partitions) if isinstance(partitions, int) else partitions
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = c.committed([TopicPartition(topic, p) for p in numbers], timeout)
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


# -- at the byte level ---------------------------------------------------------------


def frame(payload: bytes) -> bytes:
    """A request or response frame: the payload behind its int32 size."""
    return struct.pack(">i", len(payload)) + payload


class Wire(BrokerClient):
    """kbroker's own client, plus raw bytes: to send what real clients never would.

    ``source_host`` connects from another loopback address (127.0.0.2, ...), which is
    the client address a broker's ACL host filters see."""

    def __init__(
        self, bootstrap: str, timeout: float = 10.0, source_host: str | None = None
    ) -> None:
        super().__init__(bootstrap, timeout, client_id="wire-test")
        if source_host is not None:
            self._sock.close()
            host, _, port = bootstrap.rpartition(":")
            self._sock = socket.create_connection(
                (host, int(port)), timeout, source_address=(source_host, 0)
            )

    @property
    def sock(self) -> socket.socket:
        return self._sock

    def send_raw(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def is_closed(self, timeout: float = 5.0) -> bool:
        self._sock.settimeout(timeout)
        try:
            return self._sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def still_serving(broker: BrokerProcess) -> None:
    """The broker answers ApiVersions on a new connection."""
    w = Wire(broker.bootstrap)
    try:
        resp = w.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        assert resp.error_code == 0
    finally:
        w.close()


def metadata(client: BrokerClient, topics: list[str] | None) -> Any:
    """Metadata v9 for `topics` (None: all), creating missing ones."""
    req = MetadataRequest(
        topics=None if topics is None else [MetadataRequest.Topic(name=t) for t in topics],
        allow_auto_topic_creation=True,
    )
    return client.request(ApiKey.METADATA, 9, req)


def produce_req(topic: str, records: bytes, acks: int = -1) -> Any:
    """A ProduceRequest of `records` to partition 0 of `topic`."""
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.Topic(
                name=topic,
                partition_data=[ProduceRequest.Topic.Partition(index=0, records=records)],
            )
        ],
    )


def wire_produce(
    client: BrokerClient, topic: str, records: bytes, version: int = 9
) -> tuple[int, int]:
    """(error code, base offset) of producing `records` to partition 0 (acks=all)."""
    resp = client.request(ApiKey.PRODUCE, version, produce_req(topic, records))
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def wire_create_topic(
    client: BrokerClient, name: str, partitions: int, configs: dict[str, str] | None = None
) -> int:
    """CreateTopics v5 of one topic (replication factor 1): its error code."""
    topic = CreateTopicsRequest.Topic
    config = CreateTopicsRequest.Topic.Config
    resp = client.request(
        ApiKey.CREATE_TOPICS,
        5,
        CreateTopicsRequest(
            topics=[
                topic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=[],
                    configs=[config(name=k, value=v) for k, v in (configs or {}).items()],
                )
            ],
            timeout_ms=5000,
            validate_only=False,
        ),
    )
    return int(resp.topics[0].error_code)


def fetch_req(
    topic: str,
    offset: int = 0,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
) -> Any:
    """A FetchRequest (no session) of partition 0 of `topic` from `offset`; `max_bytes`
    bounds both the response and the partition."""
    partition = FetchRequest.Topic.Partition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.Topic(topic=topic, partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
    )


def init_producer_id(client: BrokerClient) -> Any:
    """InitProducerId v4 for an idempotent producer: the response."""
    req = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    return client.request(ApiKey.INIT_PRODUCER_ID, 4, req)
