"""Broker registration, cluster id, persistent paths and broker ids, on a real ZooKeeper."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kbroker.cluster.errors import BrokerIdInUseError
from kbroker.cluster.registration import (
    BrokerRegistrar,
    ensure_persistent_paths,
    generate_broker_id,
    get_or_create_cluster_id,
)
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.cluster.zk_data import (
    PERSISTENT_PATHS,
    BrokerRegistration,
    EndPoint,
    decode_broker_registration,
)
from tests.cluster.conftest import expire_session, run, until
from tests.zookeeper import ZooKeeperServer


def registration(broker_id: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id,
        (
            EndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),
            EndPoint("INTERNAL", "127.0.0.1", port + 1, "SASL_PLAINTEXT"),
        ),
        rack="r1",
    )


def test_registration_is_kafkas_ephemeral_znode_and_its_czxid_the_epoch(
    zk_settings: ZkSettings,
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            await ensure_persistent_paths(zk)
            registrar = BrokerRegistrar(zk, registration(4), clock=lambda: 1234.5)
            epoch = await registrar.register()
            data, stat = await zk.get("/brokers/ids/4")
            assert epoch == stat.czxid == registrar.broker_epoch
            assert stat.ephemeral_owner == zk.session_id
            expected = dataclasses.replace(registration(4), timestamp_ms=1234500)
            assert decode_broker_registration(4, data) == expected
            await registrar.deregister()
            assert await zk.exists("/brokers/ids/4") is None

    run(main())


def test_a_broker_id_held_by_a_live_broker_is_refused(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as first, ZkClient(zk_settings) as second:
            epoch = await BrokerRegistrar(first, registration(1, 9092)).register()
            with pytest.raises(BrokerIdInUseError) as refused:
                await BrokerRegistrar(second, registration(1, 9192)).register()
            message = str(refused.value)
            assert "broker id 1 is already registered" in message
            assert "PLAINTEXT://127.0.0.1:9092" in message and "broker.id" in message
            data, stat = await second.get("/brokers/ids/1")
            assert stat.czxid == epoch and stat.ephemeral_owner == first.session_id
            assert decode_broker_registration(1, data).endpoints[0].port == 9092
            # Once the first broker is gone, the id is free: a new, later epoch.
            await first.stop()
            later = await BrokerRegistrar(second, registration(1, 9192)).register()
            assert later > epoch

    run(main())


def test_registers_again_in_a_new_session_after_expiry(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            epochs: list[int] = []
            registrar = BrokerRegistrar(zk, registration(2), on_registered=epochs.append)
            first = await registrar.register()
            await asyncio.to_thread(expire_session, zk, zookeeper.connect)
            await until(lambda: len(epochs) == 2, "registration in the new session", 20)
            _, stat = await zk.get("/brokers/ids/2")
            assert epochs == [first, stat.czxid] and stat.czxid > first
            assert stat.ephemeral_owner == zk.session_id
            assert registrar.broker_epoch == stat.czxid
            registrar.close()

    run(main())


def test_cluster_id_is_created_once_even_when_brokers_race(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        clients = [ZkClient(zk_settings) for _ in range(4)]
        for c in clients:
            await c.start()
        try:
            ids = await asyncio.gather(
                *(get_or_create_cluster_id(c, f"proposed-{i}") for i, c in enumerate(clients))
            )
            assert len(set(ids)) == 1 and ids[0].startswith("proposed-")
            assert await get_or_create_cluster_id(clients[0]) == ids[0]
        finally:
            for c in clients:
                await c.stop()

    run(main())


def test_persistent_paths_and_generated_broker_ids(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            await ensure_persistent_paths(zk)
            await ensure_persistent_paths(zk)  # again: nothing to do, no error
            for path in PERSISTENT_PATHS:
                assert await zk.exists(path) is not None, path
            assert "/config/brokers" in PERSISTENT_PATHS and "/brokers/seqid" in PERSISTENT_PATHS
            generated = await asyncio.gather(*(generate_broker_id(zk) for _ in range(5)))
            assert sorted(generated) == [1001, 1002, 1003, 1004, 1005]

    run(main())
