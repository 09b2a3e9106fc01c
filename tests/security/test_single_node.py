"""One broker with a listener of each security protocol, used by real clients and attacked,
on kbroker and on Apache Kafka 3.9.1 (ZooKeeper mode) with the same settings.

PLAINTEXT, SSL (client certificates requested, names mapped by
ssl.principal.mapping.rules), SASL_PLAINTEXT (PLAIN and SCRAM-SHA-512) and
SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and
REAUTH, a SASL_PLAINTEXT listener whose sessions last 3 s
(connections.max.reauth.ms, KIP-368). Real clients (confluent-kafka,
kafka-python, aiokafka, Kafka's own Java client) produce and consume over each;
each listener's clients are told that listener's addresses; what must be
refused is refused while the broker goes on serving the others. Connections
idle for 10 s (connections.max.idle.ms) are closed, and so, on kbroker, are
those not authenticated by then.

Every test runs against both systems (the ``secured`` fixture: one broker of
each for the module, Kafka's first): Kafka's behaviour proves the test. Checks
of a broker's own log lines read each system's (kbroker's request log, Kafka's
kafka.request.logger); those of kbroker's own wording are marked kbroker-only.
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.certs import CertAuthority, Identity
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, encode_request
from kbroker.protocol.messages.core import MetadataRequest
from tests.cluster.kafka_zk import KafkaZkBroker, prepare_kafka_zk_broker, require_kafka
from tests.helpers import KBROKER, BrokerProcess, free_port, wait_for

pytestmark = pytest.mark.timeout(120)

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    + ";"
)
RULES = r"RULE:^CN=([A-Za-z]+),OU=eng,O=kbroker$/$1/L"
KEY_PASSWORD = "key-pw"
# Listener -> its security protocol.
PROTOCOLS = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
    "REAUTH": "SASL_PLAINTEXT",
}
REAUTH_MS = 3000
IDLE_MS = 10_000


@dataclass(frozen=True)
class Certificates:
    ca: CertAuthority
    broker: Identity
    alice: Identity
    stranger: Identity
    # alice's for the Java client (a PEM keystore file's key must be encrypted for Java).
    java_alice: Identity


@dataclass
class Secured:
    system: str  # "kbroker" or "kafka"
    ports: dict[str, int]
    certs: Certificates
    output: Callable[[], str]  # the broker's log so far
    kbroker: BrokerProcess | None = None
    kafka: KafkaZkBroker | None = None

    @property
    def ca(self) -> CertAuthority:
        return self.certs.ca

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The broker's process."""
        proc = self.kbroker.proc if self.kbroker is not None else self.kafka and self.kafka.proc
        assert proc is not None
        return proc

    @property
    def plaintext(self) -> str:
        return f"127.0.0.1:{self.ports['PLAINTEXT']}"

    def client(self, listener: str, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for ``listener`` (SASL as alice unless told otherwise)."""
        protocol = PROTOCOLS[listener]
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
            "security.protocol": protocol,
        }
        if "SSL" in protocol:
            conf["ssl.ca.location"] = str(self.ca.cert)
        if "SASL" in protocol:
            conf |= {"sasl.mechanism": "PLAIN", "sasl.username": "alice"}
            conf["sasl.password"] = PASSWORDS["alice"]
        return conf | extra

    def principals_of(self, client_id: str) -> set[str]:
        """The principals the broker's request log names for ``client_id``'s requests
        (those past authentication: kbroker logs a SASL exchange's requests too, as
        User:ANONYMOUS, Kafka does not log them)."""
        if self.system == "kbroker":
            pattern = re.compile(
                rf"completed request (\w+) .* client_id={re.escape(client_id)} .* "
                r"principal=(\S+)"
            )
        else:
            pattern = re.compile(
                rf'"clientId":"{re.escape(client_id)}","requestApiKeyName":"(\w+)".*'
                r'"principal":"([^"]+)"'
            )
        authenticating = {"ApiVersions", "SaslHandshake", "SaslAuthenticate", "API_VERSIONS"}
        return {
            principal
            for request, principal in pattern.findall(self.output())
            if request not in authenticating
        }


def broker_settings(certs: Certificates, ports: dict[str, int]) -> dict[str, str]:
    """The broker's settings, the same for both systems."""
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in PROTOCOLS.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker.keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca.cert),
        "listener.name.ssl.ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": RULES,
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        # SCRAM users too on this listener (their credentials: the users' configs).
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        **{
            f"listener.name.sasl_ssl.{m}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
            for m in ("scram-sha-256", "scram-sha-512")
        },
        "listener.name.reauth.plain.sasl.jaas.config": JAAS,
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "connections.max.idle.ms": str(IDLE_MS),
        "broker.id": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    ca = CertAuthority.make(tmp_path_factory.mktemp("ca"))
    return Certificates(
        ca,
        ca.issue("broker", "/CN=localhost/O=kbroker", key_password=KEY_PASSWORD),
        ca.issue("alice", "/O=kbroker/OU=eng/CN=Alice"),
        ca.issue("stranger", "/O=elsewhere/OU=sales/CN=mallory"),
        ca.issue("java-alice", "/O=kbroker/OU=eng/CN=Alice", key_password="alice-key-pw"),
    )


@pytest.fixture(scope="module", params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def secured(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    certificates: Certificates,
) -> Iterator[Secured]:
    system = str(request.param)
    root = tmp_path_factory.mktemp(f"secured-{system}")
    ports = {name: free_port() for name in PROTOCOLS}
    settings = broker_settings(certificates, ports)
    if system == "kafka":
        require_kafka()
        zookeeper = request.getfixturevalue("zookeeper")
        kafka = prepare_kafka_zk_broker(
            zookeeper.connect,
            f"/secured-{uuid.uuid4().hex[:8]}",
            root,
            settings=settings,
            port=ports["PLAINTEXT"],
            loggers={"kafka.request.logger": "DEBUG"},
        )
        kafka.launch()
        try:
            kafka.wait_started()
            yield Secured(system, ports, certificates, kafka.log.read_text, kafka=kafka)
        finally:
            kafka.kill()
        output = kafka.log.read_text()
    else:
        broker = BrokerProcess(
            root / "data", port=ports["PLAINTEXT"], listeners=settings.pop("listeners")
        )
        # The request log names each request's principal.
        broker.args = ["--log-level", "DEBUG"]
        broker.start(*(f"{k}={v}" for k, v in settings.items()))
        try:
            yield Secured(system, ports, certificates, broker.output, kbroker=broker)
        finally:
            broker.kill()
        output = broker.output()
    assert "alice-secret" not in output and KEY_PASSWORD not in output


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
            "ssl.certificate.location": str(secured.certs.alice.cert),
            "ssl.key.location": str(secured.certs.alice.key),
            "client.id": "mtls-alice",
        },
    )
    AdminClient(conf).list_topics(timeout=20)
    principals = wait_for(
        lambda: secured.principals_of("mtls-alice"), "the request log naming a principal", 10
    )
    assert principals == {"User:alice"}


def test_a_certificate_no_rule_maps_is_refused(secured: Secured) -> None:
    conf = secured.client(
        "SSL",
        **{
            "ssl.certificate.location": str(secured.certs.stranger.cert),
            "ssl.key.location": str(secured.certs.stranger.key),
        },
    )
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=5)
    if secured.system == "kbroker":  # kbroker's own wording
        assert "no ssl.principal.mapping.rules rule matches" in secured.output()
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
    if secured.system == "kbroker":  # kbroker's own wording
        assert "before authentication" in secured.output()
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
    # The first two records, without waiting out the timeout for more.
    read = [m.value for _, m in zip(range(2), consumer, strict=False)]
    assert read == [b"from-kafka-python", b"from-aiokafka"]
    consumer.close()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_connections_that_never_authenticate_are_closed(secured: Secured) -> None:
    """1,000 connections that say nothing (TLS handshakes never made, SASL exchanges never
    started) are all closed once idle for connections.max.idle.ms (kbroker: within its
    authentication timeout, no longer than that), and the broker's memory stays bounded;
    it serves a real client meanwhile. (Kafka closes one idle connection per network
    thread per poll, about ten a second per listener: it is given 100.)"""
    proc = secured.proc
    before = _rss_kib(proc.pid)
    socks = []
    for i in range(1000 if secured.system == "kbroker" else 100):
        port = secured.ports["SSL" if i % 2 else "SASL_PLAINTEXT"]
        socks.append(_raw(port))
    try:
        opened = time.monotonic()
        conf = secured.client("SASL_PLAINTEXT")
        AdminClient(conf).list_topics(timeout=20)
        deadline = opened + IDLE_MS / 1000 + 10
        for sock in socks:
            assert _closed(sock, max(deadline - time.monotonic(), 0.1)), "a connection stayed open"
        grown_mib = (_rss_kib(proc.pid) - before) / 1024
        print(f"\n[{secured.system}] closed after {time.monotonic() - opened:.1f}s, "
              f"RSS grew {grown_mib:.0f} MiB")  # fmt: skip
        if secured.system == "kbroker":  # a JVM's heap grows as it likes
            assert grown_mib < 100, f"RSS grew {grown_mib:.0f} MiB"
    finally:
        for sock in socks:
            sock.close()
    AdminClient(secured.client("SASL_PLAINTEXT")).list_topics(timeout=20)


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


def _served_certificate(port: int, ca: Path) -> tuple[str, bytes]:
    """The subject and the DER bytes of the certificate a TLS listener presents now."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        cert = tls.getpeercert()
        der = tls.getpeercert(binary_form=True)
    assert cert is not None and der is not None
    return ",".join(f"{k}={v}" for rdn in cert["subject"] for k, v in rdn), der


# What each system answers to a keystore change it refuses: (error code, words of its
# message). Kafka 3.9.1 has no password.encoder.secret here, so it keeps no password.
KEYSTORE_REFUSALS = {
    "unreadable": (
        KafkaError.INVALID_REQUEST,
        {"kbroker": "cannot read the keystore", "kafka": "Failed to load PEM SSL keystore"},
    ),
    "no key": (
        KafkaError.INVALID_REQUEST,
        {"kbroker": "cannot load the keystore", "kafka": "Failed to load PEM SSL keystore"},
    ),
    "another name": (
        KafkaError.INVALID_REQUEST,
        {
            "kbroker": "not the distinguished name",
            "kafka": "Keystore DistinguishedName does not match",
        },
    ),
    "with a password": (
        KafkaError.INVALID_CONFIG,
        {"kbroker": "is a password", "kafka": "Password encoder secret not configured"},
    ),
}


def test_a_new_keystore_is_taken_without_a_restart(secured: Secured) -> None:
    """IncrementalAlterConfigs of listener.name.ssl.ssl.keystore.location for this broker:
    a new key and certificate for the same names are taken, new connections get them and
    open ones go on; a keystore that cannot be loaded, a certificate for another
    distinguished name (ssl.allow.dn.changes is false), a password, or a keystore as the
    cluster-wide default are refused."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    port = secured.ports["SSL"]
    served, _ = _served_certificate(port, secured.ca.cert)
    assert served == "commonName=localhost,organizationName=kbroker"
    ca = secured.ca
    renewed = ca.issue("renewed", "/CN=localhost/O=kbroker", key_password=KEY_PASSWORD)
    renamed = ca.issue("renamed", "/CN=localhost/O=other", key_password=KEY_PASSWORD)
    admin = AdminClient(secured.client("SSL"))
    setting = "listener.name.ssl.ssl.keystore.location"

    def alter(*entries: tuple[str, str]) -> None:
        resource = ConfigResource(
            "BROKER",
            "1",
            incremental_configs=[
                ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in entries
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(30)

    for case, entries in (
        ("unreadable", [(setting, "/nonexistent/keystore.pem")]),
        ("no key", [(setting, str(ca.cert))]),
        ("another name", [(setting, str(renamed.keystore))]),
        (
            "with a password",
            [
                (setting, str(renewed.keystore)),
                ("listener.name.ssl.ssl.key.password", KEY_PASSWORD),
            ],
        ),
    ):
        code, words = KEYSTORE_REFUSALS[case]
        with pytest.raises(KafkaException, match=words[secured.system]) as refused:
            alter(*entries)
        assert refused.value.args[0].code() == code, (case, refused.value)
    done = _cli(
        "config", "set", "--broker-default", f"{setting}={renewed.keystore}",
        "-b", secured.plaintext,
    )  # fmt: skip
    assert done.exit_code == 1 and "INVALID_REQUEST" in done.output, done.output
    assert "cluster default level" in done.output or "default cluster level" in done.output
    assert _served_certificate(port, secured.ca.cert)[1] == certificate_der(secured.certs.broker)

    alter((setting, str(renewed.keystore)))
    # (Kafka applies it once ZooKeeper tells it of the change it wrote.)
    wait_for(
        lambda: _served_certificate(port, secured.ca.cert)[1] == certificate_der(renewed),
        "the new certificate",
        timeout=15,
    )
    # The admin client's own connection (made before) still works.
    assert admin.list_topics(timeout=20).brokers


def certificate_der(identity: Identity) -> bytes:
    """The DER bytes of an identity's certificate."""
    return ssl.PEM_cert_to_DER_cert(identity.cert.read_text())


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
    assert answer.error_code == 0 and answer.mechanisms == ["PLAIN", "SCRAM-SHA-512"]


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


def test_clients_authenticate_again_before_their_session_ends(secured: Secured) -> None:
    """On the REAUTH listener (sessions of 3 s) librdkafka re-authenticates on its
    connection (KIP-368) and goes on producing past several session lifetimes; a client that
    does not is closed at its first request after its session ended."""
    from kbroker.protocol import decode_response
    from kbroker.protocol.messages.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    errors: list[str] = []
    conf = secured.client("REAUTH", error_cb=lambda e: errors.append(e.str()))
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
    if secured.system == "kbroker":  # kbroker's own wording
        # Renewed on the same connections: the broker closed none for an ended session.
        assert "SASL session expired" not in secured.output()

    with _raw(secured.ports["REAUTH"]) as sock:
        sock.sendall(
            encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "old", SaslHandshakeRequest("PLAIN"))
        )
        _frame(sock)
        token = b"\0alice\0" + PASSWORDS["alice"].encode()
        sock.sendall(
            encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, "old", SaslAuthenticateRequest(token))
        )
        _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, _frame(sock))
        assert answer.error_code == 0 and 0 < answer.session_lifetime_ms <= REAUTH_MS
        time.sleep(answer.session_lifetime_ms / 1000 + 0.3)
        sock.sendall(encode_request(ApiKey.METADATA, 4, 3, "old", MetadataRequest(topics=None)))
        assert _closed(sock)
    if secured.system == "kbroker":  # kbroker's own wording
        assert "SASL session expired" in secured.output()


def _java_tool(main: str, *args: str, timeout: float = 90) -> str:
    java, lib = require_kafka()
    done = subprocess.run(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*", main, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def _properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def test_the_java_client_over_sasl_ssl_and_mutual_tls(secured: Secured, tmp_path: Path) -> None:
    """Kafka 3.9.1's Java client (what Spark uses), configured as its users configure it,
    with properties files: ProducerPerformance writes over SASL_SSL with PLAIN,
    ConsumerPerformance reads everything back over SSL with alice's client certificate (a
    PEM keystore); the broker names alice as the principal of both."""
    count = 2000
    topic = f"java-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secured.client("PLAINTEXT"))
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    truststore = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(secured.ca.cert)}
    sasl = _properties(
        tmp_path / "sasl.properties",
        {
            "security.protocol": "SASL_SSL",
            **truststore,
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="alice" password="alice-secret";',
            "client.id": "java-sasl-ssl",
            "acks": "all",
        },
    )
    mutual = _properties(
        tmp_path / "mtls.properties",
        {
            "security.protocol": "SSL",
            **truststore,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(secured.certs.java_alice.keystore),
            "ssl.key.password": "alice-key-pw",
            "client.id": "java-mtls",
        },
    )
    produced = _java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(count), "--record-size", "100",
        "--throughput", "-1", "--producer.config", str(sasl),
        "--producer-props", f"bootstrap.servers=127.0.0.1:{secured.ports['SASL_SSL']}",
    )  # fmt: skip
    assert f"{count} records sent" in produced, produced
    consumed = _java_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", f"127.0.0.1:{secured.ports['SSL']}", "--topic", topic,
        "--messages", str(count), "--consumer.config", str(mutual), "--timeout", "30000",
        "--hide-header",
    )  # fmt: skip
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
    fields = [f.strip() for f in consumed.strip().splitlines()[-1].split(",")]
    assert int(fields[4]) == count, consumed
    for client_id in ("java-sasl-ssl", "java-mtls"):
        principals = wait_for(lambda c=client_id: secured.principals_of(c), client_id, 10)
        assert principals == {"User:alice"}, client_id


def test_scram_users_authenticate_with_both_librdkafkas(secured: Secured) -> None:
    """A SCRAM-SHA-512 user made through the admin API (kbroker's CLI, against either
    system) authenticates with confluent-kafka's librdkafka and with Debian's kcat, whose
    librdkafka 2.0 repeats its own nonce in front of the exchange's in its final message
    (Kafka 3.9.1 takes that); a wrong password is refused."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("needs kcat (deploy/setup.sh test installs it)")
    user = f"scram-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(
        [*KBROKER, "user", "create", user, "--mechanism", "scram-sha-512",
         "--password-file", "-", "-b", secured.plaintext],
        input="scram-secret\n", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    scram = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user}

    def lets_in(password: str) -> bool:
        conf = secured.client("SASL_PLAINTEXT", **scram, **{"sasl.password": password})
        try:
            AdminClient(conf).list_topics(timeout=3)
        except KafkaException:
            return False
        return True

    # (Kafka learns of the credential through ZooKeeper, a moment after it answered.)
    wait_for(lambda: lets_in("scram-secret"), "the SCRAM user to be let in", timeout=15)
    assert not lets_in("wrong")
    listed = subprocess.run(
        [kcat, "-b", f"127.0.0.1:{secured.ports['SASL_PLAINTEXT']}", "-L", "-m", "10",
         "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512",
         "-X", f"sasl.username={user}", "-X", "sasl.password=scram-secret"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0 and "1 brokers" in listed.stdout, listed.stderr[-2000:]


def _scram_user(secured: Secured, mechanism: str, password: str) -> str:
    """A new user with a ``mechanism`` credential, made with kbroker's CLI (the admin API,
    against either system), once a SASL_SSL client is let in with it."""
    user = f"scram-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(
        [*KBROKER, "user", "create", user, "--mechanism", mechanism.lower(),
         "--password-file", "-", "-b", secured.plaintext],
        input=password + "\n", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    def lets_in() -> bool:
        conf = secured.client(
            "SASL_SSL",
            **{"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password},
        )
        try:
            AdminClient(conf).list_topics(timeout=3)
        except KafkaException:
            return False
        return True

    # (Kafka learns of the credential through ZooKeeper, a moment after it answered.)
    wait_for(lets_in, f"the {mechanism} user to be let in", timeout=15)
    return user


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_every_client_authenticates_with_scram_over_sasl_ssl(
    secured: Secured, mechanism: str, tmp_path: Path
) -> None:
    """confluent-kafka, kafka-python, aiokafka and the Java client each write over SASL_SSL
    as a SCRAM user; everything they wrote is read back with SCRAM."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaProducer

    password = "scram-pw-" + uuid.uuid4().hex[:6]
    user = _scram_user(secured, mechanism, password)
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secured.client("PLAINTEXT"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    librdkafka = secured.client(
        "SASL_SSL",
        **{"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password},
    )
    producer = Producer(librdkafka)
    producer.produce(topic, b"confluent-kafka")
    assert producer.flush(30) == 0

    python_clients = {
        "bootstrap_servers": f"127.0.0.1:{secured.ports['SASL_SSL']}",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }
    kafka_python = KafkaProducer(ssl_cafile=str(secured.ca.cert), **python_clients)
    kafka_python.send(topic, b"kafka-python").get(timeout=30)
    kafka_python.close()

    async def aiokafka() -> None:
        context = create_ssl_context(cafile=str(secured.ca.cert))
        aproducer = AIOKafkaProducer(ssl_context=context, **python_clients)
        await aproducer.start()
        try:
            await aproducer.send_and_wait(topic, b"aiokafka")
        finally:
            await aproducer.stop()

    asyncio.run(asyncio.wait_for(aiokafka(), 60))

    java = _properties(
        tmp_path / "scram.properties",
        {
            "security.protocol": "SASL_SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secured.ca.cert),
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{user}" password="{password}";',
        },
    )
    produced = _java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", "100", "--record-size", "10",
        "--throughput", "-1", "--producer.config", str(java),
        "--producer-props", f"bootstrap.servers=127.0.0.1:{secured.ports['SASL_SSL']}",
    )  # fmt: skip
    assert "100 records sent" in produced, produced

    consumer = Consumer(librdkafka | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 103 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got[:3] == [b"confluent-kafka", b"kafka-python", b"aiokafka"] and len(got) == 103


def _scram_exchange(
    secured: Secured, first: bytes, final_of: Callable[[bytes], bytes]
) -> tuple[socket.socket, Any]:
    """A SCRAM-SHA-256 exchange over SaslHandshake v1 and SaslAuthenticate v2 on the
    SASL_SSL listener: ``first``, then the client-final message ``final_of(server_first)``;
    the socket and the broker's answer to that final message."""
    from kbroker.protocol import decode_response
    from kbroker.protocol.messages.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    context = ssl.create_default_context(cafile=str(secured.ca.cert))
    raw = socket.create_connection(("127.0.0.1", secured.ports["SASL_SSL"]), timeout=10)
    sock = context.wrap_socket(raw, server_hostname="localhost")
    sock.sendall(
        encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "scram", SaslHandshakeRequest("SCRAM-SHA-256"))
    )
    _frame(sock)

    def authenticate(correlation: int, token: bytes) -> Any:
        sock.sendall(
            encode_request(
                ApiKey.SASL_AUTHENTICATE, 2, correlation, "scram", SaslAuthenticateRequest(token)
            )
        )
        return decode_response(ApiKey.SASL_AUTHENTICATE, 2, _frame(sock))[1]

    server_first = authenticate(2, first)
    assert server_first.error_code == 0
    return sock, authenticate(3, final_of(bytes(server_first.auth_bytes)))


def test_a_replayed_or_forged_scram_message_is_refused(secured: Secured) -> None:
    """On the wire, against the broker: a client-final message recorded from a good exchange
    fails in the next one (the broker's half of the nonce differs), and so does a final
    message whose proof was tampered with; each is answered SASL_AUTHENTICATION_FAILED and
    the connection closed, and the broker goes on serving."""
    import base64

    from kbroker.security.scram import SCRAM_SHA_256, ScramClient

    user = _scram_user(secured, "SCRAM-SHA-256", "right-pw")
    honest = ScramClient(SCRAM_SHA_256, user, "right-pw")
    recorded: list[bytes] = []

    def record(server_first: bytes) -> bytes:
        recorded.append(honest.final(server_first))
        return recorded[0]

    sock, answer = _scram_exchange(secured, honest.first(), record)
    assert answer.error_code == 0, answer.error_message
    sock.close()

    replaying = ScramClient(SCRAM_SHA_256, user, "right-pw")
    sock, answer = _scram_exchange(secured, replaying.first(), lambda _server_first: recorded[0])
    assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert _closed(sock)

    forging = ScramClient(SCRAM_SHA_256, user, "right-pw")

    def forge(server_first: bytes) -> bytes:
        head, _, proof = forging.final(server_first).rpartition(b",p=")
        flipped = bytearray(base64.b64decode(proof))
        flipped[-1] ^= 0x01
        return head + b",p=" + base64.b64encode(bytes(flipped))

    sock, answer = _scram_exchange(secured, forging.first(), forge)
    assert answer.error_code == 58
    assert _closed(sock)
    AdminClient(secured.client("SASL_SSL")).list_topics(timeout=20)
