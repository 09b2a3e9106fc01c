"""TLS contexts from Kafka's ``ssl.*`` settings, for listeners and for the broker's own connections.

Keystores and truststores are PEM (``ssl.keystore.type=PEM``): a keystore
file holds the private key (PKCS#8, encrypted when ``ssl.key.password`` is
set) and its certificate chain, or the two are given inline
(``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``); a truststore
file or ``ssl.truststore.certificates`` holds the trusted authorities (the
system's when neither is given). Every setting is read for the listener
first (``listener.name.<listener>.ssl.*``), then for the broker.

A listener's context is made once and kept: `load_keystore` loads a new key
and certificate into it (`check_same_names` first checks that the new
certificate is for the names of the one presented), so connections that start
afterwards present the new certificate and those already open go on
(AlterConfigs of ``listener.name.<l>.ssl.keystore.*``, as Kafka allows).

Cipher suites may be named as OpenSSL or as IANA (Java) names; TLS 1.3
suites are OpenSSL's defaults whatever is listed.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator

from kbroker.config import ConfigError, Value
from kbroker.security.certificates import CertificateNames

# Reads a setting for a listener: its own value when given, else the broker's.
Lookup = Callable[[str], Value]

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _text(lookup: Lookup, name: str) -> str | None:
    value = lookup(name)
    return None if value is None or value == "" else str(value)


def _check_type(lookup: Lookup, name: str) -> None:
    kind = _text(lookup, name)
    if kind is not None and kind != "PEM":
        raise ConfigError(
            f"{name}: {kind} is not supported yet: convert it to PEM and set {name}=PEM"
        )


@contextlib.contextmanager
def _private_files(*contents: str) -> Iterator[list[str]]:
    """Inline PEM text in files only this process can read, removed at once after use."""
    with tempfile.TemporaryDirectory(prefix="kbroker-tls-") as folder:
        os.chmod(folder, 0o700)
        paths = []
        for i, text in enumerate(contents):
            path = os.path.join(folder, f"{i}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            paths.append(path)
        yield paths


def load_keystore(context: ssl.SSLContext, lookup: Lookup, what: str) -> CertificateNames | None:
    """Loads the key and certificate chain the settings name into ``context``; the names
    its certificate is for (None when they cannot be read)."""
    _check_type(lookup, "ssl.keystore.type")
    location = _text(lookup, "ssl.keystore.location")
    chain = _text(lookup, "ssl.keystore.certificate.chain")
    key = _text(lookup, "ssl.keystore.key")
    password = _text(lookup, "ssl.key.password")
    # Always a password: without one OpenSSL would ask for it on the terminal.
    given = password if password is not None else _no_password
    text = ""
    try:
        if location is not None:
            if chain is not None or key is not None:
                raise ConfigError(
                    f"{what}: give ssl.keystore.location or ssl.keystore.certificate.chain and "
                    "ssl.keystore.key, not both"
                )
            with open(location, encoding="ascii", errors="replace") as f:
                text = f.read(_MAX_KEYSTORE_CHARS)
            context.load_cert_chain(location, password=given)
            return CertificateNames.from_pem(text)
        elif chain is not None and key is not None:
            text = chain + key
            with _private_files(chain, key) as (chain_path, key_path):
                context.load_cert_chain(chain_path, key_path, password=given)
            return CertificateNames.from_pem(chain)
        elif chain is not None or key is not None:
            raise ConfigError(
                f"{what}: ssl.keystore.certificate.chain and ssl.keystore.key go together"
            )
        else:
            raise ConfigError(
                f"{what}: no keystore: set ssl.keystore.location (a PEM file with the key and "
                "its certificate chain) and ssl.keystore.type=PEM"
            )
    except ssl.SSLError as exc:
        reason = _reason(exc)
        if "pem lib" in reason:  # all OpenSSL says of a PEM file it cannot use
            reason = _keystore_problem(text, password is not None)
        raise ConfigError(f"{what}: cannot load the keystore: {reason}") from None
    except OSError as exc:
        raise ConfigError(
            f"{what}: cannot read the keystore {location}: {exc.strerror or exc}"
        ) from None


# More than any keystore holds (a key and a long certificate chain).
_MAX_KEYSTORE_CHARS = 1 << 20


def _no_password() -> bytes:
    return b""


def _keystore_problem(text: str, with_password: bool) -> str:
    """Why OpenSSL could not use a PEM keystore, said from what it holds."""
    if "PRIVATE KEY-----" not in text:
        return "it holds no private key (a PEM keystore holds the key and its certificate chain)"
    if "-----BEGIN CERTIFICATE-----" not in text:
        return "it holds no certificate (a PEM keystore holds the key and its certificate chain)"
    if "-----BEGIN ENCRYPTED PRIVATE KEY-----" in text:
        if with_password:
            return "its key cannot be decrypted with ssl.key.password"
        return "its key is encrypted: set ssl.key.password"
    return "its key or certificate cannot be read"


def _load_truststore(context: ssl.SSLContext, lookup: Lookup, what: str) -> None:
    _check_type(lookup, "ssl.truststore.type")
    location = _text(lookup, "ssl.truststore.location")
    inline = _text(lookup, "ssl.truststore.certificates")
    try:
        if location is not None and inline is not None:
            raise ConfigError(
                f"{what}: give ssl.truststore.location or ssl.truststore.certificates, not both"
            )
        if location is not None:
            context.load_verify_locations(cafile=location)
        elif inline is not None:
            context.load_verify_locations(cadata=inline)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except ssl.SSLError as exc:
        raise ConfigError(f"{what}: cannot load the truststore: {_reason(exc)}") from None
    except OSError as exc:
        raise ConfigError(
            f"{what}: cannot read the truststore {location}: {exc.strerror or exc}"
        ) from None


def _reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc.strerror or exc).lower().replace("_", " ")


def openssl_cipher_name(name: str) -> str:
    """An IANA cipher suite name (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) as OpenSSL's
    (ECDHE-RSA-AES128-GCM-SHA256); other names are returned as they are."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    parts = rest.split("_")
    if parts[:1] == ["AES"] and len(parts) >= 3:
        cipher = f"AES{parts[1]}"
        mode, mac = parts[2], parts[3] if len(parts) > 3 else ""
        body = f"{cipher}-{mode}-{mac}" if mode in ("GCM", "CCM") else f"{cipher}-{mac}"
        if mode == "CBC" and mac == "SHA":
            body = cipher + "-SHA"
    elif parts[:2] == ["CHACHA20", "POLY1305"]:
        body = "CHACHA20-POLY1305"
    else:
        return name
    prefix = {"ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-", "DHE_RSA": "DHE-RSA-"}
    if kx == "RSA":
        return body
    if kx not in prefix:
        return name
    return prefix[kx] + body


def _apply_protocols_and_ciphers(context: ssl.SSLContext, lookup: Lookup, what: str) -> None:
    enabled = lookup("ssl.enabled.protocols")
    names = [str(p) for p in enabled] if isinstance(enabled, list) else []
    versions = sorted(_PROTOCOLS[p] for p in names if p in _PROTOCOLS)
    if not versions:
        raise ConfigError(f"{what}: ssl.enabled.protocols names no TLS version kbroker offers")
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    suites = lookup("ssl.cipher.suites")
    wanted = [str(s) for s in suites] if isinstance(suites, list) else []
    tls12 = [openssl_cipher_name(s) for s in wanted if not _is_tls13_suite(s)]
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(
                f"{what}: ssl.cipher.suites names no cipher suite OpenSSL knows "
                f"({', '.join(wanted)})"
            ) from None
        known = {c["name"] for c in context.get_ciphers()}
        unknown = [w for w, o in zip(wanted, tls12, strict=False) if o not in known]
        if unknown:
            raise ConfigError(f"{what}: ssl.cipher.suites: unknown suites {', '.join(unknown)}")


def _is_tls13_suite(name: str) -> bool:
    return name in (
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    )


def server_context(lookup: Lookup, what: str) -> tuple[ssl.SSLContext, CertificateNames | None]:
    """The context of a TLS listener (``what`` names it in errors), and the names its
    certificate is for."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols_and_ciphers(context, lookup, what)
    names = load_keystore(context, lookup, what)
    auth = _text(lookup, "ssl.client.auth") or "none"
    if auth != "none":
        _load_truststore(context, lookup, what)
        context.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return context, names


def check_same_names(
    old: CertificateNames | None, new: CertificateNames | None, lookup: Lookup, what: str
) -> None:
    """Raises ConfigError when a listener's new certificate (``new``) is not for the names
    of the one it presents (``old``), as far as ``ssl.allow.dn.changes`` and
    ``ssl.allow.san.changes`` do not allow it."""
    allow_dn, allow_san = lookup("ssl.allow.dn.changes"), lookup("ssl.allow.san.changes")
    if allow_dn and allow_san:
        return
    if old is None or new is None:
        raise ConfigError(
            f"{what}: cannot read the names of the {'old' if old is None else 'new'} "
            "certificate to compare them (ssl.allow.dn.changes and ssl.allow.san.changes "
            "allow any certificate)"
        )
    if not allow_dn and not new.same_subject(old):
        raise ConfigError(
            f"{what}: the new certificate is for {new.distinguished_name}, not the "
            f"distinguished name of the one in use ({old.distinguished_name}); "
            "ssl.allow.dn.changes=true allows it"
        )
    if not allow_san and not old.alt_names <= new.alt_names:
        raise ConfigError(
            f"{what}: the new certificate lacks subject alternative names of the one in use; "
            "ssl.allow.san.changes=true allows it"
        )


def client_context(lookup: Lookup, what: str, with_keystore: bool | None = None) -> ssl.SSLContext:
    """The context of an outgoing TLS connection: the truststore checks the broker's
    certificate (and its host name unless ``ssl.endpoint.identification.algorithm`` is
    empty); the keystore, when one is given, is the client's certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols_and_ciphers(context, lookup, what)
    _load_truststore(context, lookup, what)
    context.check_hostname = _text(lookup, "ssl.endpoint.identification.algorithm") == "https"
    if with_keystore is None:
        with_keystore = any(
            _text(lookup, n) for n in ("ssl.keystore.location", "ssl.keystore.certificate.chain")
        )
    if with_keystore:
        load_keystore(context, lookup, what)
    return context
