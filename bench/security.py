"""The benchmark's listeners of each security protocol, the same for every system.

A run that measures the cost of security makes its own certificate authority
and broker certificate with openssl at its start (in a private temporary
folder, never in git), and every broker it starts opens three listeners on
loopback: PLAINTEXT, SSL and SASL_SSL (SASL PLAIN, one user whose password is
random per run). Both systems get the same Kafka settings for them:
``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` naming one file with
the PKCS#8 key and its certificate, ``sasl.enabled.mechanisms=PLAIN`` and
``listener.name.sasl_ssl.plain.sasl.jaas.config``; TLS versions and cipher
suites are left at each system's defaults (what a client negotiated is
recorded with each row, see `negotiated`).

Clients (librdkafka producers, kcat, the admin client) get the matching
librdkafka settings from `client_settings` (bench/loadgen.py gives them to
kcat in a private file, so the password is not on a command line).
"""

from __future__ import annotations

import os
import secrets
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from bench.certs import CertAuthority

# The listeners every secured broker opens, in this order.
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER = "bench"


@dataclass(frozen=True)
class Security:
    """The certificates and the SASL user of one run."""

    folder: Path
    ca_cert: Path
    keystore: Path  # the broker's PKCS#8 key and certificate (ssl.keystore.type=PEM)
    password: str

    @classmethod
    def make(cls, folder: Path) -> Security:
        """A CA and a broker certificate for 127.0.0.1 and localhost, made with openssl."""
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        ca = CertAuthority.make(folder, "kbroker-bench-ca")
        broker = ca.issue("broker", "/CN=localhost/O=kbroker-bench")
        return cls(folder, ca.cert, broker.keystore, secrets.token_urlsafe(18))

    def broker_settings(self) -> dict[str, str]:
        """The TLS and SASL settings of a broker, in Kafka's names (the listeners themselves
        are the launcher's)."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{USER}="{self.password}";'
            ),
        }

    def client_settings(self, protocol: str) -> dict[str, str]:
        """librdkafka settings for a client of the ``protocol`` listener."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown security protocol {protocol!r}")
        conf = {"security.protocol": protocol}
        if "SSL" in protocol:
            conf["ssl.ca.location"] = str(self.ca_cert)
        if "SASL" in protocol:
            conf |= {"sasl.mechanism": "PLAIN", "sasl.username": USER}
            conf["sasl.password"] = self.password
        return conf

    def negotiated(self, address: str) -> str:
        """The TLS version and cipher suite an OpenSSL client with default settings (as
        librdkafka's) agrees with the listener at ``address``."""
        host, _, port = address.rpartition(":")
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        with (
            socket.create_connection((host, int(port)), timeout=10) as sock,
            context.wrap_socket(sock, server_hostname=host) as tls,
        ):
            cipher = tls.cipher()
            return f"{tls.version()} {cipher[0] if cipher else '?'}"
