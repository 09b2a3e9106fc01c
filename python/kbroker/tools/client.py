"""A small blocking client for kbroker's own tools (the CLI), on kbroker's protocol layer.

`BrokerClient` sends one request at a time over a plain socket with
`kbroker.protocol.encode_request` / `decode_response` and returns the decoded
body. It speaks fixed, recent versions (the CLI talks to kbroker brokers),
and `for_group()` connects to the coordinator of a group. With a
`ClientSecurity` (the CLI's ``--command-config``) the connection goes through
TLS and/or authenticates with SASL first.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

from kbroker.protocol import (
    APIS_BY_KEY,
    ApiKey,
    ErrorCode,
    ProtocolError,
    decode_response,
    encode_request,
)
from kbroker.protocol.messages.core import ApiVersionsRequest
from kbroker.protocol.messages.group import FindCoordinatorRequest
from kbroker.security.client import ClientSecurity, sasl_requests
from kbroker.security.errors import AuthenticationFailed

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 << 20
_RETRIABLE_COORDINATOR = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
)


class ClientError(Exception):
    """The broker could not be reached or answered with an error."""


def error_name(code: int) -> str:
    """The Kafka name of an error code, also for codes kbroker does not declare."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def split_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ClientError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class BrokerClient:
    def __init__(
        self,
        address: str,
        timeout: float = 30.0,
        client_id: str = "kbroker-cli",
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.timeout = timeout
        self.security = security or ClientSecurity()
        host, port = split_host_port(address)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {address}: {exc}") from None
        self._sock = sock
        # True once the connection failed under a request (a broker killed, a stream out
        # of step): this client is of no more use, unlike after an error the broker sent.
        self.broken = False
        self._correlation = 0
        self._versions: dict[int, tuple[int, int]] | None = None
        context = self.security.ssl_context
        try:
            if context is not None:
                self._sock = context.wrap_socket(sock, server_hostname=host)
            if self.security.protocol.sasl:
                _run_to_end(sasl_requests(self.security, self._send_async))
        except (OSError, AuthenticationFailed) as exc:
            sock.close()
            raise ClientError(f"cannot authenticate to {address}: {exc}") from None

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def send(self, api_key: ApiKey, version: int, body: Any) -> None:
        """Send a request the broker does not answer (Produce with acks=0)."""
        self._correlation += 1
        try:
            self._sock.sendall(
                encode_request(api_key, version, self._correlation, self.client_id, body)
            )
        except OSError as exc:
            self.broken = True
            raise ClientError(f"request to {self.address} failed: {exc}") from None

    def request(self, api_key: ApiKey, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        try:
            (size,) = _SIZE.unpack(self._read(4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                self.broken = True
                raise ClientError(f"response of {size} bytes from {self.address}")
            correlation, response = decode_response(api_key, version, self._read(size))
        except OSError as exc:
            self.broken = True
            raise ClientError(f"request to {self.address} failed: {exc}") from None
        except ProtocolError as exc:
            self.broken = True
            raise ClientError(f"unreadable answer from {self.address}: {exc}") from None
        if correlation != self._correlation:
            self.broken = True
            raise ClientError(
                f"{self.address} answered request {correlation}, not {self._correlation}"
            )
        return response

    async def _send_async(self, api_key: int, version: int, body: Any) -> Any:
        return self.request(ApiKey(api_key), version, body)

    def broker_versions(self) -> dict[int, tuple[int, int]]:
        """api key -> (min, max) version the broker advertises (ApiVersions, asked once)."""
        if self._versions is None:
            resp = self.request(
                ApiKey.API_VERSIONS,
                3,
                ApiVersionsRequest(client_software_name="kbroker-cli", client_software_version="1"),
            )
            if resp.error_code != ErrorCode.NONE:
                raise ClientError(f"ApiVersions failed: {error_name(resp.error_code)}")
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return self._versions

    def supports(self, api_key: ApiKey) -> bool:
        return self._usable(api_key) is not None

    def version(self, api_key: ApiKey) -> int:
        """The highest version of ``api_key`` both sides speak, or ClientError naming the
        missing API."""
        usable = self._usable(api_key)
        if usable is None:
            spec = APIS_BY_KEY[api_key]
            raise ClientError(
                f"the broker at {self.address} does not support {spec.name} "
                f"(Kafka API {int(api_key)}) in a version this tool speaks"
            )
        return usable

    def _usable(self, api_key: ApiKey) -> int | None:
        spec = APIS_BY_KEY[api_key]
        theirs = self.broker_versions().get(api_key)
        if theirs is None:
            return None
        hi = min(spec.max_version, theirs[1])
        return hi if hi >= max(spec.min_version, theirs[0]) else None

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                self.broken = True
                raise ClientError(f"{self.address} closed the connection")
            buf += chunk
        return bytes(buf)

    def for_group(
        self, group_id: str, timeout: float | None = None, own: bool = False
    ) -> BrokerClient:
        """A client connected to the coordinator of ``group_id``: this one (unless ``own``)
        or a new one with ``timeout`` (which the caller closes)."""
        # A coordinator that is not ready yet (Kafka creates __consumer_offsets on the first
        # ask) or cannot be reached (killed, and the cluster has not moved its groups yet)
        # is asked for again until the timeout, as Kafka's clients do.
        deadline = time.monotonic() + self.timeout
        unreached = ""  # the last coordinator named that could not be reached, and why
        while True:
            found = self.request(
                ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group_id, key_type=0)
            )
            if found.error_code == ErrorCode.NONE:
                address = f"{found.host}:{found.port}"
                if address == self.address and not own:
                    return self
                try:
                    return BrokerClient(
                        address, timeout or self.timeout, self.client_id, self.security
                    )
                except ClientError as exc:
                    unreached = f"broker {found.node_id} at {address} could not be reached ({exc})"
                    if time.monotonic() > deadline:
                        raise ClientError(
                            f"the coordinator of group {group_id!r}: {unreached}"
                        ) from None
            elif found.error_code not in _RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                raise ClientError(
                    f"no coordinator for group {group_id!r}: {error_name(found.error_code)}"
                    + (f" ({found.error_message})" if found.error_message else "")
                    + (f"; before, {unreached}" if unreached else "")
                )
            time.sleep(0.2)


def _run_to_end(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Runs a coroutine that never waits (its awaits are blocking calls) to its end."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the coroutine waited")
