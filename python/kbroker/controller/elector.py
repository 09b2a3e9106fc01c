"""`ControllerElector`: runs in every broker of a cluster; the one that wins the election
through ``/controller`` runs the `Controller` until it loses that place.

The elector follows ``/controller``: when it is vacant, it tries to take it
(`try_become_controller`, which also moves the controller epoch on). It stops
its controller when another broker holds the place, when its ZooKeeper session
expires (its ephemeral ``/controller`` is gone, and every write it would make is
refused by the epoch check anyway), or when the controller finds itself fenced.
Stopping the elector resigns: ``/controller`` is deleted so another broker can
take over at once instead of after the session timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kbroker.cluster.controller_election import (
    ControllerEpoch,
    ControllerWatcher,
    resign,
    try_become_controller,
)
from kbroker.cluster.errors import ZkError
from kbroker.cluster.zk import SessionEvent, ZkClient
from kbroker.controller.controller import Controller

log = logging.getLogger(__name__)

ControllerFactory = Callable[[ControllerEpoch], Controller]


class ControllerElector:
    def __init__(self, zk: ZkClient, broker_id: int, make_controller: ControllerFactory) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.make_controller = make_controller
        self.controller: Controller | None = None
        self._watcher = ControllerWatcher(zk, self._on_change)
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._remove_listener: Callable[[], None] | None = None
        self._stopped = False
        # Times this broker became the controller, and the (clean, unclean) leader
        # elections of its controllers that stopped.
        self.terms = 0
        self._past_elections = (0, 0)

    @property
    def is_controller(self) -> bool:
        return self.controller is not None

    async def start(self) -> None:
        self._remove_listener = self.zk.add_session_listener(self._on_session)
        await self._watcher.start()

    async def stop(self) -> None:
        """Stops the controller (if this broker runs it) and gives up the place."""
        self._stopped = True
        self._watcher.stop()
        if self._remove_listener is not None:
            self._remove_listener()
        for task in list(self._tasks):
            task.cancel()
        async with self._lock:
            was_controller = self.controller is not None
            await self._stop_controller("this broker is stopping")
            if was_controller:
                with contextlib.suppress(ZkError):
                    await resign(self.zk)

    # -- events ---------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_change(self, current: int | None) -> None:
        if not self._stopped:
            self._spawn(self._follow(current))

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED and not self._stopped:
            # The ephemeral /controller went with the session.
            self._spawn(self._stop_controller_locked("its ZooKeeper session expired"))

    async def _follow(self, current: int | None) -> None:
        async with self._lock:
            if self._stopped:
                return
            if current is not None and current != self.broker_id:
                await self._stop_controller(f"broker {current} is the controller now")
                return
            if current == self.broker_id or self.controller is not None:
                return
            try:
                epoch = await try_become_controller(self.zk, self.broker_id)
            except ZkError as exc:
                log.info("broker %d: controller election failed (%s)", self.broker_id, exc)
                return
            if epoch is None:
                return
            controller = self.make_controller(epoch)
            try:
                await controller.start()
            except ZkError as exc:
                # Give the place up: this broker (at its next event) or another takes it.
                log.warning("broker %d: starting the controller failed (%s)", self.broker_id, exc)
                await controller.stop()
                with contextlib.suppress(ZkError):
                    await resign(self.zk)
                return
            self.controller = controller
            self.terms += 1
            self._spawn(self._watch_fencing(controller))

    async def _watch_fencing(self, controller: Controller) -> None:
        await controller.moved.wait()
        async with self._lock:
            if self.controller is controller:
                await self._stop_controller("a newer controller fenced it")

    async def _stop_controller_locked(self, why: str) -> None:
        async with self._lock:
            await self._stop_controller(why)

    def leader_elections(self) -> tuple[int, int]:
        """(leader elections, unclean ones) by this broker's controllers so far."""
        done, unclean = self._past_elections
        controller = self.controller
        if controller is not None:
            done += controller.ctx.leader_elections
            unclean += controller.ctx.unclean_leader_elections
        return done, unclean

    async def _stop_controller(self, why: str) -> None:
        controller, self.controller = self.controller, None
        if controller is None:
            return
        done, unclean = self._past_elections
        self._past_elections = (
            done + controller.ctx.leader_elections,
            unclean + controller.ctx.unclean_leader_elections,
        )
        log.info("broker %d: no longer the controller: %s", self.broker_id, why)
        await controller.stop()
