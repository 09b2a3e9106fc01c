"""The idempotent producer at the wire level: retries, gaps, epochs, and restarts."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.core import FetchRequest, InitProducerIdRequest
from tests.broker.conftest import BrokerProcess
from tests.broker.test_wire import Wire, metadata, produce_req

TOPIC = "idem"


def init_pid(wire: Wire) -> tuple[int, int]:
    resp = wire.request(
        ApiKey.INIT_PRODUCER_ID,
        4,
        InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
        ),
    )
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def idem_batch(pid: int, epoch: int, seq: int, n: int = 3, tag: bytes = b"") -> bytes:
    return build_batch(
        [(b"k", b"%s%d" % (tag, seq + i), []) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        # Now: a producer whose last write is older than producer.id.expiration.ms
        # (a day) is forgotten, as in Kafka.
        timestamp=time.time_ns() // 1_000_000,
    )


def send(wire: Wire, batch: bytes) -> tuple[int, int]:
    resp = wire.request(ApiKey.PRODUCE, 9, produce_req(TOPIC, batch))
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def log_end(wire: Wire) -> int:
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.Topic(
                topic=TOPIC,
                partitions=[
                    FetchRequest.Topic.Partition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return int(wire.request(ApiKey.FETCH, 11, req).responses[0].partitions[0].high_watermark)


@pytest.fixture
def wire(broker: BrokerProcess) -> Any:
    w = Wire(broker.bootstrap)
    metadata(w, [TOPIC])
    yield w
    w.close()


def test_producer_ids_are_unique(wire: Wire) -> None:
    ids = {init_pid(wire)[0] for _ in range(20)}
    assert len(ids) == 20


def test_retried_batch_is_acknowledged_once_with_its_offset(wire: Wire) -> None:
    pid, epoch = init_pid(wire)
    assert send(wire, idem_batch(pid, epoch, 0)) == (0, 0)
    assert send(wire, idem_batch(pid, epoch, 3)) == (0, 3)
    # A retry of either of the last batches gets its original offset back...
    assert send(wire, idem_batch(pid, epoch, 0)) == (0, 0)
    assert send(wire, idem_batch(pid, epoch, 3)) == (0, 3)
    # ...and nothing was appended twice.
    assert log_end(wire) == 6
    assert send(wire, idem_batch(pid, epoch, 6)) == (0, 6)


def test_sequence_gap_and_stale_epoch_are_refused(wire: Wire) -> None:
    pid, epoch = init_pid(wire)
    assert send(wire, idem_batch(pid, epoch, 0))[0] == 0
    assert send(wire, idem_batch(pid, epoch, 10))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A new epoch must start at sequence 0; then the old epoch is fenced.
    assert send(wire, idem_batch(pid, epoch + 1, 5))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(wire, idem_batch(pid, epoch + 1, 0))[0] == 0
    assert send(wire, idem_batch(pid, epoch, 3))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log_end(wire) == 6


def test_sequence_wraps_at_int32_max(wire: Wire) -> None:
    pid, epoch = init_pid(wire)
    top = 2**31 - 1
    assert send(wire, idem_batch(pid, epoch, top - 1, n=2))[0] == 0
    assert send(wire, idem_batch(pid, epoch, 0, n=2))[0] == 0


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_duplicates_detected_after_restart(broker: BrokerProcess, how: str) -> None:
    """Producer state comes back from the snapshot (clean stop) or the log (kill -9)."""
    w = Wire(broker.bootstrap)
    metadata(w, [TOPIC])
    pid, epoch = init_pid(w)
    for seq in range(0, 15, 3):
        assert send(w, idem_batch(pid, epoch, seq))[0] == 0
    w.close()
    if how == "stop":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()
    w = Wire(broker.bootstrap)
    try:
        assert send(w, idem_batch(pid, epoch, 12)) == (0, 12)
        assert log_end(w) == 15
        assert send(w, idem_batch(pid, epoch, 20))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(w, idem_batch(pid, epoch, 15)) == (0, 15)
        # Ids handed out after a restart never repeat earlier ones.
        assert init_pid(w)[0] != pid
    finally:
        w.close()
