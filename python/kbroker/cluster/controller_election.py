"""Controller election and fencing on ZooKeeper, as Kafka 3.9 does them (no controller logic).

- `try_become_controller`: one multi creates the ephemeral /controller and
  bumps /controller_epoch from the version just read, so at most one broker
  wins each epoch. The winner gets a `ControllerEpoch`: the epoch number and
  /controller_epoch's zkVersion after the bump.
- `fenced_multi`: runs a controller's writes in a multi that first checks
  /controller_epoch still has that zkVersion. Once another broker has been
  elected the check fails and the writes are refused with
  `ControllerMovedError`: a deposed controller cannot write.
- `ControllerWatcher`: tells a callback, on the loop, who the controller is
  now, after every change of /controller (and after reconnections).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbroker.cluster.errors import (
    ControllerMovedError,
    ZkBadVersionError,
    ZkError,
    ZkMultiError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotStartedError,
)
from kbroker.cluster.zk import (
    CheckOp,
    CreateOp,
    Op,
    OpResult,
    PersistentWatch,
    SetDataOp,
    Stat,
    WatchEvent,
    ZkClient,
)
from kbroker.cluster.zk_data import (
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    ControllerRegistration,
    decode_controller,
    decode_controller_epoch,
    encode_controller,
    encode_controller_epoch,
)

log = logging.getLogger(__name__)

# Kafka's KafkaController.InitialControllerEpoch: the first elected controller gets epoch 1.
INITIAL_CONTROLLER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """An epoch and the zkVersion of /controller_epoch that fences writes made in it."""

    epoch: int
    zk_version: int


async def read_controller(zk: ZkClient) -> tuple[ControllerRegistration, Stat] | None:
    """The current controller and its znode's stat; None when there is none."""
    try:
        data, stat = await zk.get(CONTROLLER_PATH)
    except ZkNoNodeError:
        return None
    return decode_controller(data), stat


async def read_controller_epoch(zk: ZkClient) -> ControllerEpoch | None:
    try:
        data, stat = await zk.get(CONTROLLER_EPOCH_PATH)
    except ZkNoNodeError:
        return None
    return ControllerEpoch(decode_controller_epoch(data), stat.version)


async def _current_epoch(zk: ZkClient) -> ControllerEpoch:
    current = await read_controller_epoch(zk)
    if current is not None:
        return current
    try:
        _, stat = await zk.create(
            CONTROLLER_EPOCH_PATH, encode_controller_epoch(INITIAL_CONTROLLER_EPOCH)
        )
        return ControllerEpoch(INITIAL_CONTROLLER_EPOCH, stat.version)
    except ZkNodeExistsError:
        current = await read_controller_epoch(zk)
        if current is None:
            raise ZkError(
                f"{CONTROLLER_EPOCH_PATH} vanished while electing", CONTROLLER_EPOCH_PATH
            ) from None
        return current


async def try_become_controller(
    zk: ZkClient, broker_id: int, clock: Callable[[], float] = time.time
) -> ControllerEpoch | None:
    """This broker's epoch if it is now the controller; None if another broker is."""
    current = await _current_epoch(zk)
    epoch = current.epoch + 1
    registration = encode_controller(ControllerRegistration(broker_id), int(clock() * 1000))
    try:
        results = await zk.multi(
            [
                CreateOp(CONTROLLER_PATH, registration, ephemeral=True),
                SetDataOp(
                    CONTROLLER_EPOCH_PATH, encode_controller_epoch(epoch), current.zk_version
                ),
            ]
        )
    except ZkMultiError as exc:
        if not isinstance(exc.cause, ZkNodeExistsError | ZkBadVersionError):
            raise
        # Lost, unless an earlier try of this very election won (its answer lost).
        controller = await read_controller(zk)
        now = await read_controller_epoch(zk)
        if (
            controller is not None
            and controller[1].ephemeral_owner == zk.session_id
            and now is not None
            and now.epoch == epoch
        ):
            return now
        return None
    stat = results[1]
    assert isinstance(stat, Stat)
    log.info("broker %d elected controller, epoch %d", broker_id, epoch)
    return ControllerEpoch(epoch, stat.version)


async def resign(zk: ZkClient) -> bool:
    """Deletes /controller if this session holds it; True if it did."""
    try:
        _, stat = await zk.get(CONTROLLER_PATH)
        if stat.ephemeral_owner != zk.session_id:
            return False
        await zk.delete(CONTROLLER_PATH, stat.version)
        return True
    except (ZkNoNodeError, ZkBadVersionError):
        return False


async def fenced_multi(zk: ZkClient, epoch: ControllerEpoch, ops: Sequence[Op]) -> list[OpResult]:
    """`ops` as one multi, refused with ControllerMovedError once `epoch` is not the latest.

    A ZkMultiError for a failure of `ops` themselves names its index in `ops`.
    """
    check = CheckOp(CONTROLLER_EPOCH_PATH, epoch.zk_version)
    try:
        results = await zk.multi([check, *ops])
    except ZkMultiError as exc:
        if exc.failed == 0 and isinstance(exc.cause, ZkBadVersionError):
            raise ControllerMovedError(
                f"controller epoch {epoch.epoch} is over: {CONTROLLER_EPOCH_PATH} is no longer at "
                f"zkVersion {epoch.zk_version}, another controller was elected"
            ) from None
        if exc.failed == 0:
            raise
        raise ZkMultiError(str(exc), exc.failed - 1, exc.cause) from None
    return results[1:]


class ControllerWatcher:
    """Calls `on_change(broker id or None)` on the loop whenever the controller may have changed.

    Reads are serialized: each call reports the controller as read after the
    latest event, so callbacks arrive in order and the last one is current.
    """

    def __init__(self, zk: ZkClient, on_change: Callable[[int | None], None]) -> None:
        self._zk = zk
        self._on_change = on_change
        self._watch: PersistentWatch | None = None
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._watch = await self._zk.watch(CONTROLLER_PATH, self._on_event)
        self._dirty.set()  # report the controller as it is now
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._task is not None:
            self._task.cancel()

    def _on_event(self, event: WatchEvent) -> None:
        self._dirty.set()

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                found = await read_controller(self._zk)
            except ZkNotStartedError:
                return
            except ZkError as exc:
                log.info("reading %s: %s; will retry", CONTROLLER_PATH, exc)
                self._dirty.set()
                await asyncio.sleep(0.1)
                continue
            try:
                self._on_change(None if found is None else found[0].broker_id)
            except Exception:
                log.exception("controller change callback failed")
