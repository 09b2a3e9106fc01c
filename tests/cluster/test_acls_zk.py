"""ACLs in ZooKeeper (kbroker.cluster.acls), on a real ZooKeeper: what a broker's authorizer
writes is Kafka's layout, every other broker follows it through the change notifications,
writers racing on one resource both land, expired notifications go, and a new session
reloads everything. Each "broker" is what a cluster member runs: an AclAuthorizer with an
AclChangeWatcher on its own ZooKeeper session. (A Kafka 3.9.1 broker on the same chroot:
tests/cluster/test_acls_mixed.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kbroker.cluster.acls import AclChangeWatcher, read_all_acls
from kbroker.cluster.errors import ZkDataError
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.cluster.zk_data import ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH
from kbroker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kbroker.security.authorizer import AclAuthorizer
from tests.cluster.conftest import expire_session, run, until
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(90)

RT, PT, OP, PERM = ResourceType, PatternType, AclOperation, PermissionType
ALICE, BOB = "User:alice", "User:bob"
HOST = "/10.0.0.1"


def grant(
    name: str,
    principal: str = ALICE,
    op: AclOperation = OP.READ,
    perm: PermissionType = PERM.ALLOW,
    ptype: PatternType = PT.LITERAL,
    rtype: ResourceType = RT.TOPIC,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, "*", op, perm)
    )


def every_acl_of(name: str) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(RT.ANY, name, PT.ANY),
        AccessControlEntryFilter(None, None, OP.ANY, PERM.ANY),
    )


@asynccontextmanager
async def broker(
    settings: ZkSettings, change_expiration_ms: int = 900_000
) -> AsyncIterator[tuple[AclAuthorizer, AclChangeWatcher, ZkClient]]:
    zk = ZkClient(settings)
    await zk.start()
    authorizer = AclAuthorizer()
    watcher = AclChangeWatcher(zk, authorizer, change_expiration_ms=change_expiration_ms)
    try:
        await watcher.start()
        yield authorizer, watcher, zk
    finally:
        await watcher.stop()
        await zk.stop()


async def data(zk: ZkClient, path: str) -> bytes:
    return (await zk.get(path))[0]


async def notifications(zk: ZkClient, changes: str) -> list[bytes]:
    return [await data(zk, f"{changes}/{n}") for n in await zk.get_children(changes)]


def test_kafkas_layout_followed_by_another_broker(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with broker(zk_settings) as (one, _, zk), broker(zk_settings) as (two, _, _):
            # Kafka's folders exist once a broker's authorizer started.
            assert await zk.get_children("/kafka-acl") == sorted(
                ["Cluster", "DelegationToken", "Group", "Topic", "TransactionalId", "User"]
            )
            assert await zk.get_children("/kafka-acl-extended") == ["prefixed"]
            assert (
                await one.create_acls(
                    [
                        grant("t1"),
                        grant("t1", BOB, OP.WRITE),
                        grant("orders-", BOB, OP.WRITE, PERM.DENY, PT.PREFIXED),
                        grant("tx1", op=OP.WRITE, rtype=RT.TRANSACTIONAL_ID),
                    ]
                )
                == [None] * 4
            )
            assert json.loads(await data(zk, "/kafka-acl/Topic/t1")) == {
                "acls": [
                    {
                        "principal": ALICE,
                        "permissionType": "Allow",
                        "host": "*",
                        "operation": "Read",
                    },
                    {
                        "principal": BOB,
                        "permissionType": "Allow",
                        "host": "*",
                        "operation": "Write",
                    },
                ],
                "version": 1,
            }
            assert json.loads(await data(zk, "/kafka-acl-extended/prefixed/Topic/orders-")) == {
                "acls": [
                    {"principal": BOB, "permissionType": "Deny", "host": "*", "operation": "Write"}
                ],
                "version": 1,
            }
            assert await data(zk, "/kafka-acl/TransactionalId/tx1") != b""
            # One notification per resource changed, in Kafka's two forms.
            assert sorted(await notifications(zk, ACL_CHANGES_PATH)) == [
                b"TOPIC:t1",
                b"TRANSACTIONAL_ID:tx1",
            ]
            assert await notifications(zk, EXTENDED_ACL_CHANGES_PATH) == [
                b'{"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}'
            ]
            # The other broker follows.
            await until(
                lambda: two.authorize(BOB, HOST, OP.WRITE, RT.TOPIC, "t1") and two.count() == 4,
                "the second broker to have the ACLs",
            )
            assert not two.authorize(BOB, HOST, OP.WRITE, RT.TOPIC, "orders-eu")
            # A deletion made there removes the znode, and the first broker follows.
            deleted = await two.delete_acls([every_acl_of("t1")])
            assert len(deleted[0]) == 2
            assert await zk.exists("/kafka-acl/Topic/t1") is None
            await until(lambda: one.count() == 2, "the first broker to follow the deletion")
            assert not one.authorize(ALICE, HOST, OP.READ, RT.TOPIC, "t1")
            assert b"TOPIC:t1" in (await notifications(zk, ACL_CHANGES_PATH))[2:]

    run(main())


def test_writers_racing_on_one_resource_both_land(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with broker(zk_settings) as (one, _, zk), broker(zk_settings) as (two, _, _):
            results = await asyncio.gather(
                *(one.create_acls([grant("shared", f"User:one-{i}")]) for i in range(8)),
                *(two.create_acls([grant("shared", f"User:two-{i}")]) for i in range(8)),
            )
            assert all(r == [None] for r in results)
            stored = json.loads(await data(zk, "/kafka-acl/Topic/shared"))["acls"]
            assert sorted(a["principal"] for a in stored) == sorted(
                [f"User:one-{i}" for i in range(8)] + [f"User:two-{i}" for i in range(8)]
            )
            await until(lambda: one.count() == 16 and two.count() == 16, "both to see all 16")

    run(main())


def test_expired_notifications_are_purged(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        # Every notification is "expired" for this broker's watcher at once.
        async with broker(zk_settings, change_expiration_ms=0) as (one, _, zk):
            async with broker(zk_settings) as (two, _, _):
                await two.create_acls([grant("a"), grant("p", ptype=PT.PREFIXED)])
                await until(lambda: one.count() == 2, "the change to be processed")
            await asyncio.sleep(0.01)
            await one.create_acls([grant("b")])  # wakes the watcher: it purges after the round
            for _ in range(200):
                left = await zk.get_children(ACL_CHANGES_PATH)
                left += await zk.get_children(EXTENDED_ACL_CHANGES_PATH)
                if not left:
                    break
                await asyncio.sleep(0.05)
            assert left == []
            assert one.count() == 3

    run(main())


def test_a_new_session_reloads_everything(
    zk_settings: ZkSettings, zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with broker(zk_settings) as (one, _, _), broker(zk_settings) as (two, _, zk2):
            await one.create_acls([grant("before")])
            await until(lambda: two.count() == 1, "the first ACL")
            expire_session(zk2, zookeeper.connect + zk_settings.chroot)
            # Meanwhile: a change whose notification is gone by the time the session is back.
            await one.create_acls([grant("during", BOB)])
            async with ZkClient(zk_settings) as zk:
                for name in await zk.get_children(ACL_CHANGES_PATH):
                    await zk.delete(f"{ACL_CHANGES_PATH}/{name}")
            await until(
                lambda: two.authorize(BOB, HOST, OP.READ, RT.TOPIC, "during"),
                "the broker with a new session to reload the ACLs",
            )
            assert two.count() == 2

    with caplog.at_level(logging.INFO, logger="kbroker"):
        run(main())


def test_what_cannot_be_read_is_skipped_or_refused(
    zk_settings: ZkSettings, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with broker(zk_settings) as (one, _, zk):
            await one.create_acls([grant("good")])
            # A notification that names nothing: logged and skipped.
            await zk.create(f"{ACL_CHANGES_PATH}/acl_changes_", b"NOT-A-TYPE:x", sequential=True)
            # A resource whose znode is garbage: the change is skipped, the old ACLs stay.
            await zk.set("/kafka-acl/Topic/good", b"{not json")
            await zk.create(f"{ACL_CHANGES_PATH}/acl_changes_", b"TOPIC:good", sequential=True)
            await until(
                lambda: "skipping ACL change" in caplog.text and caplog.text.count("good") >= 1,
                "both to be logged",
            )
            assert one.authorize(ALICE, HOST, OP.READ, RT.TOPIC, "good")
            # Loading refuses it (starting without some DENY could allow too much).
            with pytest.raises(ZkDataError, match="/kafka-acl/Topic/good"):
                await read_all_acls(zk)

    with caplog.at_level(logging.INFO, logger="kbroker.cluster.acls"):
        run(main())
