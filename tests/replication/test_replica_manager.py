"""ReplicaManager in-process: appends, reads, the fetch and produce purgatories, leadership.

Real logs in a temporary directory; time in the purgatories moves by hand.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from kbroker._kbroker import build_batch
from kbroker.config import BrokerConfig, TopicConfig
from kbroker.errors import ErrorCode
from kbroker.log import Log, LogManager, TopicPartition, log_config_from_topic
from kbroker.metadata.model import PartitionState
from kbroker.replication.partition import Partition
from kbroker.replication.replica_manager import (
    FetchParams,
    FetchPartition,
    LeaderAndIsrOrder,
    ReadResult,
    ReplicaManager,
    StopReplicaOrder,
)
from tests.replication.test_purgatory import ManualScheduler

TP = TopicPartition("t", 0)
E = ErrorCode
BROKER = 1


def batch(value: bytes = b"v" * 100) -> bytes:
    return build_batch([(b"k", value, [])], timestamp=1)


class Fixture:
    def __init__(self, path: Path, overrides: dict[str, str] | None = None) -> None:
        self.config = BrokerConfig.from_strings((overrides or {}).items())
        self.clock = ManualScheduler()
        self.logs = LogManager(path, lambda _t: log_config_from_topic(self.topic_config("t")))
        self.logs.open()
        self.replicas = ReplicaManager(BROKER, self.logs, self.topic_config, self.clock)
        self.events: list[tuple[TopicPartition, bool, int]] = []
        self.replicas.add_listener(lambda tp, leads, epoch: self.events.append((tp, leads, epoch)))

    def topic_config(self, _topic: str) -> TopicConfig:
        return self.config.effective_topic_config({})

    def add(self, tp: TopicPartition = TP, isr: list[int] | None = None) -> Partition:
        state = PartitionState(
            replicas=[BROKER], leader=BROKER, leader_epoch=0, isr=isr or [BROKER]
        )
        partition = Partition(self.logs.get_or_create(tp), state, BROKER, new=True)
        self.replicas.add_partition(partition)
        return partition

    def fetch(
        self, offset: int, min_bytes: int = 1, wait_ms: int = 500, tp: TopicPartition = TP
    ) -> asyncio.Future[list[ReadResult]]:
        params = FetchParams(
            max_wait_ms=wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, read_committed=False
        )
        return self.replicas.fetch_records(params, [FetchPartition(tp, offset, 1 << 20)])


def run(path: Path, body: Callable[[Fixture], Awaitable[None]], **overrides: str) -> None:
    async def main() -> None:
        fixture = Fixture(path, overrides)
        try:
            await body(fixture)
        finally:
            fixture.replicas.shutdown()
            fixture.logs.close()

    asyncio.run(main())


def test_append_answers_at_once_with_offsets(tmp_path: Path) -> None:
    run(tmp_path, _append_answers_at_once_with_offsets)


async def _append_answers_at_once_with_offsets(fx: Fixture) -> None:
    fx.add()
    done = fx.replicas.append_records({TP: batch(), TopicPartition("t", 9): batch()}, 1, 1000)
    assert done.done()
    results = done.result()
    assert results[TP].error == ErrorCode.NONE and results[TP].base_offset == 0
    assert results[TopicPartition("t", 9)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    second = fx.replicas.append_records({TP: batch()}, -1, 1000)
    assert second.done() and second.result()[TP].base_offset == 1


def test_bad_batch_is_refused_whole(tmp_path: Path) -> None:
    run(tmp_path, _bad_batch_is_refused_whole)


async def _bad_batch_is_refused_whole(fx: Fixture) -> None:
    fx.add()
    data = bytearray(batch())
    data[-1] ^= 0xFF  # breaks the CRC
    result = fx.replicas.append_records({TP: bytes(data)}, 1, 1000).result()[TP]
    assert result.error == ErrorCode.CORRUPT_MESSAGE
    assert fx.replicas.get_partition(TP).log.log_end_offset == 0  # type: ignore[union-attr]


def test_fetch_waits_until_data_arrives(tmp_path: Path) -> None:
    run(tmp_path, _fetch_waits_until_data_arrives)


async def _fetch_waits_until_data_arrives(fx: Fixture) -> None:
    fx.add()
    waiting = fx.fetch(0)
    assert not waiting.done() and fx.replicas.fetch_purgatory.watched(TP) == 1
    fx.replicas.append_records({TP: batch()}, 1, 1000)
    assert waiting.done()
    [result] = waiting.result()
    assert result.error == ErrorCode.NONE and result.high_watermark == 1
    assert result.records is not None and len(result.records) == len(batch())
    assert len(fx.replicas.fetch_purgatory) == 0


def test_fetch_waits_for_min_bytes(tmp_path: Path) -> None:
    run(tmp_path, _fetch_waits_for_min_bytes)


async def _fetch_waits_for_min_bytes(fx: Fixture) -> None:
    fx.add()
    waiting = fx.fetch(0, min_bytes=3 * len(batch()))
    fx.replicas.append_records({TP: batch()}, 1, 1000)
    fx.replicas.append_records({TP: batch()}, 1, 1000)
    assert not waiting.done()
    fx.replicas.append_records({TP: batch()}, 1, 1000)
    assert waiting.done() and len(waiting.result()[0].records or b"") == 3 * len(batch())


def test_fetch_expires_empty_at_max_wait(tmp_path: Path) -> None:
    run(tmp_path, _fetch_expires_empty_at_max_wait)


async def _fetch_expires_empty_at_max_wait(fx: Fixture) -> None:
    fx.add()
    waiting = fx.fetch(0, wait_ms=500)
    fx.clock.advance(0.499)
    assert not waiting.done()
    fx.clock.advance(0.001)
    assert waiting.done()
    [result] = waiting.result()
    assert result.error == ErrorCode.NONE and result.records is None


def test_errors_answer_at_once(tmp_path: Path) -> None:
    run(tmp_path, _errors_answer_at_once)


async def _errors_answer_at_once(fx: Fixture) -> None:
    fx.add()
    done = fx.fetch(0, tp=TopicPartition("nope", 0))
    assert done.done() and done.result()[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    out_of_range = fx.fetch(5)
    assert out_of_range.done() and out_of_range.result()[0].error == ErrorCode.OFFSET_OUT_OF_RANGE
    params = FetchParams(500, 1, 1 << 20, False)
    fenced = fx.replicas.fetch_records(
        params, [FetchPartition(TP, 0, 1 << 20, current_leader_epoch=7)]
    )
    assert fenced.done() and fenced.result()[0].error == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_losing_leadership_answers_waiting_requests(tmp_path: Path) -> None:
    run(tmp_path, _losing_leadership_answers_waiting_requests)


async def _losing_leadership_answers_waiting_requests(fx: Fixture) -> None:
    fx.add()
    assert fx.events == [(TP, True, 0)]
    waiting = fx.fetch(0)
    fx.replicas.make_follower(
        TP, PartitionState(replicas=[BROKER, 2], leader=2, leader_epoch=1, isr=[2])
    )
    assert waiting.done() and waiting.result()[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fx.events[-1] == (TP, False, 1)
    refused = fx.replicas.append_records({TP: batch()}, 1, 1000).result()[TP]
    assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fx.replicas.make_leader(
        TP, PartitionState(replicas=[BROKER, 2], leader=BROKER, leader_epoch=2, isr=[BROKER])
    )
    assert fx.events[-1] == (TP, True, 2)
    assert fx.replicas.append_records({TP: batch()}, 1, 1000).result()[TP].error == ErrorCode.NONE


def test_acks_all_waits_for_the_isr_and_times_out(tmp_path: Path) -> None:
    run(tmp_path, _acks_all_waits_for_the_isr_and_times_out)


async def _acks_all_waits_for_the_isr_and_times_out(fx: Fixture) -> None:
    # A second replica in the ISR holds the high watermark back: nothing replicates it here.
    fx.add(isr=[BROKER, 2])
    done = fx.replicas.append_records({TP: batch()}, -1, 1500)
    assert not done.done() and fx.replicas.produce_purgatory.watched(TP) == 1
    fx.clock.advance(1.5)
    assert done.done()
    result = done.result()[TP]
    assert result.error == ErrorCode.REQUEST_TIMED_OUT and result.base_offset == 0
    # acks=1 does not wait.
    assert fx.replicas.append_records({TP: batch()}, 1, 1500).done()


def test_acks_all_completes_when_the_high_watermark_reaches_it(tmp_path: Path) -> None:
    run(tmp_path, _acks_all_completes_when_the_high_watermark_reaches_it)


async def _acks_all_completes_when_the_high_watermark_reaches_it(fx: Fixture) -> None:
    partition = fx.add(isr=[BROKER, 2])
    done = fx.replicas.append_records({TP: batch()}, -1, 30_000)
    assert not done.done()
    partition.become_leader(
        PartitionState(replicas=[BROKER], leader=BROKER, leader_epoch=0, isr=[BROKER])
    )
    fx.replicas.make_leader(TP, partition.state)
    assert done.done() and done.result()[TP].error == ErrorCode.NONE


def test_min_insync_replicas_refuses_acks_all(tmp_path: Path) -> None:
    run(tmp_path, _min_insync_replicas_refuses_acks_all, **{"min.insync.replicas": "2"})


async def _min_insync_replicas_refuses_acks_all(fx: Fixture) -> None:
    fx.add()
    result = fx.replicas.append_records({TP: batch()}, -1, 1000).result()[TP]
    assert result.error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert fx.replicas.append_records({TP: batch()}, 1, 1000).result()[TP].error == ErrorCode.NONE


def test_shutdown_answers_waiting_requests(tmp_path: Path) -> None:
    run(tmp_path, _shutdown_answers_waiting_requests)


async def _shutdown_answers_waiting_requests(fx: Fixture) -> None:
    fx.add(isr=[BROKER, 2])
    fetch = fx.fetch(0)
    produce = fx.replicas.append_records({TP: batch()}, -1, 30_000)
    fx.replicas.shutdown()
    assert fetch.done() and produce.done()
    assert produce.result()[TP].error == ErrorCode.REQUEST_TIMED_OUT
    assert fx.fetch(5).done()  # nothing waits after shutdown


# -- the controller's orders --------------------------------------------------------------


def _order(
    leader: int, epoch: int, replicas: list[int] | None = None, topic_id: uuid.UUID | None = None
) -> LeaderAndIsrOrder:
    replicas = replicas or [BROKER, 2]
    state = PartitionState(replicas=replicas, leader=leader, leader_epoch=epoch, isr=replicas)
    return LeaderAndIsrOrder(TP, state, topic_id or TOPIC_ID, is_new=True)


TOPIC_ID = uuid.UUID(int=7)


def test_leader_and_isr_creates_leads_follows_and_fences(tmp_path: Path) -> None:
    async def body(fx: Fixture) -> None:
        rm = fx.replicas
        opened: list[tuple[TopicPartition, uuid.UUID | None]] = []

        def open_log(tp: TopicPartition, topic_id: uuid.UUID | None) -> Log:
            opened.append((tp, topic_id))
            return fx.logs.get_or_create(tp)

        assert rm.become_leader_or_follower(3, [_order(BROKER, 0)], open_log) == {TP: E.NONE}
        assert opened == [(TP, TOPIC_ID)] and rm.leader_partition(TP).leader_epoch == 0
        assert fx.events == [(TP, True, 0)]
        # The same epoch again, or an older one: refused, nothing changes.
        assert rm.become_leader_or_follower(3, [_order(2, 0)], open_log) == {
            TP: E.STALE_CONTROLLER_EPOCH
        }
        assert rm.leader_partition(TP).is_leader
        # A newer epoch led by another broker: this one follows; clients are told so.
        assert rm.become_leader_or_follower(3, [_order(2, 1)], open_log) == {TP: E.NONE}
        assert fx.events[-1] == (TP, False, 1)
        result = await rm.append_records({TP: batch()}, 1, 1000)
        assert result[TP].error == E.NOT_LEADER_OR_FOLLOWER
        # Another topic id for the same name: refused.
        other = _order(BROKER, 5, topic_id=uuid.UUID(int=8))
        assert rm.become_leader_or_follower(3, [other], open_log) == {TP: E.INCONSISTENT_TOPIC_ID}
        # Not one of the replicas.
        assert rm.become_leader_or_follower(3, [_order(2, 6, [2, 3])], open_log) == {
            TP: E.UNKNOWN_TOPIC_OR_PARTITION
        }
        # An older controller's order is refused whole.
        assert rm.become_leader_or_follower(2, [_order(BROKER, 9)], open_log) is None
        assert len(opened) == 1

    run(tmp_path, body)


def test_a_fenced_leader_is_resigned_for_its_listeners(tmp_path: Path) -> None:
    """The coordinators must stop serving a partition whose leadership the controller
    fenced: at once when the fence is learnt, and at the latest when the order to follow
    comes (a fenced leader is no leader, yet its listeners had been told it leads)."""

    async def body(fx: Fixture) -> None:
        rm = fx.replicas

        def open_log(tp: TopicPartition, topic_id: uuid.UUID | None) -> Log:
            return fx.logs.get_or_create(tp)

        assert rm.become_leader_or_follower(3, [_order(BROKER, 0)], open_log) == {TP: E.NONE}
        partition = rm.leader_partition(TP)
        # Fenced without anyone being told (as when the fence comes with other news).
        partition.fenced = True
        assert fx.events == [(TP, True, 0)]
        assert rm.become_leader_or_follower(3, [_order(2, 1)], open_log) == {TP: E.NONE}
        assert fx.events == [(TP, True, 0), (TP, False, 1)]

        # Leading again; an ISR change the controller refuses as fenced resigns at once,
        # and the order to follow that comes later tells nothing twice.
        assert rm.become_leader_or_follower(3, [_order(BROKER, 2)], open_log) == {TP: E.NONE}
        partition = rm.leader_partition(TP)
        partition.pending_isr = [BROKER]
        partition.isr_change_answered(E.FENCED_LEADER_EPOCH, None)
        assert fx.events[-2:] == [(TP, True, 2), (TP, False, 2)]
        assert rm.become_leader_or_follower(3, [_order(2, 3)], open_log) == {TP: E.NONE}
        assert fx.events[-1] == (TP, False, 2)

    run(tmp_path, body)


def test_leader_and_isr_on_a_full_disk_answers_storage_error(tmp_path: Path) -> None:
    async def body(fx: Fixture) -> None:
        def broken(tp: TopicPartition, topic_id: uuid.UUID | None) -> Log:
            raise OSError(28, "No space left on device")

        errors = fx.replicas.become_leader_or_follower(1, [_order(BROKER, 0)], broken)
        assert errors == {TP: E.KAFKA_STORAGE_ERROR} and TP not in fx.replicas

    run(tmp_path, body)


def test_stop_replica_stops_serving_and_deletes_when_told(tmp_path: Path) -> None:
    async def body(fx: Fixture) -> None:
        rm = fx.replicas
        rm.become_leader_or_follower(
            4, [_order(BROKER, 2)], lambda tp, _id: fx.logs.get_or_create(tp)
        )
        assert (await rm.append_records({TP: batch()}, 1, 1000))[TP].error == E.NONE
        log_dir = fx.logs.get(TP).dir  # type: ignore[union-attr]
        # An order for an epoch older than the partition's is fenced (its own epoch is
        # taken, as Kafka 3.9 takes it).
        assert rm.stop_replicas(4, [StopReplicaOrder(TP, 1, delete=False)]) == {
            TP: E.FENCED_LEADER_EPOCH
        }
        assert rm.stop_replicas(3, [StopReplicaOrder(TP, 9, delete=False)]) is None
        assert rm.stop_replicas(4, [StopReplicaOrder(TP, 2, delete=False)]) == {TP: E.NONE}
        assert TP not in rm and log_dir.exists()  # stopped, the log kept
        assert fx.events[-1] == (TP, False, 2)
        # The topic is deleted: its log goes, though the partition is no longer served.
        assert rm.stop_replicas(4, [StopReplicaOrder(TP, -2, delete=True)]) == {TP: E.NONE}
        assert not log_dir.exists() and fx.logs.get(TP) is None

    run(tmp_path, body)


def test_writes_queued_when_the_partition_is_deleted_are_answered(tmp_path: Path) -> None:
    """StopReplica (delete) while produces are still queued on the I/O threads, or behind
    an idempotent write: the log they were for is closed, and each is answered
    NOT_LEADER_OR_FOLLOWER (the producer asks where the partition went and retries
    there). Before, the closed log's refusal escaped the answer's callback: the request
    was never answered, nor anything after it on its connection, and an idempotent
    producer waited for it (a reassignment's moved-away leader stalled its writes)."""

    async def main() -> None:
        config = BrokerConfig.from_strings([])

        def topic_config(_topic: str) -> TopicConfig:
            return config.effective_topic_config({})

        logs = LogManager(
            tmp_path, lambda _t: log_config_from_topic(topic_config("t")), io_threads=1
        )
        logs.open()
        rm = ReplicaManager(BROKER, logs, topic_config, ManualScheduler())
        try:
            order = _order(BROKER, 2, [BROKER])
            rm.become_leader_or_follower(4, [order], lambda tp, _id: logs.get_or_create(tp))
            assert (await rm.append_records({TP: batch()}, 1, 1000))[TP].error == E.NONE
            # In one pass of the loop, as a produce and the controller's order can come:
            # a write queued on the I/O threads (woken only after this pass), an
            # idempotent one waiting behind it, then the partition stopped and deleted.
            queued = rm.append_records({TP: batch()}, 1, 1000)
            idempotent = build_batch(
                [(b"k", b"v", [])], producer_id=7, producer_epoch=0, base_sequence=0
            )
            behind = rm.append_records({TP: idempotent}, 1, 1000)
            assert rm.stop_replicas(4, [StopReplicaOrder(TP, 2, delete=True)]) == {TP: E.NONE}
            for answer in (queued, behind):
                result = (await asyncio.wait_for(answer, 5))[TP]
                assert result.error == E.NOT_LEADER_OR_FOLLOWER, result
        finally:
            rm.shutdown()
            logs.close()

    asyncio.run(main())
