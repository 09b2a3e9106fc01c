"""`RequestContext`: what a handler knows about the request it answers, besides its body.

Built once per request by the dispatcher and passed to the handler: the
decoded header, the connection it came on, the listener and the authenticated
principal (for ACL checks and quotas), the request's size on the wire (for a
producer's byte-rate quota), and when it was received (for request metrics).
Handlers read it instead of any hidden global.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kbroker.network.server import ConnectionContext
from kbroker.protocol import RequestHeader

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    connection: ConnectionContext
    listener: str = "PLAINTEXT"
    # Who sent it: with no authentication configured, everyone is anonymous.
    principal: str = ANONYMOUS
    received_ns: int = field(default_factory=time.monotonic_ns)
    # The request's size on the wire (header and body, without the size prefix): what a
    # producer's byte-rate quota counts.
    request_bytes: int = 0

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def client_host(self) -> str:
        """The sending host as Kafka shows it ("/127.0.0.1")."""
        peer = self.connection.peer
        host = peer.rsplit(":", 1)[0] if ":" in peer else peer
        return "/" + host.strip("[]")

    def elapsed_ms(self) -> float:
        """Time since the request was received."""
        return (time.monotonic_ns() - self.received_ns) / 1e6
