"""TxnOffsetCommit (28): a transactional producer commits a group's offsets in its transaction.

The offsets become the group's committed offsets only when the transaction
commits (see `kbroker.coordinator.transactions`); the answer comes once they
are written, with an error per partition. v3+ carry the consumer's member,
instance and generation, checked as OffsetCommit checks them; v0-v2 commit
for any group.

As Kafka: the transactional id needs Write (else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), the group Read
(GROUP_AUTHORIZATION_FAILED), each topic Read (TOPIC_AUTHORIZATION_FAILED);
a topic or partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION.
Clients before v2 do not know COORDINATOR_LOAD_IN_PROGRESS here: they get
COORDINATOR_NOT_AVAILABLE, and before v4 TRANSACTION_ABORTABLE is
INVALID_TXN_STATE.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kbroker.coordinator.store import answered
from kbroker.handlers.authorization import GROUP, TOPIC, TRANSACTIONAL_ID, Op, authorize, refused
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import TxnOffsetCommitResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

E = ErrorCode
Topic = TxnOffsetCommitResponse.Topic
Partition = TxnOffsetCommitResponse.Topic.Partition
TopicPartitionKey = tuple[str, int]


def handle_txn_offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    order = [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]
    if not authorize(broker, ctx, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return _respond(
            version, answered({}), order, _all(order, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        )
    if not authorize(broker, ctx, Op.READ, GROUP, request.group_id):
        return _respond(version, answered({}), order, _all(order, E.GROUP_AUTHORIZATION_FAILED))
    denied = refused(broker, ctx, Op.READ, TOPIC, (t.name for t in request.topics))
    topics = broker.metadata_cache.topics()
    early: dict[TopicPartitionKey, ErrorCode] = {}
    offsets: dict[TopicPartitionKey, tuple[int, int, str | None]] = {}
    for topic in request.topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if topic.name in denied:
                early[tp] = E.TOPIC_AUTHORIZATION_FAILED
            elif known is None or p.partition_index not in known.partitions:
                early[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                epoch = p.committed_leader_epoch if version >= 2 else -1
                offsets[tp] = (p.committed_offset, epoch, p.committed_metadata)
    if not offsets:
        return _respond(version, answered({}), order, early)
    stored = broker.coordinator.txn_offsets.commit_offsets(
        request.group_id,
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.member_id if version >= 3 else "",
        request.group_instance_id if version >= 3 else None,
        request.generation_id if version >= 3 else -1,
        offsets,
    )
    return _respond(version, stored, order, early)


def _all(
    order: list[tuple[str, list[int]]], error: ErrorCode
) -> dict[TopicPartitionKey, ErrorCode]:
    return {(name, i): error for name, indexes in order for i in indexes}


def _as_version_knows(version: int, error: ErrorCode) -> ErrorCode:
    if version < 2 and error == E.COORDINATOR_LOAD_IN_PROGRESS:
        return E.COORDINATOR_NOT_AVAILABLE
    if version < 4 and error == E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    return error


async def _respond(
    version: int,
    stored: asyncio.Future[dict[TopicPartitionKey, ErrorCode]],
    order: list[tuple[str, list[int]]],
    early: dict[TopicPartitionKey, ErrorCode],
) -> Any:
    results = early | await stored
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            Topic(
                name=name,
                partitions=[
                    Partition(
                        partition_index=i, error_code=_as_version_knows(version, results[(name, i)])
                    )
                    for i in indexes
                ],
            )
            for name, indexes in order
        ],
    )


HANDLERS = {ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit}
