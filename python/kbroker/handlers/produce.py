"""Produce (0): validate each partition's batches, append them, answer per partition.

Validation (CRC, magic, sizes, record counts, max.message.bytes, keys on
compacted topics) runs in Rust; a bad batch fails its partition with
CORRUPT_MESSAGE, INVALID_RECORD or MESSAGE_TOO_LARGE and nothing of that
partition's data is appended. acks=0 gets no response at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker._kbroker import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    validate_batches,
)
from kbroker.config import as_int, as_list
from kbroker.log.compression import recompress_for_topic
from kbroker.protocol import ApiKey, ErrorCode, RequestHeader
from kbroker.protocol.messages.core import ProduceResponse
from kbroker.replication.partition import PartitionError

if TYPE_CHECKING:
    from kbroker.broker import Broker

TopicResponse = ProduceResponse.Topic
PartitionResponse = ProduceResponse.Topic.Partition

# Produce v0-v2 carry message formats 0/1, which kbroker does not store;
# they are advertised (librdkafka enables compression only when Produce v0 is
# listed) and refused on the wire, as Kafka 4 does.
MIN_SERVED_VERSION = 3
# Decompressed size bound while validating one batch.
MAX_DECOMPRESSED_BYTES = 256 << 20


def _error(index: int, code: ErrorCode, message: str | None = None) -> Any:
    return PartitionResponse(
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=message,
    )


def handle_produce(broker: Broker, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    acks = request.acks
    responses = []
    for topic in request.topic_data:
        results = [
            _produce_partition(broker, topic.name, p.index, p.records, acks, version)
            for p in topic.partition_data
        ]
        responses.append(TopicResponse(name=topic.name, partition_responses=results))
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)


def _produce_partition(
    broker: Broker, topic: str, index: int, records: Any, acks: int, version: int
) -> Any:
    if version < MIN_SERVED_VERSION:
        return _error(
            index,
            ErrorCode.UNSUPPORTED_VERSION,
            "Produce v0-v2 (message format < 2) is not supported",
        )
    if acks not in (0, 1, -1):
        return _error(index, ErrorCode.INVALID_REQUIRED_ACKS)
    partition = broker.partition(topic, index)
    if partition is None:
        return _error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not records:
        return _error(index, ErrorCode.INVALID_RECORD, "no record batch in the request")
    config = broker.topic_config(topic)
    max_bytes = as_int(config["max.message.bytes"])
    compacted = "compact" in as_list(config["cleanup.policy"])
    data = records  # a memoryview into the request frame: never copied
    try:
        infos = validate_batches(data, max_bytes, True, MAX_DECOMPRESSED_BYTES, compacted)
        data = recompress_for_topic(data, infos, config.get_str("compression.type"), max_bytes)
    except RecordTooLargeError as exc:
        return _error(index, ErrorCode.MESSAGE_TOO_LARGE, str(exc))
    except CorruptRecordError as exc:
        return _error(index, ErrorCode.CORRUPT_MESSAGE, str(exc))
    except InvalidRecordError as exc:
        return _error(index, ErrorCode.INVALID_RECORD, str(exc))
    for info in infos:
        if info.is_control:
            return _error(index, ErrorCode.INVALID_RECORD, "clients may not write control batches")
        if info.is_transactional:
            return _error(index, ErrorCode.INVALID_TXN_STATE, "transactions are not supported yet")
    try:
        result = partition.append_as_leader(
            data,
            infos,
            acks,
            as_int(config["min.insync.replicas"]),
            config["message.timestamp.type"] == "LogAppendTime",
        )
    except PartitionError as exc:
        return _error(index, ErrorCode[exc.error], str(exc))
    except RecordTooLargeError as exc:
        # Larger than the topic's segment.bytes (max.message.bytes was checked above).
        return _error(index, ErrorCode.RECORD_LIST_TOO_LARGE, str(exc))
    except (CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError) as exc:
        return _error(index, ErrorCode.CORRUPT_MESSAGE, str(exc))
    except OSError as exc:
        broker.logs.errors.failed("append to", partition.tp, exc)
        return _error(
            index, ErrorCode.KAFKA_STORAGE_ERROR, f"the broker could not write to its disk: {exc}"
        )
    broker.logs.errors.succeeded("append to", partition.tp)
    return PartitionResponse(
        index=index,
        error_code=ErrorCode.NONE,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time,
        log_start_offset=result.log_start_offset,
        record_errors=[],
        error_message=None,
    )


HANDLERS = {ApiKey.PRODUCE: handle_produce}
