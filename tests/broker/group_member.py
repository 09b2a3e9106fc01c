"""A consumer-group member in its own process, for the group tests.

Runs one real client (confluent-kafka, kafka-python or aiokafka) subscribed
to a topic, commits after every batch and reports on stdout, one JSON object
per line: {"event": "assigned"|"revoked", "partitions": [...]},
{"event": "records", "records": [[partition, offset], ...]}, and
{"event": "closed"} after a clean shutdown (SIGTERM). SIGKILL is the crash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import Any

stopping = False


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def on_sigterm(*_: object) -> None:
    global stopping
    stopping = True


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": max(args.session_ms // 10, 100),
        "max.poll.interval.ms": args.max_poll_ms,
        "partition.assignment.strategy": args.strategy,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)

    def assigned(_c: Any, parts: list[Any]) -> None:
        emit(event="assigned", partitions=sorted(p.partition for p in parts))

    def revoked(_c: Any, parts: list[Any]) -> None:
        emit(event="revoked", partitions=sorted(p.partition for p in parts))

    consumer.subscribe([args.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    while not stopping:
        msgs = consumer.consume(100, 0.2)
        got = [[m.partition(), m.offset()] for m in msgs if m.error() is None]
        if got:
            try:
                consumer.commit(asynchronous=False)
            except Exception as exc:  # a commit refused during a rebalance: redelivered later
                emit(event="commit_failed", error=str(exc))
            emit(event="records", records=got)
    consumer.close()
    emit(event="closed")


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(event="assigned", partitions=sorted(p.partition for p in assigned))

        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(event="revoked", partitions=sorted(p.partition for p in revoked))

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=max(args.session_ms // 10, 100),
        max_poll_interval_ms=args.max_poll_ms,
    )
    consumer.subscribe([args.topic], listener=Listener())
    while not stopping:
        batches = consumer.poll(timeout_ms=200)
        got = [[r.partition, r.offset] for records in batches.values() for r in records]
        if got:
            try:
                consumer.commit()
            except Exception as exc:
                emit(event="commit_failed", error=str(exc))
            emit(event="records", records=got)
    consumer.close()
    emit(event="closed")


def run_aiokafka(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit(event="assigned", partitions=sorted(p.partition for p in assigned))

        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit(event="revoked", partitions=sorted(p.partition for p in revoked))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            client_id=args.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=max(args.session_ms // 10, 100),
            max_poll_interval_ms=args.max_poll_ms,
            rebalance_timeout_ms=args.max_poll_ms,
        )
        consumer.subscribe([args.topic], listener=Listener())
        await consumer.start()
        try:
            while not stopping:
                batches = await consumer.getmany(timeout_ms=200)
                got = [[r.partition, r.offset] for records in batches.values() for r in records]
                if got:
                    try:
                        await consumer.commit()
                    except Exception as exc:
                        emit(event="commit_failed", error=str(exc))
                    emit(event="records", records=got)
        finally:
            await consumer.stop()
        emit(event="closed")

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--client", choices=["confluent", "kafka-python", "aiokafka"], default="confluent"
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", default=f"member-{time.monotonic_ns()}")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--strategy", default="range,roundrobin")
    parser.add_argument("--session-ms", type=int, default=3000)
    parser.add_argument("--max-poll-ms", type=int, default=10000)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    emit(event="started")
    {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}[
        args.client
    ](args)


if __name__ == "__main__":
    main()
