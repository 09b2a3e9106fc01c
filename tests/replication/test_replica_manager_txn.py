"""The replica manager's transaction interfaces in-process, on real logs: WriteTxnMarkers'
per-partition answers and acks=all, the marker listeners, read_committed reads with
their aborted transactions, and KIP-890 verification through a `TxnVerifier`.

The verifier here is a fake coordinator (what it answers is the test's input); the
transaction coordinator implements the real one, tested end to end with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from kbroker._kbroker import build_batch
from kbroker.errors import ErrorCode
from kbroker.log import TopicPartition
from kbroker.metadata.model import PartitionState
from kbroker.replication.partition import Partition
from kbroker.replication.replica_manager import FetchParams, FetchPartition, ReplicaManager
from kbroker.replication.txn import TxnMarker
from tests.replication.test_replica_manager import BROKER, Fixture

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
E = ErrorCode
PID = 4242


def txn_batch(seq: int, n: int = 2, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch(
        [(b"k", b"v%d" % i, []) for i in range(n)],
        timestamp=time.time_ns() // 1_000_000,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


class FakeCoordinator:
    """A `TxnVerifier` answering from ``answers`` (NONE for partitions not in it); it
    notes each question, and waits for ``release`` when one is given."""

    def __init__(self) -> None:
        self.answers: dict[TopicPartition, ErrorCode] = {}
        self.asked: list[tuple[str, int, int, list[TopicPartition]]] = []
        self.release: asyncio.Event | None = None
        self.fail = False

    async def verify(
        self, transactional_id: str, producer_id: int, epoch: int, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        self.asked.append((transactional_id, producer_id, epoch, list(tps)))
        if self.release is not None:
            await self.release.wait()
        if self.fail:
            raise ConnectionError("the coordinator went away")
        return {tp: self.answers.get(tp, E.NONE) for tp in tps}


def run(path: Path, body: Callable[[Fixture], Awaitable[None]]) -> None:
    async def main() -> None:
        fixture = Fixture(path)
        try:
            await body(fixture)
        finally:
            fixture.replicas.shutdown()
            fixture.logs.close()

    asyncio.run(main())


def committed_read(
    replicas: ReplicaManager, tp: TopicPartition = TP
) -> tuple[int, list[tuple[int, int]] | None, int]:
    params = FetchParams(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, read_committed=True)
    (r,) = replicas.read_from_local_log(params, [FetchPartition(tp, 0, 1 << 20)])[0]
    return r.last_stable_offset, r.aborted_transactions, 0 if r.records is None else len(r.records)


def marker(
    committed: bool, *tps: TopicPartition, epoch: int = 0, coordinator: int = 0
) -> TxnMarker:
    return TxnMarker(PID, epoch, coordinator, committed, tps)


def test_markers_answer_per_partition_and_tell_the_listeners(tmp_path: Path) -> None:
    run(tmp_path, _markers_answer_per_partition)


async def _markers_answer_per_partition(fx: Fixture) -> None:
    fx.add(TP)
    heard: list[tuple[TopicPartition, int, bool, int]] = []
    fx.replicas.add_marker_listener(lambda *event: heard.append(event))
    done = fx.replicas.append_records({TP: txn_batch(0)}, -1, 1000)
    assert done.result()[TP].error == E.NONE
    assert committed_read(fx.replicas)[:2] == (0, [])  # the open transaction holds it
    answer = await fx.replicas.write_txn_markers(marker(False, TP, TP1), 1000)
    assert answer == {TP: E.NONE, TP1: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert heard == [(TP, PID, False, 2)]
    lso, aborted, size = committed_read(fx.replicas)
    assert (lso, aborted) == (3, [(PID, 0)]) and size > 0
    # Stale markers are refused and written nowhere; the listeners hear nothing more.
    log = fx.replicas.get_partition(TP).log  # type: ignore[union-attr]
    end = log.log_end_offset
    old_coordinator = marker(True, TP, coordinator=-1)
    assert await fx.replicas.write_txn_markers(old_coordinator, 1000) == {
        TP: E.TRANSACTION_COORDINATOR_FENCED
    }
    bumped = marker(False, TP, epoch=1)  # a coordinator fencing the producer
    assert await fx.replicas.write_txn_markers(bumped, 1000) == {TP: E.NONE}
    zombie = marker(True, TP, epoch=0)
    assert await fx.replicas.write_txn_markers(zombie, 1000) == {TP: E.INVALID_PRODUCER_EPOCH}
    assert log.log_end_offset == end + 1
    assert heard == [(TP, PID, False, 2), (TP, PID, False, 3)]


def test_a_leader_tells_its_listeners_once_the_marker_is_replicated(tmp_path: Path) -> None:
    run(tmp_path, _told_once_replicated)


async def _told_once_replicated(fx: Fixture) -> None:
    follower = 2
    state = PartitionState(
        replicas=[BROKER, follower], leader=BROKER, leader_epoch=0, isr=[BROKER, follower]
    )
    partition = Partition(fx.logs.get_or_create(TP), state, BROKER, new=True)
    fx.replicas.add_partition(partition)
    heard: list[tuple[TopicPartition, int, bool, int]] = []
    fx.replicas.add_marker_listener(lambda *event: heard.append(event))
    fx.replicas.append_records({TP: txn_batch(0)}, 1, 1000)
    write = fx.replicas.write_txn_markers(marker(True, TP), 10_000)
    await asyncio.sleep(0)
    assert not write.done() and heard == []
    partition.update_follower_fetch_state(follower, 3, 0, 1)
    assert await write == {TP: E.NONE}
    assert heard == [(TP, PID, True, 2)]


def test_verification_asks_the_coordinator_once_per_transaction(tmp_path: Path) -> None:
    run(tmp_path, _verification)


async def _verification(fx: Fixture) -> None:
    fx.add(TP)
    fx.add(TP1)
    coordinator = FakeCoordinator()
    fx.replicas.set_txn_verifier(coordinator)
    # TP1 is not in the transaction: refused, nothing appended; TP is.
    coordinator.answers = {TP1: E.INVALID_TXN_STATE}
    results = await fx.replicas.append_records(
        {TP: txn_batch(0), TP1: txn_batch(0)}, -1, 1000, transactional_id="tx"
    )
    assert coordinator.asked == [("tx", PID, 0, [TP, TP1])]
    assert results[TP].error == E.NONE
    assert results[TP1].error == E.INVALID_TXN_STATE
    assert results[TP1].message == "Partition was not added to the transaction"
    assert fx.replicas.get_partition(TP1).log.log_end_offset == 0  # type: ignore[union-attr]
    # The transaction is open on TP: its next batch is not verified again.
    again = fx.replicas.append_records({TP: txn_batch(2)}, -1, 1000, transactional_id="tx")
    assert again.done() and again.result()[TP].error == E.NONE
    assert len(coordinator.asked) == 1
    # Unverifiable for now: the producer retries (NOT_ENOUGH_REPLICAS, Kafka's choice).
    coordinator.answers = {TP1: E.COORDINATOR_NOT_AVAILABLE}
    results = await fx.replicas.append_records({TP1: txn_batch(0)}, -1, 1000, transactional_id="tx")
    assert results[TP1].error == E.NOT_ENOUGH_REPLICAS
    assert "COORDINATOR_NOT_AVAILABLE" in (results[TP1].message or "")
    coordinator.answers = {TP1: E.PRODUCER_FENCED}
    results = await fx.replicas.append_records({TP1: txn_batch(0)}, -1, 1000, transactional_id="tx")
    assert results[TP1].error == E.INVALID_PRODUCER_EPOCH
    coordinator.fail = True
    results = await fx.replicas.append_records({TP1: txn_batch(0)}, -1, 1000, transactional_id="tx")
    assert results[TP1].error == E.NOT_ENOUGH_REPLICAS
    # Switched off (transaction.partition.verification.enable=false): no question asked.
    fx.replicas.set_txn_verifier(coordinator, lambda: False)
    asked = len(coordinator.asked)
    results = await fx.replicas.append_records({TP1: txn_batch(0)}, -1, 1000, transactional_id="tx")
    assert results[TP1].error == E.NONE and len(coordinator.asked) == asked


def test_a_marker_between_verification_and_append_refuses_the_batch(tmp_path: Path) -> None:
    run(tmp_path, _aba)


async def _aba(fx: Fixture) -> None:
    fx.add(TP)
    coordinator = FakeCoordinator()
    coordinator.release = asyncio.Event()
    fx.replicas.set_txn_verifier(coordinator)
    produce = fx.replicas.append_records({TP: txn_batch(0)}, -1, 1000, transactional_id="tx")
    await asyncio.sleep(0)
    assert coordinator.asked and not produce.done()
    # The coordinator aborts the transaction meanwhile (its marker lands first) ...
    assert await fx.replicas.write_txn_markers(marker(False, TP), 1000) == {TP: E.NONE}
    # ... so the late batch, verified for the transaction that ended, is refused.
    coordinator.release.set()
    results = await produce
    assert results[TP].error == E.INVALID_TXN_STATE
    assert fx.replicas.get_partition(TP).log.log_end_offset == 1  # type: ignore[union-attr]
    assert committed_read(fx.replicas)[:2] == (1, [])


def test_the_cleaner_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    run(tmp_path, _cleaner_bound)


async def _cleaner_bound(fx: Fixture) -> None:
    fx.add(TP)
    plain = build_batch([(b"k", b"v", [])], timestamp=1)
    assert fx.replicas.append_records({TP: plain}, -1, 1000).result()[TP].error == E.NONE
    assert fx.replicas.cleanable_bound_of(TP) == 1  # the high watermark
    done = fx.replicas.append_records({TP: txn_batch(0)}, -1, 1000)
    assert done.result()[TP].error == E.NONE
    assert fx.replicas.append_records({TP: plain}, -1, 1000).result()[TP].error == E.NONE
    # The open transaction from offset 1 holds the bound below the high watermark.
    assert fx.replicas.cleanable_bound_of(TP) == 1
    assert await fx.replicas.write_txn_markers(marker(True, TP), 1000) == {TP: E.NONE}
    assert fx.replicas.cleanable_bound_of(TP) == 5
    # A log no partition serves has no producer state: it is not cleaned.
    assert fx.replicas.cleanable_bound_of(TP1) == 0
