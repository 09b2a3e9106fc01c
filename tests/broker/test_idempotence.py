"""The idempotent producer at the wire level: retries, gaps, epochs, and restarts."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey, ErrorCode
from tests.helpers import BrokerProcess, Wire, fetch_req, init_producer_id, metadata, wire_produce

TOPIC = "idem"


def init_pid(wire: Wire) -> tuple[int, int]:
    resp = init_producer_id(wire)
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


def log_end(wire: Wire) -> int:
    req = fetch_req(TOPIC)
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
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 0)) == (0, 0)
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 3)) == (0, 3)
    # A retry of either of the last batches gets its original offset back...
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 0)) == (0, 0)
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 3)) == (0, 3)
    # ...and nothing was appended twice.
    assert log_end(wire) == 6
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 6)) == (0, 6)


def test_sequence_gap_and_stale_epoch_are_refused(wire: Wire) -> None:
    pid, epoch = init_pid(wire)
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 0))[0] == 0
    assert (
        wire_produce(wire, TOPIC, idem_batch(pid, epoch, 10))[0]
        == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    # A new epoch must start at sequence 0; then the old epoch is fenced.
    assert (
        wire_produce(wire, TOPIC, idem_batch(pid, epoch + 1, 5))[0]
        == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch + 1, 0))[0] == 0
    assert (
        wire_produce(wire, TOPIC, idem_batch(pid, epoch, 3))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert log_end(wire) == 6


def test_sequence_wraps_at_int32_max(wire: Wire) -> None:
    pid, epoch = init_pid(wire)
    top = 2**31 - 1
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, top - 1, n=2))[0] == 0
    assert wire_produce(wire, TOPIC, idem_batch(pid, epoch, 0, n=2))[0] == 0


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_duplicates_detected_after_restart(broker: BrokerProcess, how: str) -> None:
    """Producer state comes back from the snapshot (clean stop) or the log (kill -9)."""
    w = Wire(broker.bootstrap)
    metadata(w, [TOPIC])
    pid, epoch = init_pid(w)
    for seq in range(0, 15, 3):
        assert wire_produce(w, TOPIC, idem_batch(pid, epoch, seq))[0] == 0
    w.close()
    if how == "stop":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()
    w = Wire(broker.bootstrap)
    try:
        assert wire_produce(w, TOPIC, idem_batch(pid, epoch, 12)) == (0, 12)
        assert log_end(w) == 15
        assert (
            wire_produce(w, TOPIC, idem_batch(pid, epoch, 20))[0]
            == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert wire_produce(w, TOPIC, idem_batch(pid, epoch, 15)) == (0, 15)
        # Ids handed out after a restart never repeat earlier ones.
        assert init_pid(w)[0] != pid
    finally:
        w.close()
