"""Clients of transactional offset commits for tests, on either system: confluent-kafka's
transactional producer and read_committed consumer, OffsetFetch with require_stable on the
wire, the consume-transform-produce loop of a stream processor, and Kafka's own
kafka-transactions tool."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import FindCoordinatorRequest, OffsetFetchRequest
from kbroker.tools.client import BrokerClient, ClientError
from tests.cluster.kafka_zk import require_kafka
from tests.helpers import wait_for

E = ErrorCode
# An OffsetFetch answer to ask again: the coordinator moves, loads or restarts.
_NOT_READY = (E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE)


def new_topic(conf: Mapping[str, Any], partitions: int, replicas: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(dict(conf))
    config = {"min.insync.replicas": "2"} if replicas > 2 else {}
    admin.create_topics([NewTopic(name, partitions, replicas, config=config)])[name].result(60)
    return name


def transactional_producer(
    conf: Mapping[str, Any], transactional_id: str | None = None
) -> Producer:
    producer = Producer(
        {
            **conf,
            "transactional.id": transactional_id or f"tx-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(60)
    return producer


def consumer(conf: Mapping[str, Any], group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            **conf,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
            **extra,
        }
    )


def coordinator(bootstraps: list[str], key: str, key_type: int = 0) -> tuple[str, int] | None:
    """(address, node id) of the coordinator of a group (key type 0) or transactional id
    (1), asked of the first broker of ``bootstraps`` that answers; None while there is none."""
    for address in bootstraps:
        try:
            with BrokerClient(address, timeout=5) as client:
                found = client.request(
                    ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=key, key_type=key_type)
                )
        except ClientError:
            continue
        if found.error_code != E.NONE:
            return None
        return f"{found.host}:{found.port}", int(found.node_id)
    return None


def fetch_offsets(
    bootstraps: list[str], group: str, topic: str, partitions: list[int]
) -> dict[int, Any]:
    """OffsetFetch v7 with require_stable, to the group's coordinator: partition -> its
    committed offset (-1: none) or the error (UNSTABLE_OFFSET_COMMIT while a transaction
    holds it); asked again while the coordinator is not ready."""
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.Topic(name=topic, partition_indexes=partitions)],
        require_stable=True,
    )

    def ask() -> Any:
        found = coordinator(bootstraps, group)
        if found is None:
            return None
        try:
            with BrokerClient(found[0], timeout=5) as client:
                resp = client.request(ApiKey.OFFSET_FETCH, 7, request)
        except ClientError:
            return None
        return None if resp.error_code in _NOT_READY else resp

    resp = wait_for(ask, f"the coordinator of {group}", timeout=60, interval=0.25)
    assert resp.error_code == E.NONE, E(resp.error_code)
    return {
        p.partition_index: E(p.error_code) if p.error_code else p.committed_offset
        for t in resp.topics
        for p in t.partitions
    }


def settled(bootstraps: list[str], group: str, topic: str, partitions: list[int]) -> dict[int, Any]:
    """The offsets once no transaction holds them (a marker lands after EndTxn answers)."""
    return wait_for(
        lambda: (
            found
            if E.UNSTABLE_OFFSET_COMMIT
            not in (found := fetch_offsets(bootstraps, group, topic, partitions)).values()
            else None
        ),
        "the transaction's marker",
        timeout=60,
    )


def consume(c: Consumer, count: int, timeout: float = 30) -> list[Any]:
    """Up to ``count`` messages, polled for at most ``timeout`` seconds."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def rewind(c: Consumer) -> None:
    """Back to the offsets the group has committed (an aborted round is read again)."""
    assignment = c.assignment()
    if not assignment:
        return
    for tp in c.committed(assignment, 60):
        tp.offset = max(tp.offset, 0)
        c.seek(tp)


def run_in_transaction(p: Producer, c: Consumer, batch: list[Any], sink: str) -> bool:
    """One round of a stream processor: the batch's results and the consumer's positions in
    one transaction. False when the transaction had to be aborted (a rebalance fenced the
    member's generation, a coordinator moved): the caller reads the round again."""
    try:
        p.begin_transaction()
        for msg in batch:
            p.produce(sink, msg.value().upper())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 60)
        while True:
            try:
                p.commit_transaction(60)
                return True
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if not error.txn_requires_abort():
            raise
        p.abort_transaction(60)
        rewind(c)
        return False


def read_sink(conf: Mapping[str, Any], sink: str, isolation: str, at_least: int) -> list[bytes]:
    """The sink's values as a new reader at ``isolation`` sees them (reads until nothing
    more comes for a few seconds, past ``at_least``)."""
    reader = consumer(conf, f"reader-{uuid.uuid4().hex[:6]}", **{"isolation.level": isolation})
    reader.subscribe([sink])
    try:
        got = [m.value() for m in consume(reader, at_least, timeout=60)]
        got += [m.value() for m in consume(reader, 10_000, timeout=3)]
        return got
    finally:
        reader.close()


def produce_inputs(conf: Mapping[str, Any], topic: str, partitions: int, count: int) -> list[str]:
    plain = Producer({**conf, "acks": "all"})
    inputs = [f"v{i}" for i in range(count)]
    for i, value in enumerate(inputs):
        plain.produce(topic, value.encode(), partition=i % partitions)
    assert plain.flush(60) == 0
    return inputs


def all_committed(bootstraps: list[str], group: str, topic: str, ends: Mapping[int, int]) -> bool:
    return settled(bootstraps, group, topic, list(ends)) == dict(ends)


def run_kafka_transactions(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Kafka 3.9.1's kafka-transactions tool (TransactionsCommand) against ``bootstrap``."""
    java, lib = require_kafka()
    return subprocess.run(
        [
            java,
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Dlog4j.configuration=file:/dev/null",
            "-cp",
            f"{lib}/*",
            "org.apache.kafka.tools.TransactionsCommand",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def kafka_transactions(bootstrap: str, *args: str) -> str:
    """What the kafka-transactions tool printed, once it succeeded."""
    proc = run_kafka_transactions(bootstrap, *args)
    assert proc.returncode == 0, f"kafka-transactions {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def tool_rows(out: str) -> list[list[str]]:
    """The rows of a table the kafka-transactions tool printed (its header left out), each
    split on whitespace."""
    return [line.split() for line in out.splitlines()[1:] if line.strip()]
