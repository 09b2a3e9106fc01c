"""The transaction coordinator driven directly, in-process, on a real broker's storage.

Each test runs on its own event loop with a Broker whose storage is open (no
network): the state machine, ``__transaction_state`` writes and loading are
real. What writes the markers on the partition leaders is a recorder here (it
answers as a leader would, with the errors a test gives it); the markers
themselves are the partition side's and are tested end to end with real
clients elsewhere. The clock is faked where timeouts and expiry are tested.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kbroker.broker import Broker
from kbroker.config import BrokerConfig
from kbroker.log import TopicPartition
from kbroker.log.log import now_ms
from kbroker.metadata.cache import BrokerInfo
from kbroker.protocol import ErrorCode
from kbroker.replication.txn import TxnMarker
from kbroker.txn import TransactionCoordinator, TxnState
from kbroker.txn.markers import MarkerDestinationUnreachable

E = ErrorCode
S = TxnState
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@dataclass
class Leaders:
    """Stands for the partition leaders the markers go to: records what it was asked to
    write, answering each partition with the errors queued for it (then NONE)."""

    written: list[tuple[TopicPartition, int, int, bool, int]] = field(default_factory=list)
    errors: dict[TopicPartition, list[ErrorCode]] = field(default_factory=dict)
    unreachable: bool = False
    requests: int = 0

    async def __call__(
        self, broker_id: int, markers: list[TxnMarker]
    ) -> list[dict[TopicPartition, ErrorCode]]:
        self.requests += 1
        if self.unreachable:
            raise MarkerDestinationUnreachable(f"broker {broker_id} is down")
        answers = []
        for m in markers:
            answer = {}
            for tp in sorted(m.partitions):
                queued = self.errors.get(tp)
                answer[tp] = queued.pop(0) if queued else E.NONE
                if answer[tp] == E.NONE:
                    self.written.append(
                        (tp, m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch)
                    )
            answers.append(answer)
        return answers


@dataclass
class Clock:
    now: int = 1_000_000

    def __call__(self) -> int:
        return self.now


@contextlib.asynccontextmanager
async def running(
    data: Path,
    *settings: tuple[str, str],
    clock: Callable[[], int] = now_ms,
    leaders: Leaders | None = None,
) -> AsyncIterator[tuple[TransactionCoordinator, Leaders]]:
    """A broker's storage with its transaction coordinator in process (no listener), topic
    t (2 partitions) and __transaction_state (4 partitions) created."""
    config = BrokerConfig.from_strings(
        [("log.dirs", str(data)), ("transaction.state.log.num.partitions", "4"), *settings]
    )
    broker = Broker(config)
    leaders = leaders or Leaders()
    broker.txn_coordinator = TransactionCoordinator(broker, leaders, clock=clock)
    broker.open_storage()
    broker.metadata_cache.put_broker(BrokerInfo(0, (("PLAINTEXT", "127.0.0.1", 9092),)))
    coordinator = broker.txn_coordinator
    await coordinator.start()
    if "t" not in broker.metadata_cache.topics():
        broker.create_topic("t", 2)
    assert coordinator.ensure_topic()
    await until(lambda: not coordinator.manager.loading, "the coordinator to load")
    try:
        yield coordinator, leaders
    finally:
        await coordinator.stop()
        broker.replica_manager.shutdown()
        broker.logs.close()


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


async def until(check: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def state_of(co: TransactionCoordinator, txn: str) -> TxnState | None:
    owned = co.manager.lookup(txn)
    return None if owned is None else owned.metadata.state


async def begun(co: TransactionCoordinator, txn: str, *tps: TopicPartition) -> tuple[int, int]:
    """A producer initialised for ``txn`` with a transaction open over ``tps``."""
    init = await co.init_producer_id(txn, 60000)
    assert init.error == E.NONE, init
    assert await co.add_partitions(txn, init.producer_id, init.producer_epoch, tps) == E.NONE
    return init.producer_id, init.producer_epoch


def test_a_committed_transaction_writes_its_markers_then_completes(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (co, leaders):
            pid, epoch = await begun(co, "tx", T0)
            assert (pid, epoch) == (0, 0)
            assert state_of(co, "tx") == S.ONGOING
            # Adding more (and again the same) grows it.
            assert await co.add_partitions("tx", pid, epoch, [T0, T1]) == E.NONE
            assert await co.end_transaction("tx", pid, epoch, committed=True) == E.NONE
            await until(lambda: state_of(co, "tx") == S.COMPLETE_COMMIT, "the completion")
            coordinator_epoch = co.manager.lookup("tx").coordinator_epoch  # type: ignore[union-attr]
            assert sorted(leaders.written) == [
                (T0, pid, epoch, True, coordinator_epoch),
                (T1, pid, epoch, True, coordinator_epoch),
            ]
            # The same end again is a retry; the other one a mistake.
            assert await co.end_transaction("tx", pid, epoch, committed=True) == E.NONE
            assert await co.end_transaction("tx", pid, epoch, True) == E.NONE
            assert await co.end_transaction("tx", pid, epoch, False) == E.INVALID_TXN_STATE
            # The next transaction, aborted this time.
            assert await co.add_partitions("tx", pid, epoch, [T1]) == E.NONE
            assert await co.end_transaction("tx", pid, epoch, committed=False) == E.NONE
            await until(lambda: state_of(co, "tx") == S.COMPLETE_ABORT, "the abort")
            assert leaders.written[-1][:4] == (T1, pid, epoch, False)

    run(main())


def test_a_new_instance_aborts_the_open_transaction_and_fences_the_old_one(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with running(tmp_path) as (co, leaders):
            pid, old = await begun(co, "tx", T0, T1)
            # The new instance: the open transaction is aborted with the next epoch, and it
            # is told to try again.
            assert (await co.init_producer_id("tx", 60000)).error == E.CONCURRENT_TRANSACTIONS
            await until(lambda: state_of(co, "tx") == S.COMPLETE_ABORT, "the fencing abort")
            assert sorted((tp, p, e, c) for tp, p, e, c, _ in leaders.written) == [
                (T0, pid, old + 1, False),
                (T1, pid, old + 1, False),
            ]
            again = await co.init_producer_id("tx", 60000)
            assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, pid, old + 2)
            # The old instance is fenced whatever it does.
            assert await co.add_partitions("tx", pid, old, [T0]) == E.PRODUCER_FENCED
            assert await co.end_transaction("tx", pid, old, True) == E.PRODUCER_FENCED
            assert await co.end_transaction("tx", pid, old + 1, True) == E.PRODUCER_FENCED
            assert co.verify_partitions("tx", pid, old, [T0]) == {T0: E.PRODUCER_FENCED}
            # A producer id that is not the id's.
            assert await co.add_partitions("tx", pid + 1, old + 2, [T0]) == (
                E.INVALID_PRODUCER_ID_MAPPING
            )

    run(main())


def test_init_producer_id_resumes_a_producer_that_names_its_epoch(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (co, _):
            first = await co.init_producer_id("tx", 60000)
            pid = first.producer_id
            # KIP-360: the producer names its id and epoch to carry on after an error.
            bumped = await co.init_producer_id("tx", 60000, (pid, 0))
            assert (bumped.error, bumped.producer_epoch) == (E.NONE, 1)
            # Its answer was lost and it asks again with the epoch it had: the same answer.
            retry = await co.init_producer_id("tx", 60000, (pid, 0))
            assert (retry.error, retry.producer_epoch) == (E.NONE, 1)
            # Neither the current epoch nor the previous one, or another producer id: fenced.
            assert (await co.init_producer_id("tx", 60000, (pid, 7))).error == E.PRODUCER_FENCED
            assert (await co.init_producer_id("tx", 60000, (pid + 5, 1))).error == (
                E.PRODUCER_FENCED
            )
            # A new instance (no epoch named) always gets the next epoch.
            assert (await co.init_producer_id("tx", 60000)).producer_epoch == 2

    run(main())


def test_bad_requests_get_kafkas_errors_and_change_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, ("transaction.max.timeout.ms", "60000")) as (co, leaders):
            assert (await co.init_producer_id("", 1000)).error == E.INVALID_REQUEST
            for timeout in (0, -1, 60001):
                assert (await co.init_producer_id("tx", timeout)).error == (
                    E.INVALID_TRANSACTION_TIMEOUT
                )
            assert co.manager.lookup("tx") is None  # nothing was created
            assert await co.end_transaction("tx", 0, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
            assert await co.add_partitions("tx", 0, 0, [T0]) == E.INVALID_PRODUCER_ID_MAPPING
            assert await co.add_partitions("", 0, 0, [T0]) == E.INVALID_REQUEST
            init = await co.init_producer_id("tx", 60000)
            pid, epoch = init.producer_id, init.producer_epoch
            # No transaction open: nothing to end.
            assert await co.end_transaction("tx", pid, epoch, True) == E.INVALID_TXN_STATE
            assert await co.end_transaction("tx", pid, epoch + 1, True) == E.PRODUCER_FENCED
            assert await co.end_transaction("tx", pid + 1, epoch, True) == (
                E.INVALID_PRODUCER_ID_MAPPING
            )
            assert state_of(co, "tx") == S.EMPTY and not leaders.written
            described = co.describe("tx")
            assert (described.error, described.state, described.partitions) == (
                E.NONE,
                "Empty",
                [],
            )
            assert co.describe("nobody").error == E.TRANSACTIONAL_ID_NOT_FOUND
            assert co.describe("").error == E.INVALID_REQUEST

    run(main())


def test_kip_890_verification_answers_which_partitions_are_in_the_transaction(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with running(tmp_path) as (co, leaders):
            pid, epoch = await begun(co, "tx", T0)
            assert co.verify_partitions("tx", pid, epoch, [T0, T1]) == {
                T0: E.NONE,
                T1: E.TRANSACTION_ABORTABLE,
            }
            assert co.verify_partitions("tx", pid + 1, epoch, [T0]) == {
                T0: E.INVALID_PRODUCER_ID_MAPPING
            }
            assert co.verify_partitions("nobody", pid, epoch, [T0]) == {
                T0: E.INVALID_PRODUCER_ID_MAPPING
            }
            # While the transaction ends, nothing is verified.
            leaders.unreachable = True
            assert await co.end_transaction("tx", pid, epoch, True) == E.NONE
            assert co.verify_partitions("tx", pid, epoch, [T0]) == {T0: E.CONCURRENT_TRANSACTIONS}
            # Nor is anything added until it is complete.
            assert await co.add_partitions("tx", pid, epoch, [T1]) == E.CONCURRENT_TRANSACTIONS
            leaders.unreachable = False
            await until(lambda: state_of(co, "tx") == S.COMPLETE_COMMIT, "the completion")
            assert co.verify_partitions("tx", pid, epoch, [T0]) == {T0: E.TRANSACTION_ABORTABLE}

    run(main())


def test_markers_are_retried_until_written_and_stop_when_fenced(tmp_path: Path) -> None:
    async def main() -> None:
        leaders = Leaders(
            errors={
                T0: [E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT],
                T1: [E.KAFKA_STORAGE_ERROR],
            }
        )
        async with running(tmp_path, leaders=leaders) as (co, _):
            pid, epoch = await begun(co, "tx", T0, T1)
            leaders.unreachable = True  # the first requests do not get through either
            assert await co.end_transaction("tx", pid, epoch, True) == E.NONE
            await until(lambda: leaders.requests >= 2, "a retry")
            assert state_of(co, "tx") == S.PREPARE_COMMIT
            assert [tp for tp, *_ in leaders.written] == []
            assert co.describe("tx").partitions == [T0, T1]  # the ones still without markers
            leaders.unreachable = False
            await until(lambda: state_of(co, "tx") == S.COMPLETE_COMMIT, "the completion")
            assert sorted(tp for tp, *_ in leaders.written) == [T0, T1]
            assert co.markers.transactions_under_way == 0

            # A leader that says a newer producer epoch or coordinator exists: no more tries.
            assert await co.add_partitions("tx", pid, epoch, [T0, T1]) == E.NONE
            leaders.errors = {T0: [E.TRANSACTION_COORDINATOR_FENCED], T1: [E.NONE]}
            before = leaders.requests
            assert await co.end_transaction("tx", pid, epoch, False) == E.NONE
            await until(lambda: co.markers.transactions_under_way == 0, "the markers to stop")
            await asyncio.sleep(0.3)  # more than the retry backoff: nothing is sent again
            assert leaders.requests == before + 1
            assert state_of(co, "tx") == S.PREPARE_ABORT

    run(main())


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        clock = Clock()
        async with running(tmp_path, clock=clock) as (co, leaders):
            init = await co.init_producer_id("slow", 5000)
            pid, epoch = init.producer_id, init.producer_epoch
            assert await co.add_partitions("slow", pid, epoch, [T0]) == E.NONE
            fast_pid, fast_epoch = await begun(co, "fast", T1)
            clock.now += 5000
            assert co.abort_timed_out() == []  # not past it yet
            clock.now += 1
            aborts = co.abort_timed_out()
            assert len(aborts) == 1 and await aborts[0] == E.NONE
            await until(lambda: state_of(co, "slow") == S.COMPLETE_ABORT, "the abort")
            assert leaders.written == [(T0, pid, epoch + 1, False, 0)]
            # The producer finds out at its next request.
            assert await co.add_partitions("slow", pid, epoch, [T0]) == E.PRODUCER_FENCED
            assert await co.end_transaction("slow", pid, epoch, True) == E.PRODUCER_FENCED
            # "fast" started at the same time with a timeout of a minute: left alone.
            assert state_of(co, "fast") == S.ONGOING
            assert (fast_pid, fast_epoch) == (co.manager.lookup("fast").metadata.producer_id, 0)  # type: ignore[union-attr]

    run(main())


def test_idle_ids_expire_and_stay_forgotten(tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        settings = ("transactional.id.expiration.ms", "10000")
        async with running(tmp_path, settings, clock=clock) as (co, _):
            init = await co.init_producer_id("idle", 60000)
            await begun(co, "open", T0)
            clock.now += 10_001
            writes = co.expire_ids()
            assert [await w for w in writes] == [E.NONE]
            # The id with a transaction open never expires.
            assert co.manager.lookup("idle") is None and state_of(co, "open") == S.ONGOING
            assert co.describe("idle").error == E.TRANSACTIONAL_ID_NOT_FOUND
        # Its tombstone keeps it gone after a restart; a new producer gets a new id.
        async with running(tmp_path, settings, clock=clock) as (co, _):
            assert co.manager.lookup("idle") is None and state_of(co, "open") == S.ONGOING
            again = await co.init_producer_id("idle", 60000)
            assert (again.error, again.producer_epoch) == (E.NONE, 0)
            assert again.producer_id != init.producer_id

    run(main())


def test_a_restart_loads_every_id_and_finishes_what_was_ended(tmp_path: Path) -> None:
    async def main() -> None:
        leaders = Leaders(unreachable=True)
        async with running(tmp_path, leaders=leaders) as (co, _):
            ended = await begun(co, "ended", T0, T1)
            assert await co.end_transaction("ended", *ended, committed=True) == E.NONE
            still_open = await begun(co, "open", T1)
            idle = await co.init_producer_id("idle", 30000)
            assert state_of(co, "ended") == S.PREPARE_COMMIT
        # The new coordinator (here: the same broker again) writes the markers itself.
        async with running(tmp_path) as (co, leaders):
            await until(lambda: state_of(co, "ended") == S.COMPLETE_COMMIT, "the completion")
            assert sorted((tp, p, e, c) for tp, p, e, c, _ in leaders.written) == [
                (T0, *ended, True),
                (T1, *ended, True),
            ]
            described = co.describe("open")
            assert (described.state, described.partitions, described.producer_epoch) == (
                "Ongoing",
                [T1],
                still_open[1],
            )
            assert co.describe("idle").timeout_ms == 30000
            # Epochs carry on from what was stored.
            assert (await co.init_producer_id("idle", 30000)).producer_epoch == (
                idle.producer_epoch + 1
            )
            error, found, unknown = co.list_transactions(set(), {"Ongoing", "Nonsense"}, -1)
            assert (error, [t.transactional_id for t in found], unknown) == (
                E.NONE,
                ["open"],
                ["Nonsense"],
            )
            _, found, _ = co.list_transactions({ended[0]}, set(), -1)
            assert [t.transactional_id for t in found] == ["ended"]

    run(main())


def test_a_partition_led_elsewhere_is_not_coordinated_here(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (co, leaders):
            pid, epoch = await begun(co, "tx", T0)
            index = co.partition_of("tx")
            assert index is not None
            epoch_before = co.manager.owned_partitions()[index]
            co.manager.on_resigned(index, epoch_before + 1)
            assert co.coordination_error("tx") == E.NOT_COORDINATOR
            assert await co.end_transaction("tx", pid, epoch, True) == E.NOT_COORDINATOR
            assert (await co.init_producer_id("tx", 60000)).error == E.NOT_COORDINATOR
            # An older epoch's news is stale and ignored; a newer election loads it again.
            co.manager.on_elected(index, epoch_before)
            assert co.coordination_error("tx") == E.NOT_COORDINATOR
            co.manager.on_elected(index, epoch_before + 2)
            await until(lambda: co.coordination_error("tx") == E.NONE, "the load")
            assert state_of(co, "tx") == S.ONGOING
            assert await co.end_transaction("tx", pid, epoch, True) == E.NONE
            await until(lambda: state_of(co, "tx") == S.COMPLETE_COMMIT, "the completion")
            # The markers carry the coordinator epoch of the election.
            assert leaders.written == [(T0, pid, epoch, True, epoch_before + 2)]

    run(main())


@pytest.mark.parametrize("count", [1, 3])
def test_many_transactions_at_once_share_requests(tmp_path: Path, count: int) -> None:
    async def main() -> None:
        async with running(tmp_path) as (co, leaders):
            producers = [await begun(co, f"tx{i}", T0, T1) for i in range(20 * count)]
            ends = [
                co.end_transaction(f"tx{i}", pid, epoch, i % 2 == 0)
                for i, (pid, epoch) in enumerate(producers)
            ]
            assert set(await asyncio.gather(*ends)) == {E.NONE}
            await until(
                lambda: all(
                    state_of(co, f"tx{i}") in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                    for i in range(len(producers))
                ),
                "every completion",
            )
            assert len(leaders.written) == 2 * len(producers)
            # One request carried the markers of many producers.
            assert leaders.requests < len(producers)

    run(main())
