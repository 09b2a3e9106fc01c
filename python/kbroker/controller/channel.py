"""`ControllerChannel`: the active controller's requests to each live broker, in order.

One connection and one queue per broker (Kafka's controller channel): the
controller's orders to a broker are sent one at a time, in the order made,
each retried (after ``retry_backoff_s``) until the broker answers or leaves the
cluster. A broker's answer with an error is logged; the controller acts on
ZooKeeper's view, not on answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbroker.controller.context import LiveBroker
from kbroker.futures import cancel_and_wait
from kbroker.network.client import BrokerConnection, BrokerUnreachable
from kbroker.protocol import ApiKey
from kbroker.security.client import ClientSecurity

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0


@dataclass(slots=True)
class _Outbound:
    api_key: ApiKey
    version: int
    # Built when sent: the request names the broker's epoch as it is then.
    build: Callable[[], Any]
    # Told the broker's answer (on the loop), if anyone listens.
    on_response: Callable[[Any], None] | None = None


class _BrokerQueue:
    def __init__(
        self,
        broker: LiveBroker,
        controller_id: int,
        retry_backoff_s: float,
        security: ClientSecurity | None,
    ) -> None:
        self.broker = broker
        self.connection = BrokerConnection(
            broker.host,
            broker.port,
            str(controller_id),
            reconnect_backoff_s=retry_backoff_s,
            security=security,
        )
        self.queue: asyncio.Queue[_Outbound] = asyncio.Queue()
        self.retry_backoff_s = retry_backoff_s
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            out = await self.queue.get()
            while True:
                try:
                    response = await self.connection.request(
                        out.api_key, out.version, out.build(), REQUEST_TIMEOUT_S
                    )
                    break
                except BrokerUnreachable as exc:
                    log.info(
                        "controller: %s to broker %d failed (%s); retrying",
                        out.api_key.name,
                        self.broker.broker_id,
                        exc,
                    )
                    await asyncio.sleep(self.retry_backoff_s)
            if out.on_response is not None:
                try:
                    out.on_response(response)
                except Exception:
                    log.exception(
                        "controller: handling broker %d's answer failed", self.broker.broker_id
                    )
            code = getattr(response, "error_code", 0)
            if code:
                log.warning(
                    "controller: broker %d answered %s with error %d",
                    self.broker.broker_id,
                    out.api_key.name,
                    code,
                )

    async def close(self) -> None:
        await cancel_and_wait(self.task)
        await self.connection.close()


class ControllerChannel:
    def __init__(
        self,
        controller_id: int,
        retry_backoff_s: float = 0.2,
        security: ClientSecurity | None = None,
    ) -> None:
        self.controller_id = controller_id
        self.retry_backoff_s = retry_backoff_s
        # How the connections to brokers' inter-broker listeners are secured.
        self.security = security
        self._brokers: dict[int, _BrokerQueue] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def add_broker(self, broker: LiveBroker) -> None:
        old = self._brokers.get(broker.broker_id)
        if old is not None and old.broker == broker:
            return
        if old is not None:
            self._close_later(old)
        self._brokers[broker.broker_id] = _BrokerQueue(
            broker, self.controller_id, self.retry_backoff_s, self.security
        )

    def remove_broker(self, broker_id: int) -> None:
        old = self._brokers.pop(broker_id, None)
        if old is not None:
            self._close_later(old)

    def _close_later(self, queue: _BrokerQueue) -> None:
        task = asyncio.ensure_future(queue.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def send(
        self,
        broker_id: int,
        api_key: ApiKey,
        version: int,
        build: Callable[[], Any],
        on_response: Callable[[Any], None] | None = None,
    ) -> None:
        """Queues a request to ``broker_id`` (built when sent); ``on_response`` is told
        the answer. Nothing is sent to a broker without a channel (not live)."""
        queue = self._brokers.get(broker_id)
        if queue is None:
            log.debug("controller: no channel to broker %d for %s", broker_id, api_key.name)
            return
        queue.queue.put_nowait(_Outbound(api_key, version, build, on_response))

    async def close(self) -> None:
        queues = list(self._brokers.values())
        self._brokers.clear()
        for q in queues:
            await q.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
