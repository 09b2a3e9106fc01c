"""DescribeLogDirs (35): the data directory, the size of each partition in it, and (v4)
the file system's total and usable bytes.

kbroker has one log directory (``log.dirs``) and no future replicas, so the answer
is one result with offset lag 0 and ``is_future_key`` false for every partition.
``topics`` null asks for every partition; partitions this broker does not host
are left out, as Kafka does. With an authorizer it needs Describe on the cluster
(CLUSTER_AUTHORIZATION_FAILED, no result), as in Kafka.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kbroker.handlers.authorization import Op, authorize_cluster
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import DescribeLogDirsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker

Result = DescribeLogDirsResponse.Result
Topic = DescribeLogDirsResponse.Result.Topic
Partition = DescribeLogDirsResponse.Result.Topic.Partition


def _wanted(broker: Broker, request: Any) -> list[tuple[str, int]]:
    if request.topics is None:
        return sorted((tp.topic, tp.partition) for tp in broker.replica_manager.all_partitions())
    return list(dict.fromkeys((t.topic, p) for t in request.topics for p in t.partitions))


def handle_describe_log_dirs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if not authorize_cluster(broker, ctx, Op.DESCRIBE):
        return DescribeLogDirsResponse(
            throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[]
        )
    log_dir = str(broker.data_dir.resolve())
    try:
        fs = os.statvfs(log_dir)
        total, usable = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
    except OSError as exc:
        broker.logs.errors.failed("reading the size of", log_dir, exc)
        result = Result(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=log_dir, topics=[])
        return DescribeLogDirsResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result]
        )
    topics: dict[str, list[Any]] = {}
    for name, index in _wanted(broker, request):
        partition = broker.partition(name, index)
        if partition is None:
            continue
        topics.setdefault(name, []).append(
            Partition(
                partition_index=index,
                partition_size=partition.log.size_bytes,
                offset_lag=0,
                is_future_key=False,
            )
        )
    result = Result(
        error_code=ErrorCode.NONE,
        log_dir=log_dir,
        topics=[Topic(name=name, partitions=parts) for name, parts in topics.items()],
        total_bytes=total,
        usable_bytes=usable,
    )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result])


HANDLERS = {ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs}
