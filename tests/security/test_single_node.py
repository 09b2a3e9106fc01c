"""One broker with a listener of each security protocol, used by real clients and attacked.

PLAINTEXT, SSL (client certificates requested, names mapped by
ssl.principal.mapping.rules), SASL_PLAINTEXT and SASL_SSL with PLAIN. Real
clients (confluent-kafka, kafka-python, aiokafka) produce and consume over
each; each listener's clients are told that listener's addresses; what must
be refused is refused while the broker goes on serving the others.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, encode_request
from kbroker.protocol.messages.core import MetadataRequest
from tests.helpers import BrokerProcess, free_port, wait_for
from tests.security.certs import CertAuthority, Identity

pytestmark = pytest.mark.timeout(120)

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    + ";"
)
RULES = r"RULE:^CN=([A-Za-z]+),OU=eng,O=kbroker$/$1/L"


@dataclass
class Secured:
    broker: BrokerProcess
    ports: dict[str, int]
    ca: CertAuthority
    alice_cert: Identity
    stranger_cert: Identity

    def client(self, listener: str, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for ``listener`` (SASL as alice unless told otherwise)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
            "security.protocol": listener,
        }
        if "SSL" in listener:
            conf["ssl.ca.location"] = str(self.ca.cert)
        if "SASL" in listener:
            conf |= {"sasl.mechanism": "PLAIN", "sasl.username": "alice"}
            conf["sasl.password"] = PASSWORDS["alice"]
        return conf | extra


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    ca = CertAuthority.make(root / "ca")
    server = ca.issue("broker", "/CN=localhost/O=kbroker", key_password="key-pw")
    alice = ca.issue("alice", "/O=kbroker/OU=eng/CN=Alice")
    stranger = ca.issue("stranger", "/O=elsewhere/OU=sales/CN=mallory")
    ports = {p: free_port() for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
    broker = BrokerProcess(root / "data", port=ports["PLAINTEXT"], listeners=listeners)
    broker.args = ["--log-level", "DEBUG"]  # the request log names each request's principal
    broker.start(
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={server.keystore}",
        "ssl.key.password=key-pw",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={ca.cert}",
        "listener.name.ssl.ssl.client.auth=requested",
        f"ssl.principal.mapping.rules={RULES}",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "group.initial.rebalance.delay.ms=0",
    )
    try:
        yield Secured(broker, ports, ca, alice, stranger)
    finally:
        broker.kill()
    assert "alice-secret" not in broker.output() and "key-pw" not in broker.output()


def _roundtrip(conf: dict[str, Any]) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(conf)
    for i in range(10):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(conf | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_librdkafka_produces_and_consumes_over_each_listener(
    secured: Secured, listener: str
) -> None:
    _roundtrip(secured.client(listener))


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_SSL"])
def test_metadata_names_the_listener_the_client_came_through(
    secured: Secured, listener: str
) -> None:
    brokers = AdminClient(secured.client(listener)).list_topics(timeout=20).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secured.ports[listener])]


def test_a_client_certificate_names_the_principal(secured: Secured) -> None:
    conf = secured.client(
        "SSL",
        **{
            "ssl.certificate.location": str(secured.alice_cert.cert),
            "ssl.key.location": str(secured.alice_cert.key),
            "client.id": "mtls-alice",
        },
    )
    AdminClient(conf).list_topics(timeout=20)
    wait_for(
        lambda: (
            "client_id=mtls-alice" in secured.broker.output()
            and "principal=User:alice " in secured.broker.output()
        ),
        "the request log naming User:alice",
        timeout=10,
    )


def test_a_certificate_no_rule_maps_is_refused(secured: Secured) -> None:
    conf = secured.client(
        "SSL",
        **{
            "ssl.certificate.location": str(secured.stranger_cert.cert),
            "ssl.key.location": str(secured.stranger_cert.key),
        },
    )
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=5)
    assert "no ssl.principal.mapping.rules rule matches" in secured.broker.output()
    AdminClient(secured.client("SSL")).list_topics(timeout=20)


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("nobody", "alice-secret")])
def test_a_wrong_password_or_unknown_user_fails_authentication(
    secured: Secured, user: str, password: str
) -> None:
    errors: list[str] = []
    conf = secured.client(
        "SASL_SSL",
        **{
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": lambda e: errors.append(e.str()),
        },
    )
    producer = Producer(conf)
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert any("Authentication failed: Invalid username or password" in e for e in errors), errors


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the broker closes ``sock`` (reads end) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        return False
    return True


def test_a_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    with _raw(secured.ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall(encode_request(ApiKey.METADATA, 4, 1, "early", MetadataRequest(topics=None)))
        assert _closed(sock)
    AdminClient(secured.client("SASL_PLAINTEXT")).list_topics(timeout=20)


def test_a_sasl_frame_announcing_a_huge_length_closes_the_connection(secured: Secured) -> None:
    with _raw(secured.ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall(struct.pack(">i", 600 * 1024 * 1024) + b"\0" * 64)
        assert _closed(sock)
    assert "before authentication" in secured.broker.output()
    AdminClient(secured.client("SASL_PLAINTEXT")).list_topics(timeout=20)


def test_a_plaintext_client_on_a_tls_port_is_refused(secured: Secured) -> None:
    conf = secured.client("PLAINTEXT") | {
        "bootstrap.servers": f"127.0.0.1:{secured.ports['SSL']}",
    }
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=5)
    AdminClient(secured.client("SSL")).list_topics(timeout=20)


def test_kafka_python_and_aiokafka_over_sasl_ssl(secured: Secured) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secured.client("SASL_SSL"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    common = {
        "bootstrap_servers": f"127.0.0.1:{secured.ports['SASL_SSL']}",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORDS["alice"],
    }
    producer = KafkaProducer(ssl_cafile=str(secured.ca.cert), **common)
    producer.send(topic, b"from-kafka-python").get(timeout=30)
    producer.close()

    async def aio() -> list[bytes]:
        context = create_ssl_context(cafile=str(secured.ca.cert))
        aproducer = AIOKafkaProducer(ssl_context=context, **common)
        await aproducer.start()
        try:
            await aproducer.send_and_wait(topic, b"from-aiokafka")
        finally:
            await aproducer.stop()
        consumer = AIOKafkaConsumer(
            topic, ssl_context=context, auto_offset_reset="earliest", **common
        )
        await consumer.start()
        try:
            got = []
            async for msg in consumer:
                got.append(msg.value)
                if len(got) == 2:
                    return got
        finally:
            await consumer.stop()
        return []

    assert asyncio.run(asyncio.wait_for(aio(), 60)) == [b"from-kafka-python", b"from-aiokafka"]
    consumer = KafkaConsumer(
        topic, ssl_cafile=str(secured.ca.cert), auto_offset_reset="earliest",
        consumer_timeout_ms=10000, **common,
    )  # fmt: skip
    assert [m.value for m in consumer][:2] == [b"from-kafka-python", b"from-aiokafka"]
    consumer.close()


@pytest.fixture(scope="module")
def quick_timeouts(tmp_path_factory: pytest.TempPathFactory, secured: Secured) -> Iterator[Secured]:
    """A second broker whose connections must finish TLS and SASL within 2 s."""
    root = tmp_path_factory.mktemp("quick")
    ports = {p: free_port() for p in ("SSL", "SASL_PLAINTEXT")}
    listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
    server = secured.ca.issue("quick", "/CN=localhost")
    broker = BrokerProcess(root / "data", port=ports["SASL_PLAINTEXT"], listeners=listeners)
    broker.start(
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={server.keystore}",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        "connections.max.idle.ms=2000",
        "security.inter.broker.protocol=SSL",
    )
    try:
        yield Secured(broker, ports, secured.ca, secured.alice_cert, secured.stranger_cert)
    finally:
        broker.kill()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_connections_that_never_authenticate_are_closed(quick_timeouts: Secured) -> None:
    """1,000 connections that say nothing (TLS handshakes never made, SASL exchanges never
    started) are all closed within the authentication timeout, and the broker's memory
    stays bounded; it serves a real client meanwhile."""
    broker = quick_timeouts.broker
    assert broker.proc is not None
    before = _rss_kib(broker.proc.pid)
    socks = []
    for i in range(1000):
        port = quick_timeouts.ports["SSL" if i % 2 else "SASL_PLAINTEXT"]
        socks.append(_raw(port))
    try:
        conf = quick_timeouts.client("SASL_PLAINTEXT")
        AdminClient(conf).list_topics(timeout=20)
        deadline = time.monotonic() + 15
        for sock in socks:
            assert _closed(sock, max(deadline - time.monotonic(), 0.1)), "a connection stayed open"
        grown_mib = (_rss_kib(broker.proc.pid) - before) / 1024
        assert grown_mib < 100, f"RSS grew {grown_mib:.0f} MiB"
    finally:
        for sock in socks:
            sock.close()
    AdminClient(quick_timeouts.client("SASL_PLAINTEXT")).list_topics(timeout=20)


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from kbroker.cli import main

    return CliRunner().invoke(main, list(args))


def test_the_command_line_takes_kafka_client_settings(secured: Secured, tmp_path: Path) -> None:
    good = tmp_path / "client.properties"
    good.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        f"ssl.truststore.location={secured.ca.cert}\n"
        "ssl.truststore.type=PEM\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";\n'
    )
    bootstrap = f"127.0.0.1:{secured.ports['SASL_SSL']}"
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    done = _cli("topic", "create", topic, "-b", bootstrap, "--command-config", str(good))
    assert done.exit_code == 0, done.output
    done = _cli("topic", "list", "-b", bootstrap, "--command-config", str(good), "--json")
    assert done.exit_code == 0 and topic in done.output, done.output

    bad = tmp_path / "bad.properties"
    bad.write_text(good.read_text().replace('password="alice-secret"', 'password="nope"'))
    done = _cli("topic", "list", "-b", bootstrap, "--command-config", str(bad))
    assert done.exit_code == 1
    assert "Authentication failed" in done.output and "nope" not in done.output
    assert len(done.output.strip().splitlines()) == 1, done.output
    # Without TLS settings against a TLS listener: one line, no traceback.
    done = _cli("topic", "list", "-b", bootstrap, "--timeout", "3")
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output


def _served_certificate_subject(port: int, ca: Path) -> str:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        cert = tls.getpeercert()
    return ",".join(f"{k}={v}" for rdn in cert["subject"] for k, v in rdn)


def test_a_new_keystore_is_taken_without_a_restart(secured: Secured) -> None:
    """AlterConfigs of listener.name.ssl.ssl.keystore.location, as Kafka allows: new
    connections get the new certificate, open ones go on; a keystore that cannot be loaded,
    a password, or a keystore as the cluster-wide default are refused."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    port = secured.ports["SSL"]
    assert "organizationName=kbroker" in _served_certificate_subject(port, secured.ca.cert)
    renewed = secured.ca.issue("renewed", "/O=kbroker-renewed/CN=localhost")
    admin = AdminClient(secured.client("SSL"))
    setting = "listener.name.ssl.ssl.keystore.location"

    def alter(name: str, value: str, broker: str = "0") -> None:
        entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("BROKER", broker, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(30)

    for name, value, broker, error in (
        (setting, "/nonexistent/keystore.pem", "0", "cannot read the keystore"),
        (setting, str(secured.ca.cert), "0", "cannot load the keystore"),
        ("listener.name.ssl.ssl.key.password", "x", "0", "is a password"),
    ):
        with pytest.raises(KafkaException, match=error):
            alter(name, value, broker)
    done = _cli(
        "config", "set", "--broker-default", f"{setting}={renewed.keystore}",
        "-b", secured.broker.bootstrap,
    )  # fmt: skip
    assert done.exit_code == 1 and "cluster default level" in done.output, done.output
    assert "organizationName=kbroker" in _served_certificate_subject(port, secured.ca.cert)

    alter(setting, str(renewed.keystore))
    assert "kbroker-renewed" in _served_certificate_subject(port, secured.ca.cert)
    # The admin client's own connection (made before) still works.
    assert admin.list_topics(timeout=20).brokers


def _frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _handshake_v0(sock: socket.socket) -> None:
    from kbroker.protocol import decode_response
    from kbroker.protocol.messages.sasl import SaslHandshakeRequest

    sock.sendall(
        encode_request(ApiKey.SASL_HANDSHAKE, 0, 7, "v0", SaslHandshakeRequest(mechanism="PLAIN"))
    )
    _, answer = decode_response(ApiKey.SASL_HANDSHAKE, 0, _frame(sock))
    assert answer.error_code == 0 and answer.mechanisms == ["PLAIN"]


def test_sasl_handshake_v0_takes_bare_tokens(secured: Secured) -> None:
    """Old clients send the mechanism's tokens as bare frames after SaslHandshake v0."""
    from kbroker.protocol import decode_response

    with _raw(secured.ports["SASL_PLAINTEXT"]) as sock:
        _handshake_v0(sock)
        token = b"\0alice\0" + PASSWORDS["alice"].encode()
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _frame(sock) == b""  # PLAIN's empty answer: authenticated
        sock.sendall(encode_request(ApiKey.METADATA, 4, 8, "v0", MetadataRequest(topics=None)))
        _, metadata = decode_response(ApiKey.METADATA, 4, _frame(sock))
        assert metadata.brokers[0].port == secured.ports["SASL_PLAINTEXT"]
    with _raw(secured.ports["SASL_PLAINTEXT"]) as sock:
        _handshake_v0(sock)
        token = b"\0alice\0wrong"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _closed(sock)


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory: pytest.TempPathFactory, secured: Secured) -> Iterator[Secured]:
    """A broker whose SASL sessions last 3 s (connections.max.reauth.ms, KIP-368)."""
    root = tmp_path_factory.mktemp("reauth")
    port = free_port()
    broker = BrokerProcess(root / "data", port=port, listeners=f"SASL_PLAINTEXT://127.0.0.1:{port}")
    broker.start(
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        "listener.name.sasl_plaintext.connections.max.reauth.ms=3000",
    )
    try:
        yield Secured(broker, {"SASL_PLAINTEXT": port}, secured.ca, secured.alice_cert,
                      secured.stranger_cert)  # fmt: skip
    finally:
        broker.kill()


def test_clients_authenticate_again_before_their_session_ends(short_sessions: Secured) -> None:
    """librdkafka re-authenticates on its connection (KIP-368) and goes on producing past
    several session lifetimes; a client that does not is closed at its first request after
    its session ended."""
    from kbroker.protocol import decode_response
    from kbroker.protocol.messages.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    errors: list[str] = []
    conf = short_sessions.client("SASL_PLAINTEXT", error_cb=lambda e: errors.append(e.str()))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(conf | {"acks": "all"})
    delivered = []
    end = time.monotonic() + 8
    while time.monotonic() < end:
        producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    assert not errors, errors
    # Renewed on the same connections: the broker closed none for an ended session.
    assert "SASL session expired" not in short_sessions.broker.output()

    with _raw(short_sessions.ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall(
            encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "old", SaslHandshakeRequest("PLAIN"))
        )
        _frame(sock)
        token = b"\0alice\0" + PASSWORDS["alice"].encode()
        sock.sendall(
            encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, "old", SaslAuthenticateRequest(token))
        )
        _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, _frame(sock))
        assert answer.error_code == 0 and 0 < answer.session_lifetime_ms <= 3000
        time.sleep(answer.session_lifetime_ms / 1000 + 0.3)
        sock.sendall(encode_request(ApiKey.METADATA, 4, 3, "old", MetadataRequest(topics=None)))
        assert _closed(sock)
    assert "SASL session expired" in short_sessions.broker.output()
