"""Request/response headers and the frame-level entry points the server calls.

Frames: `decode_request` takes one request frame *without* its 4-byte size
prefix (the network layer has already split the stream); the encode_*
functions return complete frames *with* the size prefix, ready to write.

Header versions are derived from the API table: request header v1 (classic)
or v2 (flexible: + tagged fields; client_id stays a classic nullable string);
response header v0 or v1 (flexible), except ApiVersions which always answers
with v0. Request header v0 (no client_id) is only used by ControlledShutdown
v0, an inter-broker request older than client ids.
"""

from __future__ import annotations

import struct
from typing import Any

from .apis import APIS_BY_KEY, ApiKey
from .codec import Codec, RecordsPlaceholder, Segment, read_uvarint, segments_size
from .errors import (
    ErrorCode,
    ProtocolDecodeError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from .messages.core import ApiVersionsResponse
from .schema import Message, RequestHeader

_HDR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_SIZE_CORR = struct.Struct(">ii")


def _read_client_id(buf: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(buf):
        raise ProtocolDecodeError("bad client_id length")
    return str(buf[pos : pos + n], "utf-8"), pos + n


def _skip_tagged(buf: memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolDecodeError("truncated header tagged field")
    return pos


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Message]:
    """Decode one request frame (size prefix already stripped) into (header, body).

    Bytes after the body are ignored (as Kafka ignores them). Raises
    ProtocolDecodeError for malformed bytes (its `header` is set when
    the header was readable), UnknownApiKeyError / UnsupportedVersionError
    (both carrying the header) for requests kbroker does not declare. Records
    fields in the body are memoryview slices of `frame`: keep the frame
    unchanged while the request is being handled.
    """
    buf = memoryview(frame)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    if len(buf) < 8:
        raise ProtocolDecodeError(f"request frame of {len(buf)} bytes is shorter than a header")
    api_key, version, corr = _HDR.unpack_from(buf, 0)
    header = RequestHeader(api_key, version, corr)
    try:
        spec = APIS_BY_KEY.get(api_key)
        if spec is not None and spec.supports(version) and not spec.request_header_version(version):
            header.header_version, pos = 0, 8  # no client_id (ControlledShutdown v0)
        else:
            header.client_id, pos = _read_client_id(buf, 8)
        if spec is None:
            raise UnknownApiKeyError(f"unknown api key {api_key}", header)
        if not spec.supports(version):
            raise UnsupportedVersionError(
                f"{spec.name} v{version} not supported ({spec.min_version}-{spec.max_version})",
                header,
            )
        if spec.flexible(version):
            header.header_version = 2
            pos = _skip_tagged(buf, pos)
        codec = spec.request_codec(version)
        body, pos = codec.decode_from(buf, pos)
    except ProtocolDecodeError as e:
        e.header = header
        raise
    except (struct.error, IndexError, ValueError) as e:
        raise ProtocolDecodeError(f"malformed request header: {e}", header) from e
    # Bytes after the body are ignored, as Kafka does: librdkafka 2.16 pads
    # a null topic list in Metadata v9+ with three stray bytes.
    return header, body


def _correlation_id(header: RequestHeader | int) -> int:
    return header if isinstance(header, int) else header.correlation_id


def _response_prefix(
    header: RequestHeader | int, api_key: int, version: int
) -> tuple[Codec, bytes]:
    spec = APIS_BY_KEY[api_key]
    head = _I32.pack(_correlation_id(header))
    if spec.response_header_version(version) == 1:
        head += b"\x00"  # no tagged fields in the header
    return spec.response_codec(version), head


def encode_response(header: RequestHeader | int, api_key: int, version: int, body: Any) -> bytes:
    """A complete response frame (size prefix, header, body) as one bytes object.

    `header` is the request's RequestHeader (or just its correlation id).
    Records fields must hold bytes-like values; for placeholders use
    `encode_response_segments`.
    """
    codec, head = _response_prefix(header, api_key, version)
    out: list[Any] = [b"", head]
    codec.encode_into(body, out)
    size = sum(map(len, out))
    out[0] = _I32.pack(size)
    try:
        return b"".join(out)
    except TypeError:
        codec.encode(body)  # raises the ProtocolEncodeError explaining placeholders
        raise


def encode_response_segments(
    header: RequestHeader | int, api_key: int, version: int, body: Any
) -> list[Segment]:
    """A response frame split around its records values, for zero-copy sends.

    Returns ``[bytes, records, bytes, records, ..., bytes]`` (a list that
    starts with bytes: the size prefix, header and everything up to the first
    records value). Each records item is exactly the object the handler put
    in a records field: bytes/bytearray/memoryview, or a RecordsPlaceholder
    whose `length` bytes the server sends itself (e.g. with sendfile). Empty
    and null records are encoded inline. The size prefix counts the
    placeholder lengths, so writing every segment in order yields the frame.
    """
    codec, head = _response_prefix(header, api_key, version)
    segs = codec.encode_segments(body, prefix=head)
    size = segments_size(segs)
    first = segs[0]  # always framing bytes: the header is never empty
    assert not isinstance(first, RecordsPlaceholder)
    segs[0] = _I32.pack(size) + bytes(first)
    return segs


def encode_request_header(
    api_key: int, version: int, correlation_id: int, client_id: str | None, header_version: int
) -> bytes:
    """Header bytes for request header v0, v1 or v2."""
    out = _HDR.pack(api_key, version, correlation_id)
    if header_version >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            cid = client_id.encode("utf-8")
            out += _I16.pack(len(cid)) + cid
    if header_version >= 2:
        out += b"\x00"
    return out


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A complete request frame (size prefix included), e.g. for inter-broker fetches."""
    spec = APIS_BY_KEY[api_key]
    out: list[Any] = [
        b"",
        encode_request_header(
            api_key, version, correlation_id, client_id, spec.request_header_version(version)
        ),
    ]
    spec.request_codec(version).encode_into(body, out)
    out[0] = _I32.pack(sum(map(len, out)))
    return b"".join(out)


def decode_response(
    api_key: int, version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Message]:
    """Decode a response frame (size prefix stripped) -> (correlation_id, body)."""
    spec = APIS_BY_KEY[api_key]
    buf = memoryview(frame)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    try:
        (corr,) = _I32.unpack_from(buf, 0)
        pos = 4
        if spec.response_header_version(version) == 1:
            pos = _skip_tagged(buf, pos)
    except (struct.error, IndexError) as e:
        raise ProtocolDecodeError(f"malformed response header: {e}") from e
    body, pos = spec.response_codec(version).decode_from(buf, pos)
    if pos != len(buf):
        raise ProtocolDecodeError(f"{len(buf) - pos} trailing bytes after {spec.name} response")
    return corr, body


def encode_api_versions_unsupported(header: RequestHeader | int) -> bytes:
    """The reply to an ApiVersions request whose version kbroker does not know.

    Error 35 (UNSUPPORTED_VERSION) in the v0 layout (header v0, no throttle
    time), listing only ApiVersions' own supported range so the client can
    retry with a version it shares with the broker (KIP-511).
    """
    spec = APIS_BY_KEY[ApiKey.API_VERSIONS]
    body = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            ApiVersionsResponse.ApiVersion(int(spec.key), spec.min_version, spec.max_version)
        ],
    )
    return encode_response(header, ApiKey.API_VERSIONS, 0, body)


__all__ = [
    "RecordsPlaceholder",
    "RequestHeader",
    "decode_request",
    "decode_response",
    "encode_api_versions_unsupported",
    "encode_request",
    "encode_request_header",
    "encode_response",
    "encode_response_segments",
]
