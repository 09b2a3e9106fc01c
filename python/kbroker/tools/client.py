"""A small blocking client for kbroker's own tools (the CLI), on kbroker's protocol layer.

`BrokerClient` sends one request at a time over a plain socket with
`kbroker.protocol.encode_request` / `decode_response` and returns the decoded
body. It speaks fixed, recent versions (the CLI talks to kbroker brokers),
and `for_group()` connects to the coordinator of a group.
"""

from __future__ import annotations

import socket
import struct
from types import TracebackType
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode, decode_response, encode_request
from kbroker.protocol.messages.group import FindCoordinatorRequest

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 << 20


class ClientError(Exception):
    """The broker could not be reached or answered with an error."""


def split_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ClientError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class BrokerClient:
    def __init__(self, address: str, timeout: float = 30.0, client_id: str = "kbroker-cli") -> None:
        self.address = address
        self.client_id = client_id
        self.timeout = timeout
        host, port = split_host_port(address)
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {address}: {exc}") from None
        self._correlation = 0

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def request(self, api_key: ApiKey, version: int, body: Any) -> Any:
        self._correlation += 1
        try:
            self._sock.sendall(
                encode_request(api_key, version, self._correlation, self.client_id, body)
            )
            (size,) = _SIZE.unpack(self._read(4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise ClientError(f"response of {size} bytes from {self.address}")
            correlation, response = decode_response(api_key, version, self._read(size))
        except OSError as exc:
            raise ClientError(f"request to {self.address} failed: {exc}") from None
        if correlation != self._correlation:
            raise ClientError(
                f"{self.address} answered request {correlation}, not {self._correlation}"
            )
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ClientError(f"{self.address} closed the connection")
            buf += chunk
        return bytes(buf)

    def for_group(self, group_id: str) -> BrokerClient:
        """A client connected to the coordinator of ``group_id``: this one or a new one
        (which the caller closes)."""
        found = self.request(
            ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group_id, key_type=0)
        )
        if found.error_code != ErrorCode.NONE:
            raise ClientError(
                f"no coordinator for group {group_id!r}: {ErrorCode(found.error_code).name}"
                + (f" ({found.error_message})" if found.error_message else "")
            )
        address = f"{found.host}:{found.port}"
        if address == self.address:
            return self
        return BrokerClient(address, self.timeout, self.client_id)
