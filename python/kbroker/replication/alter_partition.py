"""How a partition leader's ISR changes reach the controller (AlterPartition, Kafka 2.7+).

A leader asks (`IsrChannel.submit`); the channel sends what is queued to the
controller in one AlterPartition request at a time, and hands each
partition's answer back (`Partition.isr_change_answered`). A request that
fails as a whole (the controller moved or is unreachable, NOT_CONTROLLER,
STALE_BROKER_EPOCH while this broker re-registers) is sent again after
``retry_backoff_s`` to whichever broker is the controller then; a change
asked again meanwhile replaces the queued one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kbroker.futures import cancel_and_wait
from kbroker.log import TopicPartition
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.model import PartitionState
from kbroker.network.client import BrokerConnection, BrokerUnreachable
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.errors import to_error_code
from kbroker.protocol.messages.inter_broker import AlterPartitionRequest
from kbroker.security.client import InterBrokerLink

if TYPE_CHECKING:
    from kbroker.replication.partition import Partition

log = logging.getLogger(__name__)

# Topics by name (v2+ names them by id); ISR members without broker epochs (v3).
ALTER_PARTITION_VERSION = 1


class IsrChannel:
    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int | None],
        cache: MetadataCache,
        request_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
        link: InterBrokerLink | None = None,
    ) -> None:
        self.broker_id = broker_id
        # The controller's listener this broker talks to, and how it is secured.
        self.link = link or InterBrokerLink()
        self.broker_epoch = broker_epoch
        self.cache = cache
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        # The changes not sent yet, in the order asked.
        self._queued: dict[TopicPartition, _Change] = {}
        self._sender: asyncio.Task[None] | None = None
        self._conn: BrokerConnection | None = None
        self._conn_to: int | None = None
        self._closed = False
        self._closing: set[asyncio.Future[None]] = set()

    def submit(self, partition: Partition, isr: list[int]) -> None:
        """Asks the controller for ``isr`` as the ISR of ``partition`` (which leads it)."""
        if self._closed:
            return
        state = partition.state
        self._queued[partition.tp] = _Change(
            partition, list(isr), state.leader_epoch, state.version
        )
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send_all())

    def controller_changed(self) -> None:
        """Another broker is the controller: a request in flight to the old one is sent
        again to it (the old one may never answer)."""
        if self._conn is not None and self._conn_to != self.cache.controller_id:
            self._drop_connection()

    def _drop_connection(self) -> None:
        old, self._conn = self._conn, None
        if old is not None:
            task = asyncio.ensure_future(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self._closed = True
        if self._sender is not None:
            await cancel_and_wait(self._sender)
        if self._conn is not None:
            await self._conn.close()

    async def _send_all(self) -> None:
        while self._queued and not self._closed:
            batch, self._queued = self._queued, {}
            try:
                answers = await self._send(batch)
            except (BrokerUnreachable, _Retry) as exc:
                log.info("ISR changes of %d partition(s) not sent yet: %s", len(batch), exc)
                for tp, item in batch.items():
                    self._queued.setdefault(tp, item)
                await asyncio.sleep(self.retry_backoff_s)
                continue
            for tp, change in batch.items():
                if tp in self._queued:
                    continue  # asked again since: the newer change decides
                error, state = answers.get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, None))
                change.partition.isr_change_answered(error, state, change.isr, change.leader_epoch)

    def _connection(self) -> BrokerConnection:
        controller_id = self.cache.controller_id
        controller = None if controller_id is None else self.cache.broker(controller_id)
        address = None if controller is None else controller.address(self.link.listener)
        if address is None:
            raise _Retry("no controller is known")
        if (
            self._conn is None
            or self._conn_to != controller_id
            or ((self._conn.host, self._conn.port) != address)
        ):
            self._drop_connection()
            self._conn = BrokerConnection(
                *address,
                f"broker-{self.broker_id}-alter-partition",
                security=self.link.security,
            )
            self._conn_to = controller_id
        return self._conn

    async def _send(
        self, batch: dict[TopicPartition, _Change]
    ) -> dict[TopicPartition, tuple[ErrorCode, PartitionState | None]]:
        epoch = self.broker_epoch()
        if epoch is None:
            raise _Retry("this broker is not registered")
        topics: dict[str, list[Any]] = {}
        for tp, change in batch.items():
            topics.setdefault(tp.topic, []).append(
                AlterPartitionRequest.Topic.Partition(
                    partition_index=tp.partition,
                    leader_epoch=change.leader_epoch,
                    new_isr=change.isr,
                    leader_recovery_state=0,
                    partition_epoch=change.partition_epoch,
                )
            )
        request = AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=epoch,
            topics=[
                AlterPartitionRequest.Topic(topic_name=name, partitions=parts)
                for name, parts in topics.items()
            ],
        )
        response = await self._connection().request(
            ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, request, self.request_timeout_s
        )
        if response.error_code != ErrorCode.NONE:
            raise _Retry(f"the controller answered {to_error_code(response.error_code).name}")
        answers: dict[TopicPartition, tuple[ErrorCode, PartitionState | None]] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic_name, p.partition_index)
                item = batch.get(tp)
                if item is None:
                    continue
                code = to_error_code(p.error_code)
                state = None
                if code == ErrorCode.NONE:
                    current = item.partition.state
                    state = PartitionState(
                        replicas=list(current.replicas),
                        leader=p.leader_id,
                        leader_epoch=p.leader_epoch,
                        isr=list(p.isr),
                        controller_epoch=current.controller_epoch,
                        version=p.partition_epoch,
                    )
                answers[tp] = (code, state)
        return answers


@dataclass(frozen=True, slots=True)
class _Change:
    """An ISR change as asked: of which leadership, from which partition state."""

    partition: Partition
    isr: list[int]
    leader_epoch: int
    partition_epoch: int


class _Retry(Exception):
    """The whole request is to be sent again later."""
