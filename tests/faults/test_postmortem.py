"""The post-mortem of duplicates on hand-built segment files: each copy's producer id,
epoch and sequence say whether the broker appended a retry it should have recognised or
the client sent the record again under a new epoch; only the first fails a run."""

from __future__ import annotations

import struct
from pathlib import Path

from bench.faults.checker import Report
from bench.faults.postmortem import KeptData, classify, explain_duplicates

from kbroker._kbroker import build_batch

PID = 4000


def segment(folder: Path, batches: list[tuple[int, int, int, int, int]]) -> None:
    """Writes (base offset, records, producer id, epoch, base sequence) batches as one
    segment file of partition ``folder``."""
    folder.mkdir(parents=True)
    data = b""
    for base, n, pid, epoch, seq in batches:
        raw = bytearray(
            build_batch(
                [(None, f"v{base + i}".encode(), []) for i in range(n)],
                timestamp=1,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        )
        struct.pack_into(">q", raw, 0, base)  # the base offset is outside the CRC
        data += bytes(raw)
    (folder / f"{0:020d}.log").write_bytes(data)


def test_each_copy_is_traced_to_its_producer_epoch_and_sequence(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes"
    segment(
        nodes / "b1-data" / "kbf-0",
        [
            (0, 2, PID, 0, 10),  # offsets 0, 1: seqs 10, 11
            (2, 1, PID, 0, 10),  # the same batch again: a retry appended twice
            (3, 2, PID, 1, 0),  # epoch bumped: 10 and 11 again as seqs 0, 1
            (5, 1, PID + 1, 0, 0),  # another producer
        ],
    )
    kept = KeptData(nodes, "kbf")
    assert kept.writer(0, 1) is not None and kept.writer(0, 1).sequence == 11
    assert kept.writer(0, 99) is None
    duplicates = [
        {"value": "a", "positions": [[0, 0], [0, 2]]},
        {"value": "b", "positions": [[0, 0], [0, 3]]},
        {"value": "c", "positions": [[0, 1], [0, 4]]},
        {"value": "d", "positions": [[0, 1], [0, 5]]},
        {"value": "e", "positions": [[0, 1], [0, 99]]},
        {"value": "f", "positions": [[0, 0], [0, 1]]},
    ]
    explained = explain_duplicates(duplicates, kept)
    assert explained["counts"] == {
        "same_sequence": 1,
        "new_epoch": 2,
        "new_producer": 1,
        "resequenced": 1,
        "unknown": 1,
    }
    assert explained["examples"]["new_epoch"][0]["writers"] == [[PID, 0, 10], [PID, 1, 0]]
    assert classify([]) == "same_sequence"


def test_only_the_clients_resends_are_forgiven(tmp_path: Path) -> None:
    r = Report(duplicates=[{"value": "a", "positions": []}, {"value": "b", "positions": []}])
    assert not r.ok()
    r.client_resent = 1
    assert not r.ok() and r.broker_anomalies()["duplicates"] == 1
    r.client_resent = 2
    assert r.ok() and r.anomalies()["duplicates"] == 2
    assert "duplicates 2 (2 re-sent by the client under a new producer epoch)" in (
        r.summary_line("x")
    )
