"""kbroker's controller driving real Apache Kafka 3.9.1 brokers (ZooKeeper mode), for the
controller's tests: the controller alone or a kbroker broker hosting it, each on an event
loop of its own thread (the test's clients are blocking), Kafka brokers on the same chroot,
and the probes these tests share.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from kbroker.broker import Broker
from kbroker.cluster import zk_data as zd
from kbroker.cluster.controller_election import try_become_controller
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.config import BrokerConfig
from kbroker.controller.controller import Controller, ControllerSettings
from kbroker.handlers import Dispatcher
from tests.cluster.kafka_zk import KafkaZkBroker, kafka_zk_broker, require_kafka
from tests.helpers import free_port, wait_for
from tests.zookeeper import zk_session

T = TypeVar("T")
OUR_ID = 100  # the kbroker controller's broker id: no Kafka broker of these tests has it


class LoopThread:
    """An asyncio loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def end(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class ControllerThread(LoopThread):
    """kbroker's `Controller` alone (no listener), elected on ``connect`` before anyone."""

    def __init__(self, connect: str) -> None:
        super().__init__()
        self.zk = ZkClient(ZkSettings.parse(connect, session_timeout_ms=6000))
        self.controller: Controller | None = None

    def elect(self, settings: ControllerSettings | None = None) -> int:
        """Wins the election and makes the controller (not started): the epoch."""

        async def elect() -> int:
            await self.zk.start()
            epoch = await try_become_controller(self.zk, OUR_ID)
            assert epoch is not None, "another controller was elected first"
            self.controller = Controller(self.zk, OUR_ID, epoch, settings=settings)
            return epoch.epoch

        return self.call(elect())

    def start(self, settings: ControllerSettings | None = None) -> int:
        """Elected and started: the epoch."""
        epoch = self.elect(settings)
        assert self.controller is not None
        self.call(self.controller.start())
        return epoch

    def close(self) -> None:
        async def stop() -> None:
            if self.controller is not None:
                await self.controller.stop()
            await self.zk.stop()

        with contextlib.suppress(Exception):
            self.call(stop(), 30)
        self.end()


class ControllerBroker(LoopThread):
    """A kbroker broker in cluster mode, with a listener, that becomes the controller."""

    def __init__(self, connect: str, data: Path) -> None:
        super().__init__()
        self.port = free_port()
        self.config = BrokerConfig.from_strings(
            [
                ("broker.id", str(OUR_ID)),
                ("zookeeper.connect", connect),
                ("zookeeper.session.timeout.ms", "6000"),
                ("log.dirs", str(data)),
                ("listeners", f"PLAINTEXT://127.0.0.1:{self.port}"),
                ("controlled.shutdown.enable", "false"),
                ("auto.leader.rebalance.enable", "false"),
            ]
        )
        self.broker: Broker | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Controller:
        async def start() -> None:
            self.broker = Broker(self.config)
            await self.broker.start(Dispatcher(self.broker).dispatch)

        self.call(start())
        controller = wait_for(lambda: self.controller, "our broker to be the controller", 20)
        assert controller is not None
        return controller

    @property
    def controller(self) -> Controller | None:
        cluster = None if self.broker is None else self.broker.cluster
        return None if cluster is None else cluster.controller

    def close(self) -> None:
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.call(self.broker.stop(), 30)
        self.end()


@contextlib.contextmanager
def chroot_client(zk_connect: str, name: str) -> Iterator[tuple[str, KazooClient]]:
    """A fresh chroot named after ``name`` and a client on it: (chroot, client)."""
    require_kafka()
    chroot = f"/{name}-{uuid.uuid4().hex[:8]}"
    with zk_session(zk_connect + chroot) as zk:
        yield chroot, zk


@contextlib.contextmanager
def kafka_brokers(
    zk_connect: str,
    chroot: str,
    root: Path,
    settings: Callable[[int], Mapping[str, str]],
    ids: tuple[int, ...] = (1, 2),
) -> Iterator[list[KafkaZkBroker]]:
    """Kafka brokers ``ids`` on ``chroot``, each with ``settings(id)``, started in turn and
    killed at the end."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                kafka_zk_broker(zk_connect, chroot, root / f"b{i}", i, settings=settings(i))
            )
            for i in ids
        ]


def state_of(zk: KazooClient, topic: str, partition: int) -> zd.LeaderAndIsr:
    data, stat = zk.get(zd.partition_state_path(topic, partition))
    return zd.decode_partition_state(data, stat.version)


def leader_of(admin: AdminClient, topic: str, partition: int) -> int:
    """The partition's leader as the broker's metadata says, -1 while it has none."""
    md = admin.list_topics(topic, timeout=10)
    known = md.topics.get(topic)
    part = None if known is None else known.partitions.get(partition)
    return -1 if part is None else part.leader


def produce(bootstrap: str, topic: str, partition: int, n: int, tag: str) -> int:
    """Records written with acks=all that were acknowledged."""
    delivered: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    for i in range(n):
        p.produce(topic, f"{tag}-{i}".encode(), partition=partition,
                  on_delivery=lambda err, msg: delivered.append(err))  # fmt: skip
    p.flush(30)
    return sum(1 for err in delivered if err is None)


def consume(bootstrap: str, topic: str, partitions: int, expected: int) -> int:
    """Records read from the start of every partition (assigned: no group coordinator,
    which may live on a dead broker)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})  # fmt: skip
    c.assign([KTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
    finally:
        c.close()
    return seen
