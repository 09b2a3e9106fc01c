"""ZooKeeper's multiRead (ZooKeeper 3.6 and later) for kazoo, and whether a server has it.

A new controller reads one znode per partition; through kazoo each read is one
request, and kazoo's connection thread spends a few hundred microseconds of
Python on each (10,000 partitions: seconds). A multiRead carries many reads in
one request and one answer, each read answered on its own (a missing znode
fails its read only, unlike a multi's writes).

A server older than 3.6 does not know the request: it answers UNIMPLEMENTED and
closes the session, taking this broker's ephemeral znodes with it. So a multiRead
is only sent once every server of the connect string said (through the ``srvr``
four-letter command, in ZooKeeper's default whitelist) that it runs 3.6 or later;
`server_versions` asks them.

`MultiRead` is a request object as kazoo's connection takes them (``type``,
``serialize``, ``deserialize``), in ZooKeeper's jute encoding: per read a multi
header (getData, not done, -1) and the path with no watch, then the closing
header; the answer has per read a header and either the data and stat or an
error code.
"""

from __future__ import annotations

import re
import socket
import struct
from dataclasses import dataclass

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.states import ZnodeStat

MULTI_READ_OPCODE = 22
GET_DATA_OPCODE = 4
ERROR_OPCODE = -1
# The first ZooKeeper release with multiRead.
MULTI_READ_SINCE = (3, 6)

_HEADER = struct.Struct("!i?i")  # op type, done, error
_INT = struct.Struct("!i")
# czxid mzxid ctime mtime version cversion aversion ephemeralOwner dataLength numChildren pzxid
_STAT = struct.Struct("!qqqqiiiqiiq")
_VERSION = re.compile(rb"Zookeeper version: (\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """One read of a multiRead refused: kazoo's exception for its code (NoNodeError...)."""

    error: Exception


class MultiRead:
    """A multiRead of the data of ``paths`` (already prefixed with the chroot)."""

    type = MULTI_READ_OPCODE

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def serialize(self) -> bytearray:
        out = bytearray()
        head = _HEADER.pack(GET_DATA_OPCODE, False, -1)
        for path in self.paths:
            encoded = path.encode()
            out += head
            out += _INT.pack(len(encoded))
            out += encoded
            out.append(0)  # no watch
        out += _HEADER.pack(-1, True, -1)
        return out

    def deserialize(self, buffer: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | ReadFailed]:
        """Each read's data and stat, or its failure, in the order asked (kazoo's thread)."""
        out: list[tuple[bytes, ZnodeStat] | ReadFailed] = []
        while True:
            kind, done, _ = _HEADER.unpack_from(buffer, offset)  # (the error is in the body)
            offset += _HEADER.size
            if done:
                break
            if kind == GET_DATA_OPCODE:
                (length,) = _INT.unpack_from(buffer, offset)
                offset += _INT.size
                if length < 0:
                    data = b""
                else:
                    data = bytes(buffer[offset : offset + length])
                    offset += length
                stat = ZnodeStat._make(_STAT.unpack_from(buffer, offset))
                offset += _STAT.size
                out.append((data, stat))
            elif kind == ERROR_OPCODE:
                (code,) = _INT.unpack_from(buffer, offset)
                offset += _INT.size
                out.append(ReadFailed(EXCEPTIONS[code]()))
            else:
                raise ValueError(f"multiRead answer with an op of type {kind}")
        if len(out) != len(self.paths):
            raise ValueError(f"multiRead answered {len(out)} reads of {len(self.paths)}")
        return out


def server_version(host: str, port: int, timeout: float) -> tuple[int, int] | None:
    """(major, minor) of the ZooKeeper server at host:port from its ``srvr`` answer; None
    when it cannot be had (refused, not whitelisted, unreachable, unreadable)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(b"srvr")
            answer = b""
            while len(answer) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        return None
    match = _VERSION.search(answer)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def server_versions(hosts: str, timeout: float) -> list[tuple[int, int] | None]:
    """`server_version` of every server of ``hosts`` (``host:port,host:port``)."""
    out = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append(server_version(host.strip("[]"), int(port), timeout))
    return out


def multi_read_supported(versions: list[tuple[int, int] | None]) -> bool:
    return bool(versions) and all(v is not None and v >= MULTI_READ_SINCE for v in versions)
