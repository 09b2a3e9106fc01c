"""Dynamic configs in ZooKeeper (kbroker.cluster.configs), on a real ZooKeeper and against
a real Apache Kafka 3.9.1 broker in ZooKeeper mode (the tests marked ``kafka``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kbroker.cluster.configs import (
    ConfigChangeWatcher,
    read_all_broker_configs,
    read_all_topic_configs,
    read_broker_configs,
    read_topic_configs,
    set_broker_configs,
    set_topic_configs,
)
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.cluster.zk_data import CONFIG_CHANGES_PATH
from tests.cluster.conftest import expire_session, run, until
from tests.cluster.kafka_zk import kafka_zk_broker, require_kafka
from tests.helpers import wait_for
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(90)

Report = tuple[str, object, dict[str, str]]


class Recorder:
    """What a watcher reported, in order: ("topic", name, configs) or ("broker", id, configs)."""

    def __init__(self) -> None:
        self.events: list[Report] = []

    def topic(self, name: str, configs: dict[str, str]) -> None:
        self.events.append(("topic", name, configs))

    def broker(self, broker_id: int | None, configs: dict[str, str]) -> None:
        self.events.append(("broker", broker_id, configs))

    def watcher(self, zk: ZkClient, change_expiration_ms: int = 900_000) -> ConfigChangeWatcher:
        return ConfigChangeWatcher(
            zk, self.topic, self.broker, change_expiration_ms=change_expiration_ms
        )

    def has(self, report: Report) -> bool:
        return report in self.events


async def changes(zk: ZkClient) -> list[str]:
    return await zk.get_children(CONFIG_CHANGES_PATH)


async def json_at(zk: ZkClient, path: str) -> object:
    data, _ = await zk.get(path)
    return json.loads(data)


def test_writes_are_kafkas_znodes_and_read_back(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            assert await read_topic_configs(zk, "t1") == {}
            assert await read_all_topic_configs(zk) == {}
            first = await set_topic_configs(zk, "t1", {"retention.ms": "1000"})
            second = await set_topic_configs(
                zk, "t1", {"retention.ms": "2000", "cleanup.policy": "compact"}
            )
            assert first is not None and second is not None and second > first
            assert await json_at(zk, "/config/topics/t1") == {
                "version": 1,
                "config": {"cleanup.policy": "compact", "retention.ms": "2000"},
            }
            names = await changes(zk)
            assert names == [f"config_change_{first:010d}", f"config_change_{second:010d}"]
            assert await json_at(zk, f"{CONFIG_CHANGES_PATH}/{names[1]}") == {
                "version": 2,
                "entity_path": "topics/t1",
            }
            # A topic being created: configs only, no notification.
            assert await set_topic_configs(zk, "t2", {"segment.ms": "5"}, notify=False) is None
            assert len(await changes(zk)) == 2

            default = await set_broker_configs(zk, None, {"log.cleaner.threads": "3"})
            await set_broker_configs(zk, 2, {"log.cleaner.threads": "2"})
            assert await json_at(zk, f"{CONFIG_CHANGES_PATH}/config_change_{default:010d}") == {
                "version": 2,
                "entity_path": "brokers/<default>",
            }
            assert await json_at(zk, "/config/brokers/2") == {
                "version": 1,
                "config": {"log.cleaner.threads": "2"},
            }
            assert await read_topic_configs(zk, "t1") == {
                "retention.ms": "2000",
                "cleanup.policy": "compact",
            }
            assert await read_all_topic_configs(zk) == {
                "t1": {"retention.ms": "2000", "cleanup.policy": "compact"},
                "t2": {"segment.ms": "5"},
            }
            assert await read_broker_configs(zk, None) == {"log.cleaner.threads": "3"}
            assert await read_broker_configs(zk, 5) == {}
            # Kafka's delete-config leaves an empty set behind.
            await set_broker_configs(zk, 2, {})
            assert await read_all_broker_configs(zk) == {
                None: {"log.cleaner.threads": "3"},
                2: {},
            }
            with pytest.raises(TypeError):
                await set_topic_configs(zk, "t1", {"retention.ms": 5})  # type: ignore[dict-item]

    run(main())


def test_every_watcher_hears_each_change_in_order(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk1, ZkClient(zk_settings) as zk2:
            await set_topic_configs(zk1, "old", {"retention.ms": "1"})
            r1, r2 = Recorder(), Recorder()
            w1, w2 = r1.watcher(zk1), r2.watcher(zk2)
            await w1.start()
            await w2.start()
            try:
                await set_topic_configs(zk2, "a", {"retention.ms": "10"})
                await set_topic_configs(zk1, "b", {"retention.ms": "20"})
                await set_broker_configs(zk1, None, {"log.cleaner.threads": "2"})
                await set_broker_configs(zk2, 1, {"log.cleaner.threads": "4"})
                last = await set_topic_configs(zk1, "a", {"retention.ms": "30"})
                await until(lambda: len(r1.events) >= 5 and len(r2.events) >= 5, "5 changes")
                for w in (w1, w2):
                    assert w.last_change == last
                for r in (r1, r2):
                    # Each notification's configs are read when it is processed, so the first
                    # change of "a" may already show the second one's value.
                    assert [(kind, entity) for kind, entity, _ in r.events] == [
                        ("topic", "a"),
                        ("topic", "b"),
                        ("broker", None),
                        ("broker", 1),
                        ("topic", "a"),
                    ]
                    assert r.events[1:] == [
                        ("topic", "b", {"retention.ms": "20"}),
                        ("broker", None, {"log.cleaner.threads": "2"}),
                        ("broker", 1, {"log.cleaner.threads": "4"}),
                        ("topic", "a", {"retention.ms": "30"}),
                    ]
                await asyncio.sleep(0.2)
                assert len(r1.events) == len(r2.events) == 5  # "old" was there before start
            finally:
                await w1.stop()
                await w2.stop()

    run(main())


def test_report_existing_reports_every_config_at_start(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            await set_topic_configs(zk, "t", {"retention.ms": "1"})
            await set_broker_configs(zk, None, {"log.cleaner.threads": "2"})
            await set_topic_configs(zk, "quiet", {"segment.ms": "3"}, notify=False)
            r = Recorder()
            w = r.watcher(zk)
            await w.start(report_existing=True)
            try:
                assert sorted(r.events, key=str) == sorted(
                    [
                        ("topic", "t", {"retention.ms": "1"}),
                        ("topic", "quiet", {"segment.ms": "3"}),
                        ("broker", None, {"log.cleaner.threads": "2"}),
                    ],
                    key=str,
                )
                await asyncio.sleep(0.2)
                assert len(r.events) == 3  # the notifications were not replayed
            finally:
                await w.stop()

    run(main())


def test_foreign_notifications_and_bad_configs_are_skipped(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            r = Recorder()
            w = r.watcher(zk)
            await w.start()
            try:
                notification = f"{CONFIG_CHANGES_PATH}/config_change_"
                await zk.create("/config/topics/broken", b"{not json", makepath=True)
                for data in [
                    b"not json at all",
                    b'{"version":9,"entity_path":"topics/x"}',
                    b'{"version":2,"entity_path":"topics/broken"}',  # its config is not JSON
                    b'{"version":2,"entity_path":"brokers/abc"}',
                    b'{"version":2,"entity_path":"topics/a/b"}',
                    b'{"version":2,"entity_path":"clients/someone"}',
                    b"",
                    # Kafka's version 1, still read by Kafka 3.9.
                    b'{"version":1,"entity_type":"topics","entity_name":"v1"}',
                ]:
                    await zk.create(notification, data, sequential=True)
                await zk.create(f"{CONFIG_CHANGES_PATH}/not_a_notification", b"x")
                await zk.create("/config/topics/v1", b'{"version":1,"config":{"a":"1"}}')
                await set_topic_configs(zk, "good", {"retention.ms": "5"})
                await until(lambda: r.has(("topic", "good", {"retention.ms": "5"})), "good")
                assert r.events == [
                    ("topic", "v1", {"a": "1"}),
                    ("topic", "good", {"retention.ms": "5"}),
                ]
                # Still watching.
                await set_broker_configs(zk, 3, {"x": "y"})
                await until(lambda: r.has(("broker", 3, {"x": "y"})), "broker 3")
                # read_all leaves the unreadable one out instead of failing.
                assert set(await read_all_topic_configs(zk)) == {"v1", "good"}
            finally:
                await w.stop()

    run(main())


def test_notifications_older_than_the_expiration_are_purged(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            r = Recorder()
            w = r.watcher(zk, change_expiration_ms=300)
            await w.start()
            try:
                first = await set_topic_configs(zk, "a", {"retention.ms": "1"})
                await until(lambda: len(r.events) == 1, "the first change")
                await asyncio.sleep(0.5)
                second = await set_topic_configs(zk, "a", {"retention.ms": "2"})
                assert first is not None and second is not None
                await until(lambda: len(r.events) == 2, "the second change")

                async def purged() -> bool:
                    return await changes(zk) == [f"config_change_{second:010d}"]

                for _ in range(100):
                    if await purged():
                        break
                    await asyncio.sleep(0.05)
                assert await purged()
            finally:
                await w.stop()

    run(main())


def test_watcher_catches_up_after_its_session_expires(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer
) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk, ZkClient(zk_settings) as other:
            r = Recorder()
            w = r.watcher(zk)
            await w.start()
            try:
                await set_topic_configs(other, "a", {"retention.ms": "1"})
                await until(lambda: len(r.events) == 1, "the first change")
                # A change whose notification this broker never sees (as if purged while it
                # was away): only the re-read after the new session finds it.
                await set_topic_configs(other, "a", {"retention.ms": "2"}, notify=False)
                await set_broker_configs(other, 1, {"x": "1"}, notify=False)
                await asyncio.to_thread(expire_session, zk, zookeeper.connect)
                await until(lambda: r.has(("topic", "a", {"retention.ms": "2"})), "the re-read")
                assert r.has(("broker", 1, {"x": "1"}))
                # Watching again in the new session.
                await set_topic_configs(other, "b", {"retention.ms": "3"})
                await until(lambda: r.has(("topic", "b", {"retention.ms": "3"})), "a new change")
            finally:
                await w.stop()

    run(main())


# -- against Apache Kafka 3.9.1 ----------------------------------------------------------

KAFKA_BROKER_ID = 5


@pytest.fixture(scope="module")
def kafka_chroot(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(bootstrap servers, ZooKeeper connect string with the broker's chroot)."""
    chroot = f"/kafka-configs-{uuid.uuid4().hex[:8]}"
    root: Path = tmp_path_factory.mktemp("kafka-configs")
    with kafka_zk_broker(
        zookeeper.connect,
        chroot,
        root,
        broker_id=KAFKA_BROKER_ID,
        settings={"zookeeper.session.timeout.ms": "10000"},
    ) as kafka:
        # Registered is not ready: until the controller's first UpdateMetadata reaches the
        # broker, it names no controller and a client's CreateTopics waits for one.
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        wait_for(
            lambda: admin.list_topics(timeout=5).controller_id == KAFKA_BROKER_ID,
            "Kafka to know its controller",
            timeout=30,
        )
        yield kafka.bootstrap, zookeeper.connect + chroot


def _describe(admin: AdminClient, resource: ConfigResource, name: str) -> str | None:
    value: str | None = admin.describe_configs([resource])[resource].result(10)[name].value
    return value


@pytest.mark.kafka
@pytest.mark.timeout(150)
def test_configs_travel_both_ways_with_kafka(kafka_chroot: tuple[str, str]) -> None:
    bootstrap, connect = kafka_chroot
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "configs-compat"
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "111111"})])[topic].result(
        30
    )
    topic_resource = ConfigResource(ResourceType.TOPIC, topic)
    broker_resource = ConfigResource(ResourceType.BROKER, str(KAFKA_BROKER_ID))

    async def main() -> None:
        async with ZkClient(ZkSettings.parse(connect, session_timeout_ms=6000)) as zk:
            assert await read_topic_configs(zk, topic) == {"retention.ms": "111111"}
            r = Recorder()
            w = r.watcher(zk)
            await w.start()
            try:
                # kbroker writes, Kafka's config manager applies it.
                await set_topic_configs(zk, topic, {"retention.ms": "222222"})
                await asyncio.to_thread(
                    wait_for,
                    lambda: _describe(admin, topic_resource, "retention.ms") == "222222",
                    "Kafka to apply kbroker's topic config",
                    timeout=30,
                )
                await set_broker_configs(zk, None, {"log.cleaner.backoff.ms": "16000"})
                await asyncio.to_thread(
                    wait_for,
                    lambda: _describe(admin, broker_resource, "log.cleaner.backoff.ms") == "16000",
                    "Kafka to apply kbroker's cluster-wide default",
                    timeout=30,
                )

                # Kafka writes, kbroker's watcher hears it.
                alter_topic = ConfigResource(
                    ResourceType.TOPIC,
                    topic,
                    incremental_configs=[
                        ConfigEntry(
                            "retention.ms", "333333", incremental_operation=AlterConfigOpType.SET
                        )
                    ],
                )
                await asyncio.to_thread(
                    lambda: admin.incremental_alter_configs([alter_topic])[alter_topic].result(30)
                )
                await until(
                    lambda: r.has(("topic", topic, {"retention.ms": "333333"})),
                    "Kafka's topic config change",
                    30,
                )
                alter_broker = ConfigResource(
                    ResourceType.BROKER,
                    str(KAFKA_BROKER_ID),
                    incremental_configs=[
                        ConfigEntry(
                            "log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET
                        )
                    ],
                )
                await asyncio.to_thread(
                    lambda: admin.incremental_alter_configs([alter_broker])[alter_broker].result(30)
                )
                await until(
                    lambda: r.has(("broker", KAFKA_BROKER_ID, {"log.cleaner.threads": "2"})),
                    "Kafka's broker config change",
                    30,
                )
                # The cluster-wide default through Kafka's own tool (no Python client names it).
                await asyncio.to_thread(
                    subprocess.run,
                    ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1",
                     "-cp", f"{require_kafka()[1]}/*", "kafka.admin.ConfigCommand",
                     "--bootstrap-server", bootstrap, "--entity-type", "brokers",
                     "--entity-default", "--alter", "--add-config", "log.cleaner.threads=3"],
                    check=True, capture_output=True, timeout=60,
                )  # fmt: skip
                await until(
                    lambda: r.has(
                        (
                            "broker",
                            None,
                            {"log.cleaner.backoff.ms": "16000", "log.cleaner.threads": "3"},
                        )
                    ),
                    "Kafka's cluster-wide default change",
                    30,
                )
            finally:
                await w.stop()

    run(main(), timeout=140)
