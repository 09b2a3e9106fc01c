"""kbroker's codec against the inter-broker bytes of a real Apache Kafka 3.9.1 (ZooKeeper mode).

One real ZooKeeper and one real Kafka 3.9.1 broker (id 1, the controller). The test
registers broker 2 in ZooKeeper the way a ZooKeeper-mode broker does (an ephemeral
/brokers/ids/2 in Kafka's registration JSON) with an endpoint on a loopback WireProbe:
a wire probe for codec conformance, not a stand-in broker. It only decodes what Kafka
sends it with kbroker's codec and answers each request with kbroker's encoder (no
error), so Kafka's controller and replica fetcher talk to it as to a broker:

- UpdateMetadata when broker 2 appears, LeaderAndIsr when a topic gets a replica on
  it, StopReplica when that topic is deleted (controller -> broker 2);
- Fetch v17 from broker 1 following broker 2's partition (the follower's own fields);
- ControlledShutdown and AlterPartition at every version sent by the test to Kafka's
  controller, encoded by kbroker, answered by Kafka, decoded by kbroker.

Every field asserted comes from kbroker's decoding of Kafka's bytes. Two more tests
send the same requests to Kafka and to a kbroker node and expect the same answers:
LeaderAndIsr / StopReplica / UpdateMetadata at every version as from an old controller
(to broker 1), ControlledShutdown / AlterPartition / AllocateProducerIds to broker 3,
which is not the controller. And Kafka's controller's answers to AllocateProducerIds,
which a kbroker controller must match (tests/cluster/test_mixed_cluster.py).
Kafka 3.9.1 starts once per module (about 7 s); broker 3 once more.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from kbroker.handlers.inter_broker import (
    leader_and_isr_orders,
    leader_and_isr_response,
    stop_replica_orders,
    stop_replica_response,
    update_metadata_contents,
)
from kbroker.log import TopicPartition
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.model import PartitionState
from kbroker.protocol import APIS, ApiKey, ErrorCode, RequestHeader, api_versions_response
from kbroker.protocol.messages.admin import CreateTopicsRequest, DeleteTopicsRequest
from kbroker.protocol.messages.core import ApiVersionsRequest, FetchResponse, MetadataRequest
from kbroker.protocol.messages.inter_broker import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    ControlledShutdownRequest,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from kbroker.replication.replica_manager import LeaderAndIsrOrder, StopReplicaOrder
from kbroker.tools.client import BrokerClient
from tests.cluster.kafka_zk import KafkaZkBroker, kafka_zk_broker, require_kafka
from tests.cluster.wire_probe import Received, WireProbe
from tests.helpers import BrokerProcess
from tests.zookeeper import ZooKeeperServer, zk_session

pytestmark = pytest.mark.timeout(180)

TOPIC = "wire-probe"
PLAINTEXT = 0  # security protocol id

# Everything a Kafka 3.9.1 broker in ZooKeeper mode advertises (ApiVersions v3, measured):
# the inter-broker APIs 4-7 and 56 among them. kbroker declares the same ranges for those,
# and Fetch up to the v17 a 3.9 follower sends.
KAFKA_3_9_ZK = {
    **{0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 4: (0, 7), 5: (0, 4), 6: (0, 8)},
    **{7: (0, 3), 8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5)},
    **{14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (0, 7), 20: (0, 6)},
    **{21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1)},
    **{28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2)},
    **{35: (0, 4), 36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3)},
    **{42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1)},
    **{49: (0, 1), 50: (0, 0), 51: (0, 0), 56: (0, 3), 57: (0, 1), 58: (0, 0), 60: (0, 1)},
    **{61: (0, 0), 65: (0, 0), 66: (0, 1), 67: (0, 0), 68: (0, 0), 69: (0, 0)},
}


def answer(header: RequestHeader, body: Any) -> Any:
    """kbroker's reply to each request Kafka sends the probe: always no error."""
    key, version = header.api_key, header.api_version
    if key == ApiKey.API_VERSIONS:
        return api_versions_response(s.key for s in APIS)
    if key == ApiKey.UPDATE_METADATA:
        return UpdateMetadataResponse(error_code=ErrorCode.NONE)
    if key == ApiKey.LEADER_AND_ISR:
        return leader_and_isr_response(body, version, ErrorCode.NONE)
    if key == ApiKey.STOP_REPLICA:
        return stop_replica_response(body, version, ErrorCode.NONE)
    if key == ApiKey.FETCH:
        time.sleep(min(body.max_wait_ms, 500) / 1000)  # a long poll that finds nothing
        T, P = FetchResponse.Topic, FetchResponse.Topic.Partition
        return FetchResponse(
            session_id=0,
            responses=[
                T(
                    topic=t.topic,
                    topic_id=t.topic_id,
                    partitions=[
                        P(partition_index=p.partition, high_watermark=0, log_start_offset=0)
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ],
        )
    return None


def registration(port: int) -> bytes:
    """A ZooKeeper-mode broker's /brokers/ids/N JSON (version 5), as Kafka 3.9 writes it."""
    return json.dumps(
        {
            "features": {},
            "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
            "endpoints": [f"PLAINTEXT://127.0.0.1:{port}"],
            "jmx_port": -1,
            "port": port,
            "host": "127.0.0.1",
            "version": 5,
            "timestamp": str(int(time.time() * 1000)),
        }
    ).encode()


def create_topic(client: BrokerClient, name: str, replicas: list[int]) -> int:
    """CreateTopics v5 of one partition on `replicas` (kbroker's encoding): its error code."""
    topic = CreateTopicsRequest.Topic(
        name=name,
        num_partitions=-1,
        replication_factor=-1,
        assignments=[CreateTopicsRequest.Topic.Assignment(partition_index=0, broker_ids=replicas)],
    )
    resp = client.request(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(topics=[topic]))
    return int(resp.topics[0].error_code)


def delete_topic(client: BrokerClient, name: str) -> int:
    resp = client.request(
        ApiKey.DELETE_TOPICS, 5, DeleteTopicsRequest(topic_names=[name], timeout_ms=15000)
    )
    return int(resp.responses[0].error_code)


def of(key: int, **fields: Any) -> Any:
    """A matcher for requests of one api key whose body has the given field values."""

    def match(r: Received) -> bool:
        return r.header.api_key == key and all(getattr(r.body, k) == v for k, v in fields.items())

    return match


@pytest.fixture
def probe() -> Iterator[WireProbe]:
    p = WireProbe(answer)
    yield p
    p.close()


@pytest.fixture(scope="module")
def kafka(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaZkBroker]:
    """Broker 1, the controller, on a fresh chroot (shared by the module's tests)."""
    require_kafka()
    chroot = f"/inter-broker-{uuid.uuid4().hex[:8]}"
    with kafka_zk_broker(zookeeper.connect, chroot, tmp_path_factory.mktemp("kafka1")) as b:
        yield b


@pytest.fixture
def kafka_follower(
    zookeeper: ZooKeeperServer, kafka: KafkaZkBroker, tmp_path: Path
) -> Iterator[KafkaZkBroker]:
    """Broker 3 in broker 1's cluster: a broker that is not the controller."""
    with kafka_zk_broker(zookeeper.connect, kafka.chroot, tmp_path / "kafka3", broker_id=3) as b:
        yield b


@pytest.fixture
def zk(zookeeper: ZooKeeperServer, kafka: KafkaZkBroker) -> Iterator[KazooClient]:
    with zk_session(zookeeper.connect + kafka.chroot) as client:
        yield client


def test_kafka_3_9_advertises_the_inter_broker_apis(kafka: KafkaZkBroker) -> None:
    with BrokerClient(kafka.bootstrap, timeout=10) as c:
        resp = c.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="kbroker-test", client_software_version="1"),
        )
    advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert advertised == KAFKA_3_9_ZK
    assert (resp.supported_features, resp.finalized_features) == ([], [])  # none in ZK mode
    ours = {int(s.key): (s.min_version, s.max_version) for s in APIS}
    for key in (4, 5, 6, 7, 56, 67):
        assert ours[key] == advertised[key]
    assert ours[1][1] == advertised[1][1]  # Fetch: up to the v17 a 3.9 follower sends


def test_the_controllers_bytes(kafka: KafkaZkBroker, zk: KazooClient, probe: WireProbe) -> None:
    broker1_epoch = zk.get("/brokers/ids/1")[1].czxid
    controller_epoch = int(zk.get("/controller_epoch")[0])
    _, stat = zk.create(
        "/brokers/ids/2", registration(probe.port), ephemeral=True, include_data=True
    )
    epoch = stat.czxid  # broker 2's epoch: its registration's creation zxid

    # 1. Broker 2 appears: UpdateMetadata v8 with both brokers and no partition yet.
    first = probe.wait_for(of(ApiKey.UPDATE_METADATA), "UpdateMetadata")
    assert (first.api, first.header.header_version, first.header.client_id) == ((6, 8), 2, "1")
    um = first.body
    assert (um.controller_id, um.controller_epoch, um.broker_epoch) == (1, controller_epoch, epoch)
    assert (um.is_kraft_controller, um.type, um.topic_states) == (False, 0, [])
    assert live_brokers(um) == {1: ("127.0.0.1", kafka.port), 2: ("127.0.0.1", probe.port)}

    # 2. A topic with one partition on brokers 2 (leader) and 1: LeaderAndIsr v7 to broker 2.
    with BrokerClient(kafka.bootstrap, timeout=20) as c:
        assert create_topic(c, TOPIC, [2, 1]) == ErrorCode.NONE
    lai = probe.wait_for(of(ApiKey.LEADER_AND_ISR), "LeaderAndIsr")
    assert (lai.api, lai.header.header_version, lai.header.client_id) == ((4, 7), 2, "1")
    order = lai.body
    assert (order.controller_id, order.controller_epoch, order.broker_epoch) == (
        1,
        controller_epoch,
        epoch,
    )
    assert (order.is_kraft_controller, order.type) == (False, 0)
    [topic] = order.topic_states
    topic_id = topic.topic_id
    assert topic.topic_name == TOPIC and topic_id.int != 0
    [p] = topic.partition_states
    assert (p.partition_index, p.controller_epoch, p.leader, p.leader_epoch) == (
        0,
        controller_epoch,
        2,
        0,
    )
    assert (p.isr, p.replicas, p.partition_epoch, p.is_new) == ([2, 1], [2, 1], 0, True)
    assert (p.adding_replicas, p.removing_replicas, p.leader_recovery_state) == ([], [], 0)
    assert [(x.broker_id, x.host_name, x.port) for x in order.live_leaders] == [
        (2, "127.0.0.1", probe.port)
    ]
    # ... and as the replica manager's order.
    assert leader_and_isr_orders(order, 7) == [
        LeaderAndIsrOrder(
            TopicPartition(TOPIC, 0),
            PartitionState([2, 1], 2, 0, [2, 1], controller_epoch, version=0),
            topic_id,
            is_new=True,
            leader_endpoint=("127.0.0.1", probe.port),
        )
    ]
    # then UpdateMetadata with the new partition, on the same connection, in that order
    after = probe.wait_for(
        lambda r: r.header.api_key == ApiKey.UPDATE_METADATA and r.body.topic_states != [],
        "UpdateMetadata with the topic",
    )
    assert after.connection == lai.connection == first.connection
    assert [r.header.correlation_id for r in (first, lai, after)] == [0, 1, 2]
    assert partition_states(after.body) == [(TOPIC, topic_id, 0, 2, 0, [2, 1], 0, [2, 1], [])]
    # ... and as the metadata cache takes it.
    cache = MetadataCache()
    cache.update_from_controller(1, *update_metadata_contents(after.body, 8))
    assert [b.endpoints for b in cache.alive_brokers()] == [
        (("PLAINTEXT", "127.0.0.1", kafka.port),),
        (("PLAINTEXT", "127.0.0.1", probe.port),),
    ]
    known = cache.topic(TOPIC)
    assert known is not None and known.topic_id == topic_id and cache.controller_id == 1
    assert cache.partition_state(TOPIC, 0) == PartitionState(
        [2, 1], 2, 0, [2, 1], controller_epoch, version=0
    )

    # 3. Broker 1 follows broker 2: Fetch v17 with the follower's fields, on its own connection.
    fetch = probe.wait_for(of(ApiKey.FETCH), "a follower's Fetch")
    assert (fetch.api, fetch.header.client_id) == ((1, 17), "broker-1-fetcher-0")
    assert fetch.connection != first.connection
    f = fetch.body
    assert (f.replica_state.replica_id, f.replica_state.replica_epoch) == (1, broker1_epoch)
    assert (f.cluster_id, f.isolation_level, f.session_id, f.session_epoch) == (None, 0, 0, 0)
    [ft] = f.topics
    [fp] = ft.partitions
    assert (ft.topic_id, fp.partition, fp.current_leader_epoch, fp.fetch_offset) == (
        topic_id,
        0,
        0,
        0,
    )
    assert (fp.last_fetched_epoch, fp.log_start_offset, fp.replica_directory_id.int) == (-1, 0, 0)

    with BrokerClient(kafka.bootstrap, timeout=20) as c:
        # 4. AlterPartition from broker 2 at every version: ISR [2], [2, 1], [2], [2, 1].
        for version, isr in enumerate(([2], [2, 1], [2], [2, 1])):
            req = alter_partition(epoch, broker1_epoch, topic_id, isr, version)
            resp = c.request(ApiKey.ALTER_PARTITION, version, req)
            assert resp.error_code == ErrorCode.NONE
            [t] = resp.topics
            assert (t.topic_name, t.topic_id.int) == (
                (TOPIC, 0) if version < 2 else ("", topic_id.int)
            )
            [ap] = t.partitions
            assert (ap.error_code, ap.leader_id, ap.leader_epoch, ap.isr) == (0, 2, 0, isr)
            assert ap.partition_epoch == version + 1
            # the controller tells broker 2 (UpdateMetadata) the new ISR and version
            probe.wait_for(
                lambda r, isr=isr, v=version: (
                    partition_states(r.body)[:1]
                    == [(TOPIC, topic_id, 0, 2, 0, isr, v + 1, [2, 1], [])]
                    if r.header.api_key == ApiKey.UPDATE_METADATA
                    else False
                ),
                f"UpdateMetadata with ISR {isr}",
            )
        stale = c.request(
            ApiKey.ALTER_PARTITION, 3, alter_partition(epoch - 1, 0, topic_id, [2], 4)
        )
        assert (stale.error_code, stale.topics) == (ErrorCode.STALE_BROKER_EPOCH, [])

        # 5. Deleting the topic: UpdateMetadata with leader -2 (the topic leaves the cache),
        # then StopReplica v4, first keeping the replica, then deleting it.
        assert delete_topic(c, TOPIC) == ErrorCode.NONE
        deleting = probe.wait_for(
            lambda r: (
                r.header.api_key == ApiKey.UPDATE_METADATA
                and [s[3] for s in partition_states(r.body)] == [-2]
            ),
            "UpdateMetadata deleting the topic",
        )
        assert cache.update_from_controller(1, *update_metadata_contents(deleting.body, 8)) == [
            (TOPIC, 0)
        ]
        assert cache.topic(TOPIC) is None
        for delete in (False, True):
            stop = probe.wait_for(
                lambda r, d=delete: (
                    r.header.api_key == ApiKey.STOP_REPLICA
                    and r.body.topic_states[0].partition_states[0].delete_partition == d
                ),
                f"StopReplica with delete_partition={delete}",
            )
            assert stop.api == (5, 4)
            b = stop.body
            assert (b.controller_id, b.controller_epoch, b.broker_epoch) == (
                1,
                controller_epoch,
                epoch,
            )
            [st] = b.topic_states
            [sp] = st.partition_states
            # -2: the leader epoch Kafka's controller uses while a topic is deleted
            assert (st.topic_name, sp.partition_index, sp.leader_epoch) == (TOPIC, 0, -2)
            assert stop_replica_orders(b, 4) == [
                StopReplicaOrder(TopicPartition(TOPIC, 0), -2, delete)
            ]

        # 6. ControlledShutdown of broker 2 at every version (v0 has header v0), then stale.
        for version in range(4):
            req = ControlledShutdownRequest(broker_id=2, broker_epoch=epoch)
            resp = c.request(ApiKey.CONTROLLED_SHUTDOWN, version, req)
            assert (resp.error_code, resp.remaining_partitions) == (ErrorCode.NONE, [])
        req = ControlledShutdownRequest(broker_id=2, broker_epoch=epoch - 1)
        resp = c.request(ApiKey.CONTROLLED_SHUTDOWN, 3, req)
        assert resp.error_code == ErrorCode.STALE_BROKER_EPOCH
        # ...and of a broker that does not exist
        req = ControlledShutdownRequest(broker_id=7, broker_epoch=-1)
        resp = c.request(ApiKey.CONTROLLED_SHUTDOWN, 3, req)
        assert resp.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    assert not probe.errors


def live_brokers(um: Any) -> dict[int, tuple[str, int]]:
    out = {}
    for b in um.live_brokers:
        [e] = b.endpoints
        assert (e.listener, e.security_protocol, b.rack) == ("PLAINTEXT", PLAINTEXT, None)
        out[b.id] = (e.host, e.port)
    return out


def partition_states(um: Any) -> list[tuple[Any, ...]]:
    return [
        (
            *(t.topic_name, t.topic_id, p.partition_index, p.leader, p.leader_epoch, p.isr),
            *(p.zk_version, p.replicas, p.offline_replicas),
        )
        for t in um.topic_states
        for p in t.partition_states
    ]


def alter_partition(
    epoch: int, broker1_epoch: int, topic_id: uuid.UUID, isr: list[int], partition_epoch: int
) -> Any:
    """Broker 2's AlterPartition of the topic's partition 0 to `isr` (every version's fields)."""
    P = AlterPartitionRequest.Topic.Partition
    epochs = {2: epoch, 1: broker1_epoch}
    part = P(
        partition_index=0,
        leader_epoch=0,
        new_isr=isr,
        new_isr_with_epochs=[
            P.BrokerState(broker_id=b, broker_epoch=epochs.get(b, -1)) for b in isr
        ],
        partition_epoch=partition_epoch,
    )
    topic = AlterPartitionRequest.Topic(topic_name=TOPIC, topic_id=topic_id, partitions=[part])
    return AlterPartitionRequest(broker_id=2, broker_epoch=epoch, topics=[topic])


GHOST = "ghost"
GHOST_ID = uuid.UUID("5ca1ab1e-0000-4000-8000-00000000beef")


def old_controller_orders(port: int) -> list[tuple[ApiKey, int, Any]]:
    """LeaderAndIsr, StopReplica and UpdateMetadata at every version from controller epoch 0."""
    orders: list[tuple[ApiKey, int, Any]] = []
    lai_state = LeaderAndIsrRequest.LeaderAndIsrPartitionState
    for v in range(8):
        state = lai_state(
            topic_name=GHOST, leader=1, leader_epoch=5, isr=[1], replicas=[1], is_new=True
        )
        req = LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=0,
            ungrouped_partition_states=[state],
            topic_states=[
                LeaderAndIsrRequest.TopicState(
                    topic_name=GHOST, topic_id=GHOST_ID, partition_states=[state]
                )
            ],
            live_leaders=[LeaderAndIsrRequest.LiveLeader(1, "127.0.0.1", port)],
        )
        orders.append((ApiKey.LEADER_AND_ISR, v, req))
    for v in range(5):
        req = StopReplicaRequest(
            controller_id=1,
            controller_epoch=0,
            delete_partitions=True,
            ungrouped_partitions=[StopReplicaRequest.PartitionV0(GHOST, 0)],
            topics=[StopReplicaRequest.TopicV1(GHOST, [0])],
            topic_states=[
                StopReplicaRequest.TopicState(
                    GHOST, [StopReplicaRequest.TopicState.PartitionState(0, 5, True)]
                )
            ],
        )
        orders.append((ApiKey.STOP_REPLICA, v, req))
    um_state = UpdateMetadataRequest.UpdateMetadataPartitionState
    for v in range(9):
        state = um_state(topic_name=GHOST, leader=1, leader_epoch=5, isr=[1], replicas=[1])
        endpoint = UpdateMetadataRequest.Broker.Endpoint(port, "127.0.0.1", "PLAINTEXT", 0)
        req = UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=0,
            ungrouped_partition_states=[state],
            topic_states=[UpdateMetadataRequest.TopicState(GHOST, GHOST_ID, [state])],
            live_brokers=[
                UpdateMetadataRequest.Broker(
                    id=1, v0_host="127.0.0.1", v0_port=port, endpoints=[endpoint]
                )
            ],
        )
        orders.append((ApiKey.UPDATE_METADATA, v, req))
    return orders


def test_an_old_controller_is_refused_alike(
    kafka: KafkaZkBroker, zk: KazooClient, broker: BrokerProcess
) -> None:
    """kbroker's requests, decoded by Kafka; Kafka's answers, decoded by kbroker; and a single
    kbroker node answers exactly what Kafka answers a controller older than its own."""
    assert int(zk.get("/controller_epoch")[0]) >= 1
    with BrokerClient(kafka.bootstrap, timeout=10) as k, BrokerClient(broker.bootstrap) as ours:
        for key, version, req in old_controller_orders(kafka.port):
            theirs = k.request(key, version, req)
            assert theirs.error_code == ErrorCode.STALE_CONTROLLER_EPOCH, (key, version)
            assert ours.request(key, version, req) == theirs, (key, version)
        # nothing changed in Kafka: the ghost topic does not exist
        meta = k.request(ApiKey.METADATA, 12, MetadataRequest(topics=None))
        assert GHOST not in {t.name for t in meta.topics}


def test_a_broker_that_is_not_the_controller_is_answered_alike(
    kafka: KafkaZkBroker, kafka_follower: KafkaZkBroker, broker: BrokerProcess
) -> None:
    """ControlledShutdown and AlterPartition at every version to Kafka's broker 3 (not the
    controller) and to a kbroker node: the same answers. Kafka's non-controller refuses a
    ControlledShutdown with STALE_CONTROLLER_EPOCH (its "controller moved" error) and an
    AlterPartition with NOT_CONTROLLER."""
    with (
        BrokerClient(kafka_follower.bootstrap, timeout=10) as k,
        BrokerClient(broker.bootstrap) as ours,
    ):
        for version in range(4):
            req = ControlledShutdownRequest(broker_id=3, broker_epoch=-1)
            theirs = k.request(ApiKey.CONTROLLED_SHUTDOWN, version, req)
            assert theirs.error_code == ErrorCode.STALE_CONTROLLER_EPOCH, version
            assert ours.request(ApiKey.CONTROLLED_SHUTDOWN, version, req) == theirs, version
        for version in range(4):
            req = alter_partition(1, 1, GHOST_ID, [3], 0)
            theirs = k.request(ApiKey.ALTER_PARTITION, version, req)
            assert theirs.error_code == ErrorCode.NOT_CONTROLLER, version
            assert ours.request(ApiKey.ALTER_PARTITION, version, req) == theirs, version
        req = AllocateProducerIdsRequest(broker_id=3, broker_epoch=-1)
        theirs = k.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, req)
        assert theirs.error_code == ErrorCode.NOT_CONTROLLER
        assert ours.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, req) == theirs


def allocation_answers(controller: str, broker_id: int, epoch: int) -> list[tuple[int, int]]:
    """(error code, block length) of AllocateProducerIds to ``controller`` for live broker
    ``broker_id`` registered in ``epoch``: in that epoch, an older one, for an unregistered
    broker; and the blocks granted twice in a row follow each other."""
    answers = []
    with BrokerClient(controller, timeout=10) as c:

        def ask(broker: int, in_epoch: int) -> Any:
            req = AllocateProducerIdsRequest(broker_id=broker, broker_epoch=in_epoch)
            return c.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, req)

        first, second = ask(broker_id, epoch), ask(broker_id, epoch)
        assert second.producer_id_start == first.producer_id_start + first.producer_id_len
        for resp in (first, ask(broker_id, epoch - 1), ask(99, epoch)):
            answers.append((resp.error_code, resp.producer_id_len))
    return answers


# What Kafka 3.9.1's controller answers (tests/cluster/test_mixed_cluster.py asks a kbroker
# controller the same).
ALLOCATION_ANSWERS = [
    (ErrorCode.NONE, 1000),
    (ErrorCode.STALE_BROKER_EPOCH, 0),
    (ErrorCode.BROKER_ID_NOT_REGISTERED, 0),
]


def test_the_controller_allocates_producer_ids(kafka: KafkaZkBroker, zk: KazooClient) -> None:
    epoch = zk.get("/brokers/ids/1")[1].czxid
    assert allocation_answers(kafka.bootstrap, 1, epoch) == ALLOCATION_ANSWERS
