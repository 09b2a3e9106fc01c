"""A cluster secured with SASL_SSL end to end: its certificates, its brokers' settings and
what its clients need.

Every broker has two listeners, CLIENT and INTERNAL, both SASL_SSL and no
PLAINTEXT one; brokers reach each other through INTERNAL, authenticating with
PLAIN as ``broker``; clients come through CLIENT as ``alice``. The settings are
Kafka's names, taken alike by Kafka 3.9.1 and kbroker: one PEM keystore (its
key encrypted, as Kafka requires of a PEM keystore file) with a certificate for
127.0.0.1 and localhost, one PEM truststore holding the test CA, and each
listener's JAAS configuration. Clients' settings come as librdkafka's, as a
Java client's properties file, and as kbroker's own `ClientSecurity`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.certs import CertAuthority, Identity

from kbroker.security.client import ClientSecurity
from tests.cluster.nodes import Listeners

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
CLIENT_USER, CLIENT_PASSWORD = "alice", "alice-secret"
KEY_PASSWORD = "key-secret"
CLIENT_LISTENER, INTER_BROKER_LISTENER = "CLIENT", "INTERNAL"


def plain_jaas(users: Mapping[str, str], own: tuple[str, str] | None = None) -> str:
    """A PLAIN JAAS configuration: the users a listener accepts (``user_<name>``) and, for
    the inter-broker listener, the broker's own user name and password."""
    options = [] if own is None else [f'username="{own[0]}"', f'password="{own[1]}"']
    options += [f'user_{name}="{password}"' for name, password in users.items()]
    return f"{PLAIN_MODULE} required {' '.join(options)};"


@dataclass(frozen=True)
class SaslSslCluster:
    ca: CertAuthority
    broker: Identity  # every broker's key and certificate

    @classmethod
    def make(cls, folder: Path) -> SaslSslCluster:
        ca = CertAuthority.make(folder)
        broker = ca.issue("broker", "/CN=localhost/O=kbroker", key_password=KEY_PASSWORD)
        return cls(ca, broker)

    def broker_settings(self) -> dict[str, str]:
        """Every broker's security settings (its listeners and their ports aside)."""
        users = {BROKER_USER: BROKER_PASSWORD, CLIENT_USER: CLIENT_PASSWORD}
        internal = plain_jaas({BROKER_USER: BROKER_PASSWORD}, own=(BROKER_USER, BROKER_PASSWORD))
        return {
            "inter.broker.listener.name": INTER_BROKER_LISTENER,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.enabled.mechanisms": "PLAIN",
            f"listener.name.{INTER_BROKER_LISTENER.lower()}.plain.sasl.jaas.config": internal,
            f"listener.name.{CLIENT_LISTENER.lower()}.plain.sasl.jaas.config": plain_jaas(users),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker.keystore),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.cert),
        }

    def client_conf(self) -> dict[str, Any]:
        """librdkafka's settings for the CLIENT listener, as alice."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca.cert),
            "sasl.mechanism": "PLAIN",
            "sasl.username": CLIENT_USER,
            "sasl.password": CLIENT_PASSWORD,
        }

    def kafka_python_conf(self) -> dict[str, Any]:
        """kafka-python's settings for the CLIENT listener, as alice."""
        return {
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(self.ca.cert),
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": CLIENT_USER,
            "sasl_plain_password": CLIENT_PASSWORD,
        }

    def client_properties(self) -> dict[str, str]:
        """A Java client's settings for the CLIENT listener, as alice."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.cert),
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": (
                f'{PLAIN_MODULE} required username="{CLIENT_USER}" password="{CLIENT_PASSWORD}";'
            ),
        }

    def client_security(self) -> ClientSecurity:
        """kbroker's own client (tools.client.BrokerClient) for the CLIENT listener."""
        return ClientSecurity.from_client_properties(self.client_properties(), "test client")

    def listeners(self) -> Listeners:
        """The cluster's listeners for tests/cluster/nodes.py's `cluster`."""
        return Listeners(
            {CLIENT_LISTENER: "SASL_SSL", INTER_BROKER_LISTENER: "SASL_SSL"},
            CLIENT_LISTENER,
            self.broker_settings(),
            self.client_conf(),
        )
