"""A loopback socket that reads Kafka requests with kbroker's codec and answers with it.

A wire probe for codec conformance, not a broker: every frame a real Kafka sends to it
is decoded by `kbroker.protocol.decode_request` (header and body, at the version the
sender chose) and kept, and the reply that `answer` returns is encoded by
`kbroker.protocol.encode_response`. A frame the codec cannot decode is kept as an
error and its connection closed, so a test sees it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbroker.protocol import RequestHeader, decode_request, encode_response

Answer = Callable[[RequestHeader, Any], Any]


@dataclass
class Received:
    connection: int
    header: RequestHeader
    body: Any
    at: float = field(default_factory=time.monotonic)

    @property
    def api(self) -> tuple[int, int]:
        return self.header.api_key, self.header.api_version


class WireProbe:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.received: list[Received] = []
        self.errors: list[str] = []
        self._cond = threading.Condition()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._closing = threading.Event()
        self._conns: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def close(self) -> None:
        self._closing.set()
        self._sock.close()
        for c in list(self._conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        for t in self._threads:
            t.join(5)

    def wait_for(
        self, match: Callable[[Received], bool], what: str, timeout: float = 20.0
    ) -> Received:
        """The first received request that `match`es, waiting at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                assert not self.errors, self.errors
                for r in self.received:
                    if match(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [r.api for r in self.received]
                    raise AssertionError(f"no {what} within {timeout}s; received {seen}")
                self._cond.wait(left)

    def _accept(self) -> None:
        n = 0
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            n += 1
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _read(self, conn: socket.socket, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            try:
                while True:
                    size = self._read(conn, 4)
                    if size is None:
                        return
                    frame = self._read(conn, struct.unpack(">i", size)[0])
                    if frame is None:
                        return
                    try:
                        header, body = decode_request(frame)
                    except Exception as exc:  # recorded: the test fails on it
                        self._note_error(f"connection {number}: {exc!r} for {frame[:32].hex()}")
                        return
                    with self._cond:
                        self.received.append(Received(number, header, body))
                        self._cond.notify_all()
                    reply = self.answer(header, body)
                    if reply is None:
                        self._note_error(f"connection {number}: no answer for {header}")
                        return
                    conn.sendall(encode_response(header, header.api_key, header.api_version, reply))
            except OSError:
                return

    def _note_error(self, text: str) -> None:
        with self._cond:
            self.errors.append(text)
            self._cond.notify_all()
