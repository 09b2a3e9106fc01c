"""kill -9 of a single broker in the middle of transactions, then a restart on the same
data: Apache Kafka 3.9.1 (ZooKeeper mode) first, proving the test, then kbroker, with the
same settings.

Four confluent-kafka transactional producers are at different points when the broker
dies: A committed long before; D's commit just acknowledged (the markers may not all be
written: the restarted coordinator must finish the commit it had promised); B open with
its values written, its producer carrying on after the restart (its commit either
completes, and B is read whole, or fails, and B is absent); C open with its values
written and a short timeout, its producer gone quiet (the restarted coordinator aborts
it, and its producer, asking to commit later, is fenced). Afterwards a read_committed
reader reads every transaction whole or not at all and reaches the end of the log (no
transaction is left hanging), and a read_uncommitted one reads everything written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.cluster.kafka_zk import KafkaZkBroker, kafka_zk_broker
from tests.helpers import BrokerProcess, create_topic, knows_controller, topic_name, wait_for
from tests.txn.test_transactions import read, txn_state
from tests.zookeeper import ZooKeeperServer, zk_session

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 2
SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    # Kafka registers again only once the killed run's ZooKeeper session has ended.
    "zookeeper.session.timeout.ms": "6000",
}


class Restartable:
    """One broker of either system, killed -9 and started again on its data and port."""

    def __init__(self, kafka: KafkaZkBroker | None, kbroker: BrokerProcess | None) -> None:
        self.kafka, self.kbroker = kafka, kbroker

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap if self.kafka else self.kbroker.bootstrap  # type: ignore[union-attr]

    def kill(self) -> None:
        if self.kafka:
            self.kafka.kill()
        else:
            self.kbroker.kill()  # type: ignore[union-attr]

    def start_again(self) -> None:
        if self.kafka:
            with zk_session(self.kafka.zk_connect + self.kafka.chroot) as zk:
                path = f"/brokers/ids/{self.kafka.broker_id}"
                wait_for(lambda: not zk.exists(path), "the killed run's session to end", 30)
            self.kafka.restart()
        else:
            self.kbroker.start(*(f"{k}={v}" for k, v in SETTINGS.items()))  # type: ignore[union-attr]
        wait_for(lambda: knows_controller(self.bootstrap), "the broker to know its controller")

    def output(self) -> str:
        return self.kafka.output(200) if self.kafka else self.kbroker.output()  # type: ignore[union-attr]


@pytest.fixture(params=[pytest.param("kafka", marks=pytest.mark.kafka), "kbroker"])
def broker(
    request: pytest.FixtureRequest, zookeeper: ZooKeeperServer, tmp_path: Path
) -> Iterator[Restartable]:
    if request.param == "kafka":
        chroot = f"/txn-crash-{uuid.uuid4().hex[:8]}"
        with kafka_zk_broker(zookeeper.connect, chroot, tmp_path, settings=SETTINGS) as kafka:
            wait_for(lambda: knows_controller(kafka.bootstrap), "Kafka to know its controller")
            yield Restartable(kafka, None)
    else:
        process = BrokerProcess(tmp_path / "data").start(*(f"{k}={v}" for k, v in SETTINGS.items()))
        try:
            yield Restartable(None, process)
            assert "Traceback" not in process.output(), process.output()[-5000:]
        finally:
            process.kill()


def producer(bootstrap: str, txn: str, **conf: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn, "linger.ms": 5, **conf})
    p.init_transactions(60)
    return p


def write(p: Producer, topic: str, name: str) -> list[str]:
    """One value of transaction ``name`` on each partition, written (flushed)."""
    values = [f"{name}{i}" for i in range(PARTITIONS)]
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i)
    assert p.flush(30) == 0
    return values


def test_a_broker_killed_mid_transaction(broker: Restartable) -> None:
    topic = topic_name("crash")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    run = uuid.uuid4().hex[:6]
    pa, pb = producer(broker.bootstrap, f"a-{run}"), producer(broker.bootstrap, f"b-{run}")
    pc = producer(broker.bootstrap, f"c-{run}", **{"transaction.timeout.ms": 5000})
    pd = producer(broker.bootstrap, f"d-{run}")
    pa.begin_transaction()
    a = write(pa, topic, "a")
    pa.commit_transaction(30)
    pb.begin_transaction()
    b = write(pb, topic, "b")
    pc.begin_transaction()
    c = write(pc, topic, "c")
    pd.begin_transaction()
    d = write(pd, topic, "d")
    pd.commit_transaction(30)
    broker.kill()  # D's markers may be on their way
    broker.start_again()

    # B's producer carries on: its commit completes, or fails and B is not committed.
    try:
        pb.commit_transaction(60)
        b_committed = True
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        assert error.fatal() or error.txn_requires_abort(), error
        b_committed = False
    # C's coordinator aborts it once its timeout passes, and fences its producer.
    wait_for(
        lambda: txn_state(broker.bootstrap, f"c-{run}") == "CompleteAbort",
        "the restarted coordinator to abort C",
        timeout=60,
    )
    with pytest.raises(KafkaException) as fenced:
        pc.commit_transaction(30)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    wait_for(
        lambda: txn_state(broker.bootstrap, f"d-{run}") == "CompleteCommit",
        "the restarted coordinator to complete D's commit",
        timeout=60,
    )

    # Every transaction whole or absent; D after B and C on every partition, so a
    # transaction left open would hold the read_committed reader before it.
    committed = sorted(read(broker.bootstrap, topic, committed=True))
    expected = sorted([*a, *d, *(b if b_committed else [])])
    assert committed == expected, (b_committed, broker.output()[-3000:])
    assert sorted(read(broker.bootstrap, topic, committed=False)) == sorted([*a, *b, *c, *d])
    print(f"\nB's commit after the restart: {'completed' if b_committed else 'failed'}")
