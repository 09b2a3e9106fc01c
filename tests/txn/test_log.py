"""The records of ``__transaction_state`` (`kbroker.txn.log`) are Kafka's: what Apache Kafka
3.9.1 wrote decodes, and kbroker encodes the same states to the same bytes; Kafka's own
DumpLogSegments decodes the segments kbroker writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kbroker.log import TopicPartition
from kbroker.protocol.codec import Codec
from kbroker.txn.log import (
    TransactionLogValue,
    TxnRecordError,
    key_bytes,
    parse_key,
    parse_value,
    partition_of,
    value_bytes,
)
from kbroker.txn.state import TxnState
from tests.cluster.kafka_zk import require_kafka
from tests.helpers import BrokerProcess

S = TxnState

# Written by Kafka 3.9.1 for transactional id "tx-1" (producer id 0, epoch 0, timeout
# 10 s): InitProducerId, AddPartitionsToTxn of t1-0 and t1-1, EndTxn(commit), and the
# completion after the markers (the values of offsets 0-3 of its __transaction_state-20).
# (bytes.fromhex skips the spaces: version, producer id, epoch, timeout, state, partitions
# by topic, last update and start timestamps.)
KAFKA_KEY = "0000 0004 74782d31"
KAFKA_VALUES = [
    "0000 0000000000000000 0000 00002710 00 ffffffff 000001a21f46179b ffffffffffffffff",
    "0000 0000000000000000 0000 00002710 01 00000001 0002 7431 00000002 00000000 00000001"
    " 000001a21f4617be 000001a21f4617be",
    "0000 0000000000000000 0000 00002710 02 00000001 0002 7431 00000002 00000000 00000001"
    " 000001a21f4617dd 000001a21f4617be",
    "0000 0000000000000000 0000 00002710 04 00000000 000001a21f4617e0 000001a21f4617be",
]


def test_kafkas_records_decode_and_encode_back_to_the_same_bytes() -> None:
    assert parse_key(bytes.fromhex(KAFKA_KEY)).transactional_id == "tx-1"
    assert key_bytes("tx-1") == bytes.fromhex(KAFKA_KEY)
    states = []
    for text in KAFKA_VALUES:
        data = bytes.fromhex(text)
        m = parse_value("tx-1", data)
        states.append((m.state, sorted(m.partitions)))
        assert (m.producer_id, m.producer_epoch, m.txn_timeout_ms) == (0, 0, 10000)
        # What kbroker writes for that state is byte for byte what Kafka wrote.
        assert value_bytes(m.snapshot()) == data
    t1 = [TopicPartition("t1", 0), TopicPartition("t1", 1)]
    assert states == [
        (S.EMPTY, []),
        (S.ONGOING, t1),
        (S.PREPARE_COMMIT, t1),
        (S.COMPLETE_COMMIT, []),
    ]
    ongoing = parse_value("tx-1", bytes.fromhex(KAFKA_VALUES[1]))
    assert (ongoing.txn_start_timestamp, ongoing.txn_last_update_timestamp) == (
        0x1A21F4617BE,
        0x1A21F4617BE,
    )
    # Loaded ids have no previous producer (the records do not keep it).
    assert (ongoing.last_producer_id, ongoing.last_producer_epoch) == (-1, -1)


def test_flexible_values_and_newer_versions_are_read() -> None:
    m = parse_value("tx-1", bytes.fromhex(KAFKA_VALUES[1]))
    v = TransactionLogValue(
        producer_id=m.producer_id,
        producer_epoch=m.producer_epoch,
        transaction_timeout_ms=m.txn_timeout_ms,
        transaction_status=int(m.state),
        transaction_partitions=[
            TransactionLogValue.PartitionsSchema(topic="t1", partition_ids=[0, 1])
        ],
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=4,
    )
    flexible = Codec(TransactionLogValue, 1, flexible=True).encode(v)
    for version in (1, 2):  # v2 and later only add tagged fields (KIP-915)
        loaded = parse_value("tx-1", version.to_bytes(2, "big") + flexible)
        assert loaded.partitions == m.partitions and loaded.txn_start_timestamp == 4


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x00\x00\x00", bytes.fromhex(KAFKA_VALUES[1])[:20], b"\xff\xff" + b"\0" * 40],
)
def test_unreadable_values_are_refused(data: bytes) -> None:
    with pytest.raises(TxnRecordError):
        parse_value("tx", data)


def test_unknown_states_and_key_versions_are_refused() -> None:
    bad_state = bytearray(bytes.fromhex(KAFKA_VALUES[0]))
    bad_state[16] = 9
    with pytest.raises(TxnRecordError, match="unknown transaction state 9"):
        parse_value("tx", bytes(bad_state))
    with pytest.raises(TxnRecordError, match="unknown key version 1"):
        parse_key(b"\x00\x01\x00\x01x")


def test_partitions_are_kafkas() -> None:
    # abs(String.hashCode()) % partitions, as the coordinators of both systems use.
    assert partition_of("tx-1", 50) == 20
    assert partition_of("", 50) == 0


@pytest.mark.kafka
def test_kafkas_dump_tool_reads_what_kbroker_wrote(tmp_path: Path) -> None:
    java, lib = require_kafka()
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        for _ in range(2):  # a new producer id, then the same id's next epoch
            p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1"})
            p.init_transactions(30)
    finally:
        assert broker.stop() == 0
    segment = tmp_path / "data" / "__transaction_state-20" / "00000000000000000000.log"
    dump = subprocess.run(
        [
            java,
            "-XX:TieredStopAtLevel=1",
            "-Dlog4j.configuration=file:/dev/null",
            "-cp",
            f"{lib}/*",
            "kafka.tools.DumpLogSegments",
            "--files",
            str(segment),
            "--transaction-log-decoder",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    payloads = [line for line in dump.stdout.splitlines() if "payload:" in line]
    assert len(payloads) == 2, dump.stdout + dump.stderr
    for epoch, line in enumerate(payloads):
        assert "key: transaction_metadata::transactionalId=tx-1" in line
        assert f"payload: producerId:0,producerEpoch:{epoch},state=Empty,partitions=[]" in line
        assert "txnTimeoutMs=60000" in line
