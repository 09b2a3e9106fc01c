"""Produce (0): validate each partition's batches, append them, answer per partition.

The replica manager validates (in Rust: CRC, magic, sizes, record counts,
max.message.bytes, keys on compacted topics, CreateTime timestamps within
message.timestamp.before/after.max.ms) and appends; a bad batch fails its
partition with CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP or
MESSAGE_TOO_LARGE and nothing of that partition's data is appended. Records
refused for their key or timestamp are named in ``record_errors`` (index in
the batch, Kafka's message) with Kafka's ``error_message`` (v8+). acks=all waits (at most the
request's ``timeout_ms``) for the in-sync replicas. acks=0 gets no response
at all.

A client over its ``producer_byte_rate`` quota (the request's size counts)
still has its records appended; its answer carries the throttle time and
the connection reads nothing more from it until that time is up (KIP-219;
with acks=0 there is no answer, only the pause).

Transactional batches need the request's transactional id, as Kafka: without
one every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED. The id
goes with the batches to the replica manager, which verifies a batch that
opens its producer's transaction on a partition with the transaction
coordinator first (KIP-890). Control batches (transaction markers) are the
brokers' own: a client's is refused with INVALID_RECORD.

With an authorizer, as Kafka: each topic needs Write (TOPIC_AUTHORIZATION_FAILED),
and transactional batches need Write on the request's transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition). A refused acks=0
request closes the connection, Kafka's way of telling a producer that waits
for no answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.futures import then
from kbroker.handlers import authorization as authz
from kbroker.handlers.authorization import TOPIC, TRANSACTIONAL_ID, Op
from kbroker.log import TopicPartition
from kbroker.network.request import RequestContext
from kbroker.network.server import CloseConnection
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import ProduceResponse
from kbroker.replication.replica_manager import AppendResult

if TYPE_CHECKING:
    from kbroker.broker import Broker

TopicResponse = ProduceResponse.Topic
PartitionResponse = ProduceResponse.Topic.Partition
RecordError = ProduceResponse.Topic.Partition.RecordError

# Produce v0-v2 carry message formats 0/1, which kbroker does not store;
# they are advertised (librdkafka enables compression only when Produce v0 is
# listed) and refused on the wire, as Kafka 4 does.
MIN_SERVED_VERSION = 3


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


# A record batch's attributes (big-endian int16) follow its base offset, length,
# leader epoch, magic and CRC; bit 4 (in the low byte) marks a transactional batch.
_ATTRIBUTES_AT = 21
_TRANSACTIONAL = 0x10


def _transactional(records: Any) -> bool:
    return bool(
        records is not None
        and len(records) > _ATTRIBUTES_AT + 1
        and records[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL
    )


def _unauthorized(broker: Broker, ctx: RequestContext, request: Any) -> tuple[Any, frozenset[str]]:
    """(the error for every partition, or None; the topics the principal may not write)."""
    if any(_transactional(p.records) for t in request.topic_data for p in t.partition_data):
        txn = request.transactional_id
        if txn is None or not authz.authorize(broker, ctx, Op.WRITE, TRANSACTIONAL_ID, txn):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, frozenset()
    if broker.authorizer is None:
        return None, frozenset()
    return None, authz.refused(broker, ctx, Op.WRITE, TOPIC, (t.name for t in request.topic_data))


def handle_produce(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    acks = request.acks
    denied_all, denied = _unauthorized(broker, ctx, request)
    # (topic, [(partition index, error response or None)]) in request order
    plan: list[tuple[str, list[tuple[int, Any]]]] = []
    entries: dict[TopicPartition, memoryview] = {}
    for topic in request.topic_data:
        parts: list[tuple[int, Any]] = []
        for p in topic.partition_data:
            if denied_all is not None:
                parts.append((p.index, _error(p.index, denied_all)))
                continue
            if topic.name in denied:
                parts.append((p.index, _error(p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
                continue
            refused = _check(version, acks, p.records)
            if refused is None:
                tp = TopicPartition(topic.name, p.index)
                if tp in entries:
                    refused = _error(p.index, ErrorCode.INVALID_RECORD, "partition given twice")
                else:
                    entries[tp] = p.records  # a memoryview into the request frame: never copied
            parts.append((p.index, refused))
        plan.append((topic.name, parts))
    done = broker.replica_manager.append_records(
        entries, acks, request.timeout_ms, transactional_id=request.transactional_id
    )
    throttle_ms = 0
    if broker.quotas.produce.enabled:
        throttle_ms = broker.quotas.produce_throttle_ms(
            ctx.principal, ctx.client_id, ctx.request_bytes
        )
        if throttle_ms > 0:
            ctx.connection.mute_for(throttle_ms / 1000)
    if acks == 0:
        if denied_all is not None or denied:
            raise CloseConnection(f"{ctx.principal} may not write (a produce request, acks=0)")
        return None
    if done.done():
        return _response(plan, done.result(), throttle_ms)
    return then(done, lambda results: _response(plan, results, throttle_ms))


def _check(version: int, acks: int, records: Any) -> Any:
    """The error response for a partition refused before the replica manager sees it."""
    if version < MIN_SERVED_VERSION:
        return _error(
            -1, ErrorCode.UNSUPPORTED_VERSION, "Produce v0-v2 (message format < 2) is not supported"
        )
    if acks not in (0, 1, -1):
        return _error(-1, ErrorCode.INVALID_REQUIRED_ACKS)
    if not records:
        return _error(-1, ErrorCode.INVALID_RECORD, "no record batch in the request")
    return None


def _response(
    plan: list[tuple[str, list[tuple[int, Any]]]],
    results: dict[TopicPartition, AppendResult],
    throttle_ms: int = 0,
) -> Any:
    responses = []
    for name, parts in plan:
        out = []
        for index, refused in parts:
            if refused is not None:
                refused.index = index
                out.append(refused)
                continue
            r = results[TopicPartition(name, index)]
            out.append(
                PartitionResponse(
                    index=index,
                    error_code=r.error,
                    base_offset=r.base_offset,
                    log_append_time_ms=r.log_append_time,
                    log_start_offset=r.log_start_offset,
                    record_errors=[
                        RecordError(batch_index=index, batch_index_error_message=message)
                        for index, message in r.record_errors
                    ],
                    error_message=r.message,
                )
            )
        responses.append(TopicResponse(name=name, partition_responses=out))
    return ProduceResponse(responses=responses, throttle_time_ms=throttle_ms)


HANDLERS = {ApiKey.PRODUCE: handle_produce}
