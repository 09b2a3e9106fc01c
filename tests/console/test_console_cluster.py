"""`kbroker console` on a real 3-broker cluster (kbroker's, and Apache Kafka 3.9.1's in
ZooKeeper mode for the reference run): every broker shows with its endpoint and the
controller; a killed broker's partitions show offline and under-replicated on the open
page, and recover when it comes back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from tests.cluster.nodes import SYSTEMS, Cluster, cluster
from tests.console.conftest import ConsoleProcess, screenshot_dir, wait_until
from tests.helpers import topic_name
from tests.zookeeper import ZooKeeperServer


@pytest.fixture(params=SYSTEMS)
def three_brokers(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Cluster]:
    with cluster(
        request.param, zookeeper.connect, f"/console-{uuid.uuid4().hex[:8]}", tmp_path
    ) as brokers:
        yield brokers


def text(browser: Any, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def counts(browser: Any) -> tuple[str, str]:
    """The cluster page's offline and under-replicated partition counts."""
    return text(browser, "#offline"), text(browser, "#under-replicated")


def create(brokers: Cluster, topic: NewTopic) -> None:
    admin = AdminClient(brokers.client())
    admin.create_topics([topic], operation_timeout=20)[topic.topic].result(timeout=30)


def create_on(brokers: Cluster, name: str, node_id: int) -> None:
    """A topic whose one partition has one replica, on broker ``node_id`` (kafka-python:
    confluent-kafka 2.16 cannot send a replica assignment)."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic

    admin = KafkaAdminClient(bootstrap_servers=brokers.bootstrap, request_timeout_ms=20000)
    try:
        admin.create_topics([KPNewTopic(name, -1, -1, replica_assignments={0: [node_id]})])
    finally:
        admin.close()


@pytest.mark.kafka
def test_a_killed_brokers_partitions_show_offline_and_recover(
    three_brokers: Cluster, browser: Any, tmp_path: Path, screenshot_root: Path
) -> None:
    brokers = three_brokers
    console = ConsoleProcess(brokers.bootstrap, tmp_path / "console.log").start()
    try:
        browser.get(console.url + "/")
        wait_until(
            lambda: len(browser.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")) == 3,
            "3 brokers",
        )
        for node_id, node in brokers.nodes.items():
            assert (
                text(browser, f"#brokers tr[data-broker='{node_id}'] .endpoint") == node.bootstrap
            )
        controller = brokers.controller_id()
        assert text(browser, "#controller") == str(controller)
        victim = max(n for n in brokers.nodes if n != controller)
        solo = topic_name("solo")  # its one replica on the victim
        spread = topic_name("spread")  # a replica on every broker
        create_on(brokers, solo, victim)
        create(brokers, NewTopic(spread, num_partitions=3, replication_factor=3))
        wait_until(
            lambda: text(browser, "#offline") == "0" and text(browser, "#under-replicated") == "0",
            "a healthy cluster",
        )

        brokers.nodes[victim].kill()
        # The victim's one partition has no leader; the other topic's three have lost a
        # replica from their ISR (an offline partition keeps its last ISR, as in Kafka).
        wait_until(
            lambda: counts(browser) == ("1", "3"),
            "the victim's partition offline and the others under-replicated",
            timeout=45,
            seen=lambda: counts(browser),
        )
        row = f"#brokers tr[data-broker='{victim}']"
        assert text(browser, row + " .endpoint") == "down: not in the cluster's metadata"
        assert text(browser, row + " .offline") == "1"
        assert text(browser, "#live-brokers") == "2 (1 down)"
        shots = screenshot_dir(screenshot_root, brokers.system)
        browser.save_screenshot(str(shots / "cluster-broker-down.png"))
        browser.get(f"{console.url}/topics/{solo}")
        wait_until(
            lambda: text(browser, "#partitions tr[data-partition='0'] .leader") == "none",
            "no leader",
        )

        brokers.nodes[victim].restart()
        browser.get(console.url + "/")
        wait_until(
            lambda: counts(browser) == ("0", "0"),
            "the cluster to recover",
            timeout=45,
            seen=lambda: counts(browser),
        )
        assert (
            text(browser, f"#brokers tr[data-broker='{victim}'] .endpoint")
            == brokers.nodes[victim].bootstrap
        )
    finally:
        console.stop()
