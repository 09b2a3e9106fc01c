"""This broker's place in the cluster: its ephemeral registration, the cluster id, the base tree.

- `ensure_persistent_paths`: the empty znodes every Kafka 3.9 broker makes
  at start-up (other brokers and tools expect them).
- `get_or_create_cluster_id`: reads /cluster/id, or creates it; when two
  brokers race, the create fails for one and it reads the winner's id.
- `BrokerRegistrar`: creates the ephemeral /brokers/ids/<id> in Kafka's
  format and reports the broker epoch (the znode's czxid). An id held by
  another live session is refused with `BrokerIdInUseError`. After the
  session expires (the znode went with it) it registers again in the new
  session, with a new epoch.
- `generate_broker_id`: Kafka's automatic broker ids (reserved maximum +
  the version of /brokers/seqid, bumped by each request).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kbroker.cluster.errors import (
    BrokerIdInUseError,
    ZkConnectionLossError,
    ZkDataError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkTimeoutError,
)
from kbroker.cluster.zk import SessionEvent, ZkClient
from kbroker.cluster.zk_data import (
    BROKER_SEQUENCE_ID_PATH,
    CLUSTER_ID_PATH,
    PERSISTENT_PATHS,
    BrokerRegistration,
    broker_path,
    decode_broker_registration,
    decode_cluster_id,
    encode_broker_registration,
    encode_cluster_id,
)
from kbroker.metadata.store import new_cluster_id

log = logging.getLogger(__name__)

# Kafka's reserved.broker.max.id default: generated ids start above it.
RESERVED_BROKER_MAX_ID = 1000
# Attempts at one registration when the znode vanishes under us or the connection drops.
_REGISTER_ATTEMPTS = 5


async def ensure_persistent_paths(zk: ZkClient) -> None:
    for path in PERSISTENT_PATHS:
        await zk.ensure_path(path)


async def get_or_create_cluster_id(zk: ZkClient, proposed: str | None = None) -> str:
    """The cluster's id; creates /cluster/id with `proposed` (or a new id) when it is missing."""
    try:
        data, _ = await zk.get(CLUSTER_ID_PATH)
        return decode_cluster_id(data)
    except ZkNoNodeError:
        pass
    cluster_id = proposed or new_cluster_id()
    try:
        await zk.create(CLUSTER_ID_PATH, encode_cluster_id(cluster_id), makepath=True)
        return cluster_id
    except ZkNodeExistsError:  # another broker created it first: theirs stands
        data, _ = await zk.get(CLUSTER_ID_PATH)
        return decode_cluster_id(data)


async def generate_broker_id(zk: ZkClient, reserved_max: int = RESERVED_BROKER_MAX_ID) -> int:
    """A broker id no other call returns: `reserved_max` + the new version of /brokers/seqid."""
    try:
        stat = await zk.set(BROKER_SEQUENCE_ID_PATH, b"")
    except ZkNoNodeError:
        await zk.ensure_path(BROKER_SEQUENCE_ID_PATH)
        stat = await zk.set(BROKER_SEQUENCE_ID_PATH, b"")
    return reserved_max + stat.version


class BrokerRegistrar:
    """Keeps /brokers/ids/<id> registered for this broker while the client lives.

    `on_registered(epoch)` runs on the loop after each registration (the first
    and each one after a session expiry); `on_failed(error)` when registering
    again after an expiry failed (for example the id was taken meanwhile).
    """

    def __init__(
        self,
        zk: ZkClient,
        registration: BrokerRegistration,
        on_registered: Callable[[int], None] | None = None,
        on_failed: Callable[[Exception], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registration = registration
        self.path = broker_path(registration.broker_id)
        self._zk = zk
        self._on_registered = on_registered
        self._on_failed = on_failed
        self._clock = clock
        self._epoch: int | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def broker_epoch(self) -> int | None:
        """The czxid of this session's registration; None while not registered."""
        return self._epoch

    async def register(self) -> int:
        """Registers (once) and keeps registering after session expiries; returns the epoch."""
        epoch = await self._register_once()
        if self._remove_listener is None:
            self._remove_listener = self._zk.add_session_listener(self._on_session)
        return epoch

    async def deregister(self) -> None:
        """Stops re-registering and deletes the znode if this session owns it."""
        self.close()
        try:
            _, stat = await self._zk.get(self.path)
            if stat.ephemeral_owner == self._zk.session_id:
                await self._zk.delete(self.path, stat.version)
        except ZkNoNodeError:
            pass
        self._epoch = None

    def close(self) -> None:
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            self._epoch = None
        elif event is SessionEvent.NEW_SESSION and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        try:
            await self._register_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("broker %d could not register again: %s", self.registration.broker_id, exc)
            if self._on_failed is not None:
                self._on_failed(exc)

    async def _register_once(self) -> int:
        data = encode_broker_registration(self.registration, int(self._clock() * 1000))
        for attempt in range(_REGISTER_ATTEMPTS):
            try:
                try:
                    _, stat = await self._zk.create(self.path, data, ephemeral=True, makepath=True)
                except ZkNodeExistsError:
                    try:
                        existing, stat = await self._zk.get(self.path)
                    except ZkNoNodeError:
                        continue  # went away between the two calls: create again
                    if stat.ephemeral_owner != self._zk.session_id:
                        raise self._in_use(existing, stat.ephemeral_owner) from None
                    # Ours: an earlier attempt's answer was lost with the connection.
            except (ZkConnectionLossError, ZkTimeoutError) as exc:
                if attempt + 1 == _REGISTER_ATTEMPTS:
                    raise
                log.info("registering broker %d: %s; retrying", self.registration.broker_id, exc)
                await self._zk.wait_connected(self._zk.settings.connection_timeout_s)
                continue
            self._epoch = stat.czxid
            log.info(
                "registered broker %d at %s, broker epoch %d",
                self.registration.broker_id,
                self.path,
                stat.czxid,
            )
            if self._on_registered is not None:
                self._on_registered(stat.czxid)
            return stat.czxid
        raise ZkNodeExistsError(f"{self.path} kept changing while registering", self.path)

    def _in_use(self, existing: bytes, owner: int) -> BrokerIdInUseError:
        broker_id = self.registration.broker_id
        try:
            where = ", ".join(
                e.connection_string
                for e in decode_broker_registration(broker_id, existing).endpoints
            )
        except ZkDataError:
            where = "unreadable registration"
        return BrokerIdInUseError(
            f"broker id {broker_id} is already registered in ZooKeeper at {self.path} "
            f"({where}, session 0x{owner:x}): another running broker uses broker.id={broker_id}, "
            "or this broker's previous session has not expired yet (it does within "
            "zookeeper.session.timeout.ms). Give each broker its own broker.id."
        )
