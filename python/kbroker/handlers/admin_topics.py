"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21).

Owns the request-level rules of the topic admin APIs: duplicate entries,
manual replica assignments (on a single node every replica must be this
broker, in a cluster a registered one), validate-only requests, and one
result per topic (or partition) with an error message.
The topic changes themselves are `Broker` methods.

With an authorizer, as Kafka (TOPIC_AUTHORIZATION_FAILED otherwise):
CreateTopics needs Create on the cluster or the topic, and shows a new
topic's configs only to who may DescribeConfigs it; DeleteTopics needs
Delete (and, by id, Describe, or the name is not told); CreatePartitions
needs Alter; DeleteRecords needs Delete.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbroker.errors import TopicError
from kbroker.futures import then
from kbroker.handlers.admin_configs import topic_config_entries
from kbroker.handlers.authorization import TOPIC, Op, authorize_cluster, refused
from kbroker.log import TopicPartition
from kbroker.metadata.topics import INTERNAL_TOPICS, NewTopic, collision_key
from kbroker.network.request import RequestContext
from kbroker.protocol import ZERO_UUID, ApiKey, ErrorCode
from kbroker.protocol.messages.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
)

if TYPE_CHECKING:
    from kbroker.broker import Broker

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
# Topics of one CreateTopics handled between two turns of the event loop.
YIELD_EVERY = 256


def _code(name: str) -> ErrorCode:
    try:
        return ErrorCode[name]
    except KeyError:
        log.error("no error code named %s", name)
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _duplicates(names: Sequence[Any]) -> list[Any]:
    """Names that occur more than once, in order of first appearance."""
    counts = Counter(names)
    return [n for n in dict.fromkeys(names) if counts[n] > 1]


def _check_assignment(broker: Broker, replicas: Sequence[int], expected_rf: int | None) -> int:
    """Checks one partition's manual replica list; returns its replication factor."""
    if not replicas:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "a partition must have at least one replica"
        )
    if len(set(replicas)) != len(replicas):
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"duplicate brokers in replica list {list(replicas)}",
        )
    if broker.cluster is not None:
        broker.cluster.check_replicas(replicas)
    for b in replicas:
        if broker.cluster is None and b != broker.broker_id:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"the replica assignment includes broker {b}, but no such broker is registered",
            )
    if expected_rf is not None and len(replicas) != expected_rf:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"a partition has {len(replicas)} replica(s), but the others have {expected_rf}",
        )
    return len(replicas)


# -- CreateTopics ----------------------------------------------------------------


def _topic_shape(broker: Broker, t: Any) -> tuple[int, int]:
    """(num_partitions, replication_factor) asked for, from counts or manual assignments."""
    if not t.assignments:
        return t.num_partitions, t.replication_factor
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise TopicError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    indexes = sorted(a.partition_index for a in t.assignments)
    if indexes != list(range(len(indexes))):
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    rf: int | None = None
    for a in t.assignments:
        rf = _check_assignment(broker, a.broker_ids, rf)
    assert rf is not None
    return len(indexes), rf


def _check_one(broker: Broker, t: Any) -> NewTopic:
    """Validates one CreateTopics entry; TopicError refuses it."""
    name = t.name
    nulls = [c.name for c in t.configs if c.value is None]
    if nulls:
        raise TopicError(
            ErrorCode.INVALID_REQUEST,
            f"Null value not supported for topic configs: {','.join(nulls)}",
        )
    if name == METADATA_TOPIC:
        raise TopicError(
            ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited."
        )
    partitions, rf = _topic_shape(broker, t)
    configs = {c.name: c.value for c in t.configs}
    partitions, rf, parsed = broker.check_new_topic(name, partitions, rf, configs)
    other = broker.colliding_topic(name)
    if other is not None:
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topics: {other}",
        )
    assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
    return NewTopic(
        name,
        partitions,
        rf,
        configs,
        parsed,
        internal=name in INTERNAL_TOPICS,
        assignment=assignment,
    )


def _result(
    broker: Broker, new: NewTopic, topic_id: uuid.UUID, version: int, show_configs: bool = True
) -> Any:
    Result = CreateTopicsResponse.Topic
    Config = Result.Config
    if not show_configs:
        return Result(
            name=new.name,
            topic_id=topic_id,
            error_code=ErrorCode.NONE,
            error_message=None,
            topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            configs=[],
        )
    return Result(
        name=new.name,
        topic_id=topic_id,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=new.num_partitions,
        replication_factor=new.replication_factor,
        configs=[
            Config(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=e.sensitive,
            )
            for e in topic_config_entries(broker.config, new.parsed)
        ]
        if version >= 5
        else [],
    )


def _refused(name: str, exc: TopicError) -> Any:
    return CreateTopicsResponse.Topic(name=name, error_code=exc.code, error_message=str(exc))


async def handle_create_topics(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    """Validates every entry, then creates the valid ones together (see `Broker.create_topics`)."""
    Result = CreateTopicsResponse.Topic
    dupes = set(_duplicates([t.name for t in request.topics]))
    names = [t.name for t in request.topics]
    denied = (
        frozenset()
        if authorize_cluster(broker, ctx, Op.CREATE)
        else refused(broker, ctx, Op.CREATE, TOPIC, names)
    )
    hidden_configs = refused(broker, ctx, Op.DESCRIBE_CONFIGS, TOPIC, names)
    outcome: dict[str, Any] = {}
    valid: list[NewTopic] = []
    seen: set[str] = set()
    for i, t in enumerate(request.topics):
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)  # a huge request leaves others their turn
        if t.name in dupes:
            continue
        if t.name in denied:
            outcome[t.name] = _refused(
                t.name, TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            )
            continue
        try:
            new = _check_one(broker, t)
            key = collision_key(new.name)
            if key in seen:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{new.name}' collides with another topic of this request",
                )
            seen.add(key)
        except TopicError as exc:
            outcome[t.name] = _refused(t.name, exc)
            continue
        valid.append(new)
        if request.validate_only:
            outcome[t.name] = _result(
                broker, new, ZERO_UUID, ctx.api_version, new.name not in hidden_configs
            )
    if valid and not request.validate_only:
        created = await broker.create_topics(valid, request.timeout_ms)
        for i, new in enumerate(valid):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            done = created[new.name]
            outcome[new.name] = (
                _refused(new.name, done)
                if isinstance(done, TopicError)
                else _result(
                    broker, new, done.topic_id, ctx.api_version, new.name not in hidden_configs
                )
            )
    results = [outcome[t.name] for t in request.topics if t.name in outcome]
    results += [
        Result(name=n, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
        for n in dict.fromkeys(t.name for t in request.topics if t.name in dupes)
    ]
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


# -- DeleteTopics ----------------------------------------------------------------


def handle_delete_topics(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    Result = DeleteTopicsResponse.Result
    results: list[Any] = []

    def fail(name: str | None, topic_id: uuid.UUID, error: ErrorCode, message: str) -> None:
        results.append(
            Result(name=name, topic_id=topic_id, error_code=error, error_message=message)
        )

    if ctx.api_version >= 6:
        entries = [(t.name, t.topic_id) for t in request.topics]
    else:
        entries = [(n, ZERO_UUID) for n in request.topic_names]
    names: list[str] = []
    ids: list[uuid.UUID] = []
    for name, topic_id in entries:
        if name is None and topic_id == ZERO_UUID:
            fail(
                None,
                ZERO_UUID,
                ErrorCode.INVALID_REQUEST,
                "Neither topic name nor id were specified.",
            )
        elif name is not None and topic_id != ZERO_UUID:
            fail(
                name,
                topic_id,
                ErrorCode.INVALID_REQUEST,
                "You may not specify both topic name and topic id.",
            )
        elif name is None:
            ids.append(topic_id)
        else:
            names.append(name)
    dup_names, dup_ids = _duplicates(names), _duplicates(ids)
    for n in dup_names:
        fail(n, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    for i in dup_ids:
        fail(None, i, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")

    topics = broker.metadata_cache.topics()
    by_id = {t.topic_id: t.name for t in topics.values()}
    named = [by_id[i] for i in ids if i in by_id] + names
    no_describe = refused(broker, ctx, Op.DESCRIBE, TOPIC, named)
    no_delete = refused(broker, ctx, Op.DELETE, TOPIC, named)
    targets: dict[uuid.UUID, str] = {}
    for i in ids:
        if i in dup_ids:
            continue
        if i not in by_id:
            fail(None, i, ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
        elif by_id[i] in no_describe:
            # The id is not secret; the name is.
            fail(None, i, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        elif by_id[i] in no_delete:
            fail(by_id[i], i, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        else:
            targets[i] = by_id[i]
    for n in names:
        if n in dup_names:
            continue
        topic = topics.get(n)
        if n in no_delete:
            fail(n, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        elif topic is None:
            fail(n, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {n!r} does not exist")
        elif topic.topic_id in targets:
            fail(
                n,
                topic.topic_id,
                ErrorCode.INVALID_REQUEST,
                "The provided topic name maps to an ID that was already supplied.",
            )
        else:
            targets[topic.topic_id] = n
    return _delete(broker, targets, results, request.timeout_ms)


async def _delete(
    broker: Broker, targets: dict[uuid.UUID, str], results: list[Any], timeout_ms: int
) -> Any:
    Result = DeleteTopicsResponse.Result
    done = await broker.delete_topics(list(targets.values()), timeout_ms)
    for topic_id, name in targets.items():
        error = done[name]
        if error is None:
            results.append(Result(name=name, topic_id=topic_id, error_code=ErrorCode.NONE))
        else:
            results.append(
                Result(
                    name=name,
                    topic_id=topic_id,
                    error_code=error.code,
                    error_message=str(error),
                )
            )
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


# -- CreatePartitions --------------------------------------------------------------


async def _add_partitions(broker: Broker, t: Any, validate_only: bool, timeout_ms: int) -> None:
    topic = broker.check_add_partitions(t.name, t.count)
    if t.assignments is not None:
        current = len(topic.partitions)
        rf = len(next(iter(topic.partitions.values())).replicas)
        if len(t.assignments) != t.count - current:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {t.count - current} additional partition(s), "
                f"but only {len(t.assignments)} assignment(s) were specified.",
            )
        for a in t.assignments:
            _check_assignment(broker, a.broker_ids, rf)
    if not validate_only:
        assignment = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        await broker.add_partitions(t.name, t.count, assignment, timeout_ms)


async def handle_create_partitions(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    Result = CreatePartitionsResponse.Result
    dupes = _duplicates([t.name for t in request.topics])
    denied = refused(broker, ctx, Op.ALTER, TOPIC, (t.name for t in request.topics))
    results = []
    for t in request.topics:
        if t.name in dupes:
            continue
        if t.name in denied:
            results.append(
                Result(
                    name=t.name,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="The topic authorization is failed.",
                )
            )
            continue
        try:
            await _add_partitions(broker, t, request.validate_only, request.timeout_ms)
        except TopicError as exc:
            results.append(Result(name=t.name, error_code=exc.code, error_message=str(exc)))
        else:
            results.append(Result(name=t.name, error_code=ErrorCode.NONE, error_message=None))
    results += [
        Result(
            name=n,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message="Duplicate topic in request.",
        )
        for n in dupes
    ]
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


# -- DeleteRecords -------------------------------------------------------------------


def handle_delete_records(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    """Each partition's records before its offset go, on every in-sync replica: the answer
    waits (at most the request's timeout) until their log starts are there."""
    TopicResult = DeleteRecordsResponse.Topic
    PartitionResult = TopicResult.Partition
    early: dict[TopicPartition, tuple[int, ErrorCode]] = {}
    asked: dict[TopicPartition, int] = {}
    denied = refused(broker, ctx, Op.DELETE, TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if t.name in denied:
                early[tp] = (-1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif tp in broker.replica_manager:
                asked[tp] = p.offset
                continue
            known = broker.metadata_cache.topics().get(t.name)
            if known is not None and p.partition_index in known.partitions:
                early[tp] = (-1, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            else:
                early[tp] = (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def answer(results: dict[TopicPartition, tuple[int, ErrorCode]]) -> Any:
        results = early | results
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                low, error = results[TopicPartition(t.name, p.partition_index)]
                partitions.append(
                    PartitionResult(
                        partition_index=p.partition_index, low_watermark=low, error_code=error
                    )
                )
            topics.append(TopicResult(name=t.name, partitions=partitions))
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    done = broker.replica_manager.delete_records(asked, request.timeout_ms)
    if done.done():
        return answer(done.result())
    return then(done, answer)


HANDLERS = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DELETE_RECORDS: handle_delete_records,
}
