"""Security settings a broker cannot work with stop `kbroker serve` at once: exit code 1 and
one line saying what is wrong, with no secret in it and no prompt for one.

Each case is a real `kbroker serve` process. The cluster cases name a ZooKeeper
nobody listens on: the settings are refused before any connection to it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from bench.certs import CertAuthority, Identity

from tests.helpers import KBROKER, free_port, single_error_line
from tests.security.sasl_ssl import plain_jaas

pytestmark = pytest.mark.timeout(120)

KEY_PASSWORD = "right-key-password"
SECRET = "broker-secret-password"


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> Identity:
    ca = CertAuthority.make(tmp_path_factory.mktemp("bad-settings-ca"))
    return ca.issue("broker", "/CN=localhost", key_password=KEY_PASSWORD)


def serve(tmp_path: Path, *settings: str, cluster: bool = False) -> str:
    """Runs `kbroker serve` with ``settings`` until it exits (it must, with 1): its
    one line of error."""
    args = [*KBROKER, "serve", "--data-dir", str(tmp_path / "data")]
    for s in settings:
        args += ["--set", s]
    if cluster:
        args += ["--broker-id", "1", "--zookeeper", f"127.0.0.1:{free_port()}"]
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    return single_error_line(output)


def tls(identity: Identity, password: str | None = KEY_PASSWORD) -> list[str]:
    out = ["ssl.keystore.type=PEM", f"ssl.keystore.location={identity.keystore}"]
    return out + ([] if password is None else [f"ssl.key.password={password}"])


def sasl_plaintext(jaas: str | None, mechanisms: str = "PLAIN") -> list[str]:
    out = ["listeners=SASL_PLAINTEXT://127.0.0.1:0", f"sasl.enabled.mechanisms={mechanisms}"]
    if jaas is not None:
        out.append(f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}")
    return out


INTER_BROKER = [
    "security.inter.broker.protocol=SASL_PLAINTEXT",
    "sasl.mechanism.inter.broker.protocol=PLAIN",
]

# (case, settings given the keystore, cluster mode, words of the one line)
CASES: list[tuple[str, Callable[[Identity], list[str]], bool, str]] = [
    (
        "unreadable keystore",
        lambda ks: [
            "listeners=SSL://127.0.0.1:0",
            "ssl.keystore.type=PEM",
            "ssl.keystore.location=/nonexistent/keystore.pem",
        ],
        False,
        "listener SSL: cannot read the keystore /nonexistent/keystore.pem",
    ),
    (
        "wrong key password",
        lambda ks: ["listeners=SSL://127.0.0.1:0", *tls(ks, SECRET)],
        False,
        "its key cannot be decrypted with ssl.key.password",
    ),
    (
        "no key password",
        lambda ks: ["listeners=SSL://127.0.0.1:0", *tls(ks, None)],
        False,
        "its key is encrypted: set ssl.key.password",
    ),
    (
        "a certificate alone",
        lambda ks: [
            "listeners=SSL://127.0.0.1:0",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={ks.cert}",
        ],
        False,
        "it holds no private key",
    ),
    (
        "unreadable truststore",
        lambda ks: [
            "listeners=SSL://127.0.0.1:0",
            *tls(ks),
            "ssl.client.auth=required",
            "ssl.truststore.type=PEM",
            "ssl.truststore.location=/nonexistent/ca.pem",
        ],
        False,
        "listener SSL: cannot read the truststore /nonexistent/ca.pem",
    ),
    (
        "GSSAPI",
        lambda ks: sasl_plaintext(None, "PLAIN,GSSAPI"),
        False,
        "sasl.enabled.mechanisms: GSSAPI: kbroker supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
    ),
    (
        "PLAIN without JAAS",
        lambda ks: sasl_plaintext(None),
        False,
        "listener SASL_PLAINTEXT enables PLAIN but "
        "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set",
    ),
    (
        "listener not in the protocol map",
        lambda ks: ["listeners=CLIENT://127.0.0.1:0"],
        False,
        "listener CLIENT has no security protocol: add CLIENT:<PROTOCOL> to "
        "listener.security.protocol.map",
    ),
    (
        "inter-broker listener without the broker's credentials",
        lambda ks: [*sasl_plaintext(plain_jaas({"broker": SECRET})), *INTER_BROKER],
        True,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config must give the broker's own "
        "username and password",
    ),
    (
        "inter-broker mechanism not enabled",
        lambda ks: [
            *sasl_plaintext(plain_jaas({"broker": SECRET}, ("broker", SECRET)), "SCRAM-SHA-256"),
            *INTER_BROKER,
        ],
        True,
        "sasl.mechanism.inter.broker.protocol: PLAIN is not one of the sasl.enabled.mechanisms "
        "of the inter-broker listener SASL_PLAINTEXT (SCRAM-SHA-256)",
    ),
    (
        "inter-broker mechanism left at GSSAPI",
        lambda ks: [
            *sasl_plaintext(plain_jaas({"broker": SECRET}, ("broker", SECRET))),
            "security.inter.broker.protocol=SASL_PLAINTEXT",
        ],
        True,
        "sasl.mechanism.inter.broker.protocol: GSSAPI is not supported",
    ),
    (
        "inter-broker listener not among the listeners",
        lambda ks: [
            "listeners=CLIENT://127.0.0.1:0",
            "listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name=INTERNAL",
        ],
        True,
        "inter.broker.listener.name: INTERNAL is not one of the listeners (CLIENT)",
    ),
]


@pytest.mark.parametrize(
    ("settings", "cluster", "words"),
    [pytest.param(settings, cluster, words, id=case) for case, settings, cluster, words in CASES],
)
def test_refused_at_start_in_one_line(
    tmp_path: Path,
    keystore: Identity,
    settings: Callable[[Identity], list[str]],
    cluster: bool,
    words: str,
) -> None:
    line = serve(tmp_path, *settings(keystore), cluster=cluster)
    assert words in line, line
    assert SECRET not in line and KEY_PASSWORD not in line
