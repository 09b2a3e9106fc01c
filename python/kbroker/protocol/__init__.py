"""kbroker's Kafka wire protocol: declarations, compiled codecs, headers, errors.

The server uses:
  decode_request(frame) -> (RequestHeader, body)
  encode_response(header, api_key, version, body) -> bytes (framed)
  encode_response_segments(...) -> [bytes, records, bytes, ...] (zero-copy)
  encode_api_versions_unsupported(header) -> bytes (error 35, v0 layout)
  APIS / api(key) / advertised_versions(handled) / api_versions_response(handled)
Message classes live in kbroker.protocol.messages, one module per family of APIs
(core, group, admin, acls, inter_broker, quotas, sasl, tokens, txn).
"""

from .apis import (
    APIS,
    APIS_BY_KEY,
    ApiKey,
    ApiSpec,
    advertised_versions,
    api,
    api_versions_response,
)
from .codec import Codec, RecordsPlaceholder, Segment, segments_size
from .errors import (
    ErrorCode,
    KafkaError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedRequestError,
    UnsupportedVersionError,
)
from .headers import (
    decode_request,
    decode_response,
    encode_api_versions_unsupported,
    encode_request,
    encode_request_header,
    encode_response,
    encode_response_segments,
)
from .schema import ZERO_UUID, Message, RequestHeader

__all__ = [
    "APIS",
    "APIS_BY_KEY",
    "ZERO_UUID",
    "ApiKey",
    "ApiSpec",
    "Codec",
    "ErrorCode",
    "KafkaError",
    "Message",
    "ProtocolDecodeError",
    "ProtocolEncodeError",
    "ProtocolError",
    "RecordsPlaceholder",
    "RequestHeader",
    "Segment",
    "UnknownApiKeyError",
    "UnsupportedRequestError",
    "UnsupportedVersionError",
    "advertised_versions",
    "api",
    "api_versions_response",
    "decode_request",
    "decode_response",
    "encode_api_versions_unsupported",
    "encode_request",
    "encode_request_header",
    "encode_response",
    "encode_response_segments",
    "segments_size",
]
