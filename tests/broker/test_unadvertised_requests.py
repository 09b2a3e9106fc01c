"""Requests outside what a broker advertises, and clients that speak the old message
formats, on Apache Kafka 3.9.1 (ZooKeeper mode) and kbroker.

What Kafka 3.9.1 does, and kbroker must do as well: a request for an API key the broker
does not list in ApiVersions (unknown to it, or known but not enabled, as the KRaft-only
APIs on a ZooKeeper-mode broker) or for a version outside the listed range closes the
connection without an answer (only ApiVersions itself is answered with
UNSUPPORTED_VERSION and the broker's ranges, tested in test_wire.py). Clients learn
what a broker serves from ApiVersions and never send those requests.

The old message formats (v0 and v1): Kafka 3.9 converts them; kbroker refuses them as
Kafka 4.0 does. Produce v0-v2 is listed (librdkafka turns compression on only when it
sees Produce v0) and each partition is answered UNSUPPORTED_VERSION; Fetch starts at
v4. So librdkafka with ``api.version.request=false`` and ``broker.version.fallback=0.9.0``
(Produce v1, MessageSet v0) and kafka-python pinned to ``api_version=(0, 10)`` (Produce
v2, MessageSet v1) get a clear "unsupported version" error from kbroker where Kafka 3.9
stores their records, and librdkafka with the 0.10.0 fallback and every client that
asks for ApiVersions work on both.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import UnsupportedVersionError

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.core import ApiVersionsRequest
from tests.cluster.kafka_zk import kafka_zk_broker
from tests.helpers import BrokerProcess, Wire, create_topic, knows_controller, topic_name, wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)


@dataclass
class System:
    name: str
    bootstrap: str


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def system(
    request: pytest.FixtureRequest,
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[System]:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "kafka":
        with kafka_zk_broker(zookeeper.connect, f"/unadv-{uuid.uuid4().hex[:8]}", root) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield System("kafka", kafka.bootstrap)
        return
    broker = BrokerProcess(root / "data").start()
    try:
        yield System("kbroker", broker.bootstrap)
        assert "Traceback" not in broker.output(), broker.output()[-4000:]
    finally:
        broker.kill()


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    with Wire(bootstrap) as wire:
        resp = wire.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def answer_to_raw_request(bootstrap: str, api_key: int, version: int) -> bytes:
    """What the broker sends back to one request (header v2, 40 zero bytes of body):
    b"" when it closes the connection instead."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), 10) as sock:
        payload = struct.pack(">hhih", api_key, version, 7, 1) + b"x\x00" + bytes(40)
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        sock.settimeout(10)
        try:
            return sock.recv(65536)
        except ConnectionResetError:
            return b""


def test_unadvertised_keys_and_versions_close_the_connection(system: System) -> None:
    ranges = advertised(system.bootstrap)
    # Every key up to 80 it does not advertise (Kafka 3.9's highest is 74), a key no
    # Kafka knows, and versions past the advertised maximum of two common APIs.
    unlisted = [(key, 0) for key in range(81) if key not in ranges] + [(32767, 0)]
    too_new = [(key, ranges[key][1] + 1) for key in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR)]
    assert len(unlisted) > 5
    for key, version in unlisted + too_new:
        assert answer_to_raw_request(system.bootstrap, key, version) == b"", (key, version)
    # ... and only that connection: the broker goes on serving.
    assert advertised(system.bootstrap) == ranges


def test_old_message_format_clients(system: System) -> None:
    """Kafka 3.9 stores what old clients send; kbroker refuses it as Kafka 4.0 does,
    and each client says so."""
    topic = topic_name("oldfmt")
    create_topic(system.bootstrap, topic)
    ranges = advertised(system.bootstrap)
    if system.name == "kbroker":
        assert ranges[ApiKey.PRODUCE][0] == 0 and ranges[ApiKey.FETCH][0] == 4

    def librdkafka_produce(**conf: Any) -> KafkaError | None:
        reports: list[KafkaError | None] = []
        producer = Producer(
            {"bootstrap.servers": system.bootstrap, "message.timeout.ms": 15000, **conf}
        )
        producer.produce(topic, key=b"k", value=b"v", on_delivery=lambda e, m: reports.append(e))
        assert producer.flush(30) == 0
        return reports[0]

    assert librdkafka_produce() is None
    assert (
        librdkafka_produce(**{"api.version.request": False, "broker.version.fallback": "0.10.0"})
        is None
    )
    old = librdkafka_produce(**{"api.version.request": False, "broker.version.fallback": "0.9.0"})
    kp = KafkaProducer(bootstrap_servers=system.bootstrap, api_version=(0, 10), retries=0)
    try:
        future = kp.send(topic, key=b"k", value=b"v")
        if system.name == "kafka":
            assert old is None
            assert future.get(timeout=30).offset >= 0
        else:
            assert old is not None and old.code() == KafkaError.UNSUPPORTED_VERSION, old
            with pytest.raises(UnsupportedVersionError):
                future.get(timeout=30)
    finally:
        kp.close(timeout=10)
