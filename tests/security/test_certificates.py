"""The names a certificate is for, read from its DER bytes, and the check a listener's new
keystore passes (the same distinguished name, no subject alternative name lost, unless
ssl.allow.dn.changes / ssl.allow.san.changes), as Kafka checks it."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
from bench.certs import CertAuthority
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.config import ConfigError, Value
from kbroker.security.certificates import CertificateNames
from kbroker.security.tls import check_same_names


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    return CertAuthority.make(tmp_path_factory.mktemp("names-ca"))


def names_of(path: Path) -> CertificateNames:
    found = CertificateNames.from_pem(path.read_text())
    assert found is not None
    return found


def python_reading(path: Path) -> tuple[list[str], set[tuple[str, str]]]:
    """What Python's ssl module reads of the same certificate (to check ours against)."""
    decoded = ssl._ssl._test_decode_cert(str(path))  # type: ignore[attr-defined]
    rdns = ["+".join(f"{k}={v}" for k, v in rdn) for rdn in reversed(decoded["subject"])]
    return rdns, set(decoded.get("subjectAltName", ()))


def test_the_subject_and_alternative_names_are_read(ca: CertAuthority) -> None:
    identity = ca.issue(
        "many", "/C=US/O=Ac me/OU=eng+UID=x7/CN=Alice Smith",
        san="IP:127.0.0.1,DNS:localhost,DNS:broker1.example.com,email:a@example.com",
    )  # fmt: skip
    names = names_of(identity.keystore)  # the keystore: the key first, then the certificate
    assert names.distinguished_name == "CN=Alice Smith,OU=eng+UID=x7,O=Ac me,C=US"
    assert len(names.alt_names) == 4
    rdns, alt = python_reading(identity.cert)
    assert len(rdns) == len(names.subject) == 4
    assert len(alt) == 4
    assert names == names_of(identity.cert)


def test_names_compare_as_x500_names(ca: CertAuthority) -> None:
    first = names_of(ca.issue("a1", "/CN=localhost/O=kbroker").cert)
    again = names_of(ca.issue("a2", "/CN=LocalHost/O=kbroker  ").cert)
    other = names_of(ca.issue("a3", "/CN=localhost/O=other").cert)
    reordered = names_of(ca.issue("a4", "/O=kbroker/CN=localhost").cert)
    assert first.same_subject(again)
    assert not first.same_subject(other)
    assert not first.same_subject(reordered)  # another order of RDNs is another name


def lookup(allow_dn: bool = False, allow_san: bool = False) -> Callable[[str], Value]:
    def get(name: str) -> Value:
        return {"ssl.allow.dn.changes": allow_dn, "ssl.allow.san.changes": allow_san}[name]

    return get


def test_a_new_certificate_must_keep_the_names(ca: CertAuthority) -> None:
    old = names_of(
        ca.issue("old", "/CN=localhost/O=kbroker", san="DNS:localhost,IP:127.0.0.1").cert
    )
    more = names_of(
        ca.issue("more", "/CN=localhost/O=kbroker", san="DNS:localhost,IP:127.0.0.1,DNS:b1").cert
    )
    fewer = names_of(ca.issue("fewer", "/CN=localhost/O=kbroker", san="DNS:localhost").cert)
    renamed = names_of(
        ca.issue("renamed", "/CN=localhost/O=other", san="DNS:localhost,IP:127.0.0.1").cert
    )
    check_same_names(old, more, lookup(), "listener SSL")  # more names: taken
    with pytest.raises(ConfigError, match="not the distinguished name") as refused:
        check_same_names(old, renamed, lookup(), "listener SSL")
    assert "O=other" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="lacks subject alternative names"):
        check_same_names(old, fewer, lookup(), "listener SSL")
    check_same_names(old, renamed, lookup(allow_dn=True), "listener SSL")
    check_same_names(old, fewer, lookup(allow_san=True), "listener SSL")
    with pytest.raises(ConfigError, match="cannot read the names of the new"):
        check_same_names(old, None, lookup(), "listener SSL")
    check_same_names(None, None, lookup(True, True), "listener SSL")


def test_what_is_not_a_certificate_gives_no_names(ca: CertAuthority) -> None:
    assert CertificateNames.from_pem("no certificate here") is None
    assert CertificateNames.from_pem(ca.key.read_text()) is None
    der = ssl.PEM_cert_to_DER_cert(ca.cert.read_text())
    for cut in range(len(der)):
        assert CertificateNames.from_der(der[:cut]) is None


@settings(max_examples=300, deadline=None)
@given(noise=st.binary(max_size=600), at=st.integers(min_value=0, max_value=2000))
def test_damaged_der_never_raises(ca: CertAuthority, noise: bytes, at: int) -> None:
    """Bytes written over a real certificate, or noise alone: names or None, never an
    exception, whatever lengths they claim."""
    der = bytearray(ssl.PEM_cert_to_DER_cert(ca.cert.read_text()))
    at = min(at, len(der))
    der[at : at + len(noise)] = noise
    for data in (bytes(der), noise):
        found = CertificateNames.from_der(data)
        assert found is None or isinstance(found, CertificateNames)
