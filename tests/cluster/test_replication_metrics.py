"""kbroker only: a leader's replication metrics follow its followers, and the replication
alert rules fire in a real Prometheus.

Three brokers, a topic of replication factor 3 with ``min.insync.replicas`` 3,
acks=1 writes going on. A follower paused (SIGSTOP) past
``replica.lag.time.max.ms`` leaves the ISR of the leaders it follows: they count
the shrink, and their under-replicated and under-min-ISR gauges rise (acks=all
writes are refused meanwhile with NOT_ENOUGH_REPLICAS). A real Prometheus
(Debian's package) scraping the three brokers with the shipped alert rules
(their ``for:`` durations set to 0s, so the test need not wait minutes) fires
KbrokerUnderReplicatedPartitions and KbrokerUnderMinIsrPartitions for the
leader. Resumed, the follower catches up and joins again: the expand is counted
and the gauges fall back to 0.
"""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker._kbroker import build_batch
from kbroker.protocol import ErrorCode
from tests.cluster.nodes import kbroker_nodes_with_metrics
from tests.helpers import Wire, wait_for, wire_produce
from tests.metrics.prom import alerts, get, prometheus, samples
from tests.metrics.test_deploy import ALERTS
from tests.zookeeper import ZooKeeperServer

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        shutil.which("prometheus") is None, reason="needs Debian's prometheus (deploy/setup.sh)"
    ),
]

LAG_MS = 2000
FIRED = {"KbrokerUnderReplicatedPartitions", "KbrokerUnderMinIsrPartitions"}


def test_leader_metrics_follow_the_isr(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = zookeeper.connect + f"/repl-metrics-{uuid.uuid4().hex[:8]}"
    nodes, ports = kbroker_nodes_with_metrics(
        connect, tmp_path, [f"replica.lag.time.max.ms={LAG_MS}"]
    )
    rules = tmp_path / "alerts.yml"
    rules.write_text(re.sub(r"for: \S+", "for: 0s", ALERTS.read_text()))
    stop = threading.Event()

    def metric(i: int, name: str) -> float:
        status, text = get(f"http://127.0.0.1:{ports[i]}/metrics")
        assert status == 200
        return samples(text).get(name, 0.0)

    with ExitStack() as stack:
        stack.callback(stop.set)
        for node in nodes.values():
            stack.callback(node.kill)
            node.launch()
        for node in nodes.values():
            node.wait_started()
        targets = [f"127.0.0.1:{p}" for p in ports.values()]
        (tmp_path / "prom").mkdir()
        prom = stack.enter_context(prometheus(tmp_path / "prom", targets, rules=rules))
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        topic = f"rm-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        new = NewTopic(topic, 1, 3, config={"min.insync.replicas": "3"})
        admin.create_topics([new], operation_timeout=30)[topic].result(60)

        def leader_and_isr() -> tuple[int, list[int]]:
            p = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
            if p is None:  # the answering broker does not know the new topic yet
                return -1, []
            return p.leader, sorted(p.isrs)

        leader = wait_for(lambda: leader_and_isr()[0] > 0 and leader_and_isr()[0], "a leader")
        # Not the controller: a paused controller would take the ISR change with it.
        controller = wait_for(lambda: admin.list_topics(timeout=10).controller_id, "a controller")
        follower = next(i for i in nodes if i not in (leader, controller))
        # Metadata from the leader from now on: the paused follower answers nothing.
        admin = AdminClient({"bootstrap.servers": nodes[leader].bootstrap})
        assert metric(leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert metric(leader, "kafka_server_replicamanager_atminisrpartitioncount") == 1

        def write() -> None:
            p = Producer({"bootstrap.servers": nodes[leader].bootstrap, "acks": "1"})
            while not stop.is_set():
                p.produce(topic, b"x", partition=0)
                p.poll(0.01)
            p.flush(10)

        threading.Thread(target=write, daemon=True).start()
        nodes[follower].pause()
        stack.callback(nodes[follower].resume)
        wait_for(
            lambda: leader_and_isr()[1] == sorted(set(nodes) - {follower}),
            "the paused follower out of the ISR",
            timeout=LAG_MS / 1000 + 15,
        )
        assert metric(leader, "kafka_server_replicamanager_isrshrinks_total") >= 1
        assert metric(leader, "kafka_server_replicamanager_underreplicatedpartitions") == 1
        assert metric(leader, "kafka_server_replicamanager_underminisrpartitioncount") == 1
        # acks=all is refused before the append (librdkafka retries that error: ask on
        # the wire).
        wire = Wire(nodes[leader].bootstrap)
        try:
            batch = build_batch([(None, b"refused", [])])
            assert wire_produce(wire, topic, batch)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
        finally:
            wire.close()

        def firing() -> set[str]:
            return {
                a["labels"]["alertname"]
                for a in alerts(prom)
                if a["state"] == "firing"
                and a["labels"].get("instance") == f"127.0.0.1:{ports[leader]}"
            }

        wait_for(lambda: firing() >= FIRED, f"{FIRED} firing for the leader", timeout=30)

        nodes[follower].resume()
        wait_for(lambda: leader_and_isr()[1] == [1, 2, 3], "the follower back", timeout=30)
        assert metric(leader, "kafka_server_replicamanager_isrexpands_total") >= 1
        assert metric(leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert metric(leader, "kafka_server_replicamanager_underminisrpartitioncount") == 0
        wait_for(lambda: not FIRED & firing(), "the alerts resolved", timeout=30)
