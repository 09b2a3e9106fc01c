"""The transactional checker's definitions on hand-built histories
(bench/faults/txn_checker.py): a clean history passes, and each anomaly kind, made on
purpose, is found and fails the report.

The clean history: T1 and T3 committed, T2 aborted, each with one value on partition 0
and one on partition 1 (a marker after each transaction's values), read by a
read_committed reader and by both final reads. Every history goes through Recorder into
a file and back, as a run's would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench.faults.history import Recorder, read_history
from bench.faults.report import write_results
from bench.faults.txn_checker import ANOMALIES, TxnReport, check_txn

RC, RU = "read_committed", "read_uncommitted"
PNG = b"\x89PNG\r\n\x1a\n"


def txn(
    name: str,
    outcome: str,
    values: dict[str, tuple[int, int]],
    t: float,
    intent: str | None = None,
    acked: bool = True,
) -> dict[str, Any]:
    """A transaction begun at ``t - 0.2``, its end asked at ``t - 0.1``, known at ``t``;
    ``values``: value -> (partition, offset delivered)."""
    return {
        "kind": "txn",
        "t": t,
        "process": "producer-0",
        "txn": name,
        "intent": intent or ("abort" if outcome == "aborted" else "commit"),
        "outcome": outcome,
        "acked": acked,
        "values": {v: p for v, (p, _) in values.items()},
        "offsets": {v: o for v, (_, o) in values.items()},
        "t0": t - 0.2,
        "t_end": t - 0.1,
        "error": None,
    }


def rd(v: str, p: int, o: int, t: float, process: str = "reader-0", session: int = 1) -> dict:
    return {
        "kind": "read",
        "t": t,
        "process": process,
        "session": session,
        "partition": p,
        "offset": o,
        "value": v,
        "isolation": RC,
    }


def final(v: str, p: int, o: int, isolation: str) -> dict[str, Any]:
    return {
        "kind": "final",
        "t": 100.0,
        "partition": p,
        "offset": o,
        "value": v,
        "isolation": isolation,
    }


T1 = {"1.0": (0, 0), "1.1": (1, 0)}
T2 = {"2.0": (0, 2), "2.1": (1, 2)}
T3 = {"3.0": (0, 4), "3.1": (1, 4)}


def clean() -> list[dict[str, Any]]:
    events = [txn("1", "committed", T1, 1.0), txn("2", "aborted", T2, 2.0)]
    events.append(txn("3", "committed", T3, 3.0))
    for v, (p, o) in {**T1, **T3}.items():
        events.append(rd(v, p, o, 3.5))
    events.append({"kind": "ends", "t": 99.0, "ends": {"0": 6, "1": 6}, "isolation": RU})
    events += [final(v, p, o, RU) for v, (p, o) in {**T1, **T2, **T3}.items()]
    events.append({"kind": "ends", "t": 99.5, "ends": {"0": 6, "1": 6}, "isolation": RC})
    events += [final(v, p, o, RC) for v, (p, o) in {**T1, **T3}.items()]
    events.append({"kind": "lag", "t": 101.0, "process": "reader-0", "behind": {"0": 0}})
    return events


def check(tmp_path: Path, events: list[dict[str, Any]]) -> TxnReport:
    path = tmp_path / f"history-{len(list(tmp_path.glob('history-*')))}.jsonl"
    with Recorder(path, start=0.0) as rec:
        for e in events:
            e = dict(e)
            rec.record(e.pop("kind"), **e)
    return check_txn(read_history(path))


def only(report: TxnReport, kind: str, count: int = 1) -> list[dict[str, Any]]:
    """The entries of ``kind``, after checking they are the report's only anomalies."""
    assert report.anomalies() == {k: (count if k == kind else 0) for k in ANOMALIES}, report
    assert not report.ok()
    found: list[dict[str, Any]] = getattr(report, kind)
    return found


def test_clean_history_is_ok(tmp_path: Path) -> None:
    r = check(tmp_path, clean())
    assert r.ok(), r
    assert (r.committed, r.aborted, r.unknown, r.values) == (2, 1, 0, 6)
    line = r.summary_line("kbroker seed=7 txn")
    assert line.startswith("kbroker seed=7 txn: 2 committed, 1 aborted, 0 unknown (0 committed)")
    assert (
        "aborted-reads 0, torn 0, uncommitted-reads 0, lost 0, duplicates 0, "
        "inconsistent 0, stuck 0" in line
    )
    assert json.loads(json.dumps(r.to_json()))["ok"] is True


def test_no_final_committed_read_raises(tmp_path: Path) -> None:
    events = [e for e in clean() if e.get("isolation") != RC or e["kind"] == "read"]
    with pytest.raises(ValueError, match="no final read_committed read"):
        check(tmp_path, events)


def test_aborted_read_by_a_consumer(tmp_path: Path) -> None:
    (bad,) = only(check(tmp_path, [*clean(), rd("2.1", 1, 2, 3.6)]), "aborted_reads")
    assert bad["txn"] == "2"
    assert bad["seen"] == {"2.1": ["reader-0"]}


def test_aborted_read_in_the_final_read(tmp_path: Path) -> None:
    (bad,) = only(check(tmp_path, [*clean(), final("2.0", 0, 2, RC)]), "aborted_reads")
    assert bad["seen"] == {"2.0": ["final"]}


def test_an_abort_never_acknowledged_still_may_not_be_read(tmp_path: Path) -> None:
    events = [
        txn("2", "aborted", T2, 2.0, acked=False) if e.get("txn") == "2" else e for e in clean()
    ]
    assert check(tmp_path, events).ok()
    (bad,) = only(check(tmp_path, [*events, rd("2.0", 0, 2, 3.6)]), "aborted_reads")
    assert bad["acked"] is False


def test_committed_transaction_missing_a_value_is_torn(tmp_path: Path) -> None:
    events = [
        e
        for e in clean()
        if not (e["kind"] == "final" and e["value"] == "3.1" and e["isolation"] == RC)
    ]
    (bad,) = only(check(tmp_path, events), "torn")
    assert (bad["txn"], bad["why"], bad["missing"], bad["present"]) == (
        "3",
        "final read",
        ["3.1"],
        ["3.0"],
    )


def test_unknown_transaction_seen_partly_is_torn(tmp_path: Path) -> None:
    events = [txn("3", "unknown", T3, 3.0) if e.get("txn") == "3" else e for e in clean()]
    r = check(tmp_path, events)
    assert r.ok() and r.unknown_committed == 1
    events = [e for e in events if not (e["kind"] in ("final", "read") and e["value"] == "3.0")]
    events = [e for e in events if not (e["kind"] == "read" and e["value"] == "3.1")]
    events.append(final("3.0", 0, 4, RU))
    (bad,) = only(check(tmp_path, events), "torn")
    assert (bad["txn"], bad["outcome"], bad["missing"]) == ("3", "unknown", ["3.0"])


def test_a_reader_skipping_part_of_a_committed_transaction_is_torn(tmp_path: Path) -> None:
    # T4 after T3 on partition 1; the reader reads T1, T3's value on partition 0 and T4,
    # but not T3's value on partition 1, which it went past.
    t4 = {"4.0": (1, 6)}
    events = [e for e in clean() if not (e["kind"] == "read" and e["value"] == "3.1")]
    events += [txn("4", "committed", t4, 4.0), rd("4.0", 1, 6, 4.5)]
    events += [final("4.0", 1, 6, RU), final("4.0", 1, 6, RC)]
    (bad,) = only(check(tmp_path, events), "torn")
    assert (bad["txn"], bad["why"], bad["process"], bad["missed"], bad["read"]) == (
        "3",
        "skipped by a reader",
        "reader-0",
        ["3.1"],
        ["3.0"],
    )
    # A new session (a group member given the partition from a committed offset) may
    # start past it: not torn.
    events = [
        {**e, "session": 2} if e["kind"] == "read" and e["value"] == "4.0" else e for e in events
    ]
    assert check(tmp_path, events).ok()


def test_read_before_the_commit_was_asked(tmp_path: Path) -> None:
    # T3's end was asked at 2.9: a read_committed read at 2.85 saw it uncommitted.
    (bad,) = only(
        check(tmp_path, [*clean(), rd("3.0", 0, 4, 2.85, "group-1")]), "uncommitted_reads"
    )
    assert bad["txn"] == "3"
    assert bad["reads"] == [
        {"value": "3.0", "by": "group-1", "t": 2.85, "why": "before the commit was asked"}
    ]


def test_read_of_a_transaction_never_committed(tmp_path: Path) -> None:
    # T5's commit was never answered and it is in no final read_committed read (it was
    # aborted in the end), yet a read_committed reader read it.
    t5 = {"5.0": (0, 6)}
    events = [*clean(), txn("5", "unknown", t5, 5.0), final("5.0", 0, 6, RU)]
    assert check(tmp_path, events).ok()
    (bad,) = only(check(tmp_path, [*events, rd("5.0", 0, 6, 5.5)]), "uncommitted_reads")
    assert bad["reads"][0]["why"] == "never committed"


def test_lost_committed_transaction(tmp_path: Path) -> None:
    events = [e for e in clean() if not (e["kind"] == "final" and e["value"].startswith("3."))]
    events = [e for e in events if not (e["kind"] == "read" and e["value"].startswith("3."))]
    (bad,) = only(check(tmp_path, events), "lost")
    assert bad == {"txn": "3", "values": ["3.0", "3.1"]}


def test_duplicate_in_a_committed_read(tmp_path: Path) -> None:
    (bad,) = only(
        check(tmp_path, [*clean(), final("1.0", 0, 7, RC), final("1.0", 0, 7, RU)]), "duplicates"
    )
    assert bad == {"value": "1.0", "positions": [[0, 0], [0, 7]]}


def test_readers_disagree_on_an_offset(tmp_path: Path) -> None:
    r = check(tmp_path, [*clean(), {**rd("3.1", 1, 4, 3.5, "group-0"), "value": "ghost"}])
    (bad,) = only(r, "inconsistent")
    assert (bad["partition"], bad["offset"]) == (1, 4)
    assert set(bad["values"].values()) == {"3.1", "ghost"}


def test_reader_held_back_at_the_end(tmp_path: Path) -> None:
    events = [*clean(), {"kind": "lag", "t": 102.0, "process": "group", "behind": {"1": 2}}]
    (bad,) = only(check(tmp_path, events), "stuck")
    assert bad == {"process": "group", "why": "lag at the end", "behind": {"1": 2}}


def test_write_results_of_a_transactional_run(tmp_path: Path) -> None:
    events = [
        *clean(),
        {"kind": "nemesis", "t": 1.5, "fault": "kill", "phase": "start", "target": "b1"},
        {"kind": "nemesis", "t": 2.5, "fault": "kill", "phase": "end", "target": "b1"},
    ]
    path = tmp_path / "history.jsonl"
    with Recorder(path, start=0.0) as rec:
        for e in events:
            e = dict(e)
            rec.record(e.pop("kind"), **e)
    report = check_txn(read_history(path))
    write_results(tmp_path / "out", report, path, "kbroker seed=3 txn")
    data = json.loads((tmp_path / "out" / "anomalies.json").read_text())
    assert data["ok"] is True and data["transactions"]["committed"] == 2
    assert set(data["unavailability"]) == {"kill", "none"}
    assert (
        (tmp_path / "out" / "summary.txt").read_text().startswith("kbroker seed=3 txn: 2 committed")
    )
    assert (tmp_path / "out" / "timeline.png").read_bytes()[:8] == PNG
