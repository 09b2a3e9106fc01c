"""The fault checker's definitions on hand-built histories (bench/faults/checker.py).

Every history goes through Recorder into a file and back through read_history, as a
run's would. Times start above 0 (Recorder stamps a falsy ``t`` with its own clock).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench.faults.checker import Report, check
from bench.faults.history import Recorder, read_history
from bench.faults.plot import timeline
from bench.faults.report import write_results

PNG = b"\x89PNG\r\n\x1a\n"


def send(value: str, t: float, outcome: str = "ok", p: int = 0, o: int | None = None, **kw: Any):
    e: dict[str, Any] = {"kind": "send", "t": t, "t0": kw.pop("t0", t - 0.05)}
    e.update(process="producer-0", value=value, outcome=outcome)
    if outcome == "ok":
        e.update(partition=p, offset=o)
    else:
        e["error"] = "boom"
    return e


def rd(process: str, session: int, p: int, o: int, value: str, t: float) -> dict[str, Any]:
    e = {"kind": "read", "t": t, "process": process, "session": session}
    return {**e, "partition": p, "offset": o, "value": value}


def final(p: int, o: int, value: str, t: float = 100.0) -> dict[str, Any]:
    return {"kind": "final", "t": t, "partition": p, "offset": o, "value": value}


def nemesis(fault: str, phase: str, t: float, target: str = "broker-1") -> dict[str, Any]:
    return {"kind": "nemesis", "t": t, "fault": fault, "phase": phase, "target": target}


def lag(process: str, behind: dict[int, int], t: float = 101.0) -> dict[str, Any]:
    return {
        "kind": "lag",
        "t": t,
        "process": process,
        "behind": {str(k): v for k, v in behind.items()},
    }


def roundtrip(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / f"history-{len(list(tmp_path.glob('history-*')))}.jsonl"  # a fresh file
    with Recorder(path, start=0.0) as rec:
        for e in events:
            e = dict(e)
            rec.record(e.pop("kind"), **e)
    return path


def run(tmp_path: Path, events: list[dict[str, Any]], **kw: Any) -> Report:
    return check(read_history(roundtrip(tmp_path, events)), **kw)


def clean(n: int = 10) -> list[dict[str, Any]]:
    """n acked sends to partition 0, every 0.5 s; reader-0 reads each; the final read."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        t = 0.5 + 0.5 * i
        events.append(send(f"v{i}", t, o=i))
        events.append(rd("reader-0", 1, 0, i, f"v{i}", t + 0.1))
    events.append({"kind": "ends", "t": 99.0, "ends": {"0": n}})
    events += [final(0, i, f"v{i}") for i in range(n)]
    events.append(lag("reader-0", {0: 0}))
    return events


def test_clean_history_is_ok(tmp_path: Path) -> None:
    r = run(tmp_path, clean())
    assert r.ok()
    assert (r.sends_ok, r.sends_fail, r.sends_unknown, r.unknown_written) == (10, 0, 0, 0)
    assert r.anomalies() == dict.fromkeys(
        ("lost", "duplicates", "inconsistent", "backwards", "failed_read", "stuck"), 0
    )
    line = r.summary_line("kbroker seed=7")
    assert "\n" not in line
    assert line.startswith("kbroker seed=7: 10 acked, 0 failed, 0 unknown (0 written) | ")
    assert "lost 0, duplicates 0, inconsistent 0, backwards 0, failed-read 0, stuck 0" in line
    assert "longest unavailable: none 0.0s" in line
    assert json.loads(json.dumps(r.to_json()))["ok"] is True


def test_one_lost_write(tmp_path: Path) -> None:
    events = [e for e in clean() if not (e["kind"] == "final" and e["value"] == "v3")]
    r = run(tmp_path, events)
    assert r.lost == ["v3"]
    assert r.anomalies()["lost"] == 1
    assert not r.ok()
    assert "lost 1," in r.summary_line("x")


def test_acked_below_the_final_start_is_not_judged(tmp_path: Path) -> None:
    # Retention deleted offsets 0 and 1: the final read starts at 2.
    events = [e for e in clean() if not (e["kind"] == "final" and e["offset"] < 2)]
    assert run(tmp_path, events).lost == []


def test_empty_final_read_loses_everything_acked(tmp_path: Path) -> None:
    events = [e for e in clean(4) if e["kind"] != "final"]
    r = run(tmp_path, events)
    assert r.lost == ["v0", "v1", "v2", "v3"]


def test_missing_final_read_raises(tmp_path: Path) -> None:
    events = [e for e in clean() if e["kind"] not in ("final", "ends")]
    with pytest.raises(ValueError, match="no final read"):
        run(tmp_path, events)


def test_duplicate_in_final_read(tmp_path: Path) -> None:
    r = run(tmp_path, [*clean(), final(0, 10, "v5")])
    assert r.anomalies()["duplicates"] == 1
    assert r.duplicates[0] == {"value": "v5", "positions": [[0, 5], [0, 10]]}
    assert r.anomalies()["inconsistent"] == 0
    assert r.lost == []


def test_duplicate_read_by_consumers(tmp_path: Path) -> None:
    r = run(tmp_path, [*clean(), rd("reader-1", 1, 1, 0, "v2", 6.0)])
    assert [d["value"] for d in r.duplicates] == ["v2"]
    assert r.duplicates[0]["positions"] == [[0, 2], [1, 0]]


def test_readers_disagree_on_an_offset(tmp_path: Path) -> None:
    r = run(tmp_path, [*clean(), rd("reader-1", 1, 0, 3, "ghost", 6.0)])
    assert r.anomalies()["inconsistent"] == 1
    bad = r.inconsistent[0]
    assert (bad["partition"], bad["offset"]) == (0, 3)
    assert set(bad["values"].values()) == {"v3", "ghost"}
    assert r.anomalies()["duplicates"] == 0


def test_acked_offset_overwritten_in_the_final_read(tmp_path: Path) -> None:
    # The final read holds "w" where v4 was acked, and v4 one place later than anyone had it.
    events = [e for e in clean() if not (e["kind"] in ("final", "read") and e["value"] == "v4")]
    events = [e for e in events if e["kind"] != "final"]
    events += [final(0, i, f"v{i}") for i in range(10) if i != 4]
    events += [final(0, 4, "w"), final(0, 10, "v4")]
    r = run(tmp_path, events)
    assert r.lost == []
    assert r.anomalies()["inconsistent"] == 1
    assert r.inconsistent[0]["values"] == {"ack": "v4", "final": "w"}


def test_acked_record_moved(tmp_path: Path) -> None:
    events = [e for e in clean() if not (e["kind"] in ("final", "read") and e["value"] == "v4")]
    events.append(final(0, 10, "v4"))  # offset 4 is a hole in the final read
    r = run(tmp_path, events)
    assert r.lost == []
    assert len(r.inconsistent) == 1
    assert r.inconsistent[0]["acked"] == [0, 4]
    assert r.inconsistent[0]["final"] == [0, 10]


def test_backwards_within_a_session(tmp_path: Path) -> None:
    events = clean(6)
    events += [rd("reader-0", 1, 0, o, f"v{o}", 5.0 + 0.1 * o) for o in (2, 3, 4, 5)]
    events += [rd("reader-0", 1, 0, 6, "v6", 6.0), rd("reader-0", 1, 0, 5, "v5", 6.1)]
    events += [send("v6", 5.9, o=6), final(0, 6, "v6")]
    r = run(tmp_path, events)
    assert r.anomalies()["backwards"] == 2
    first, second = r.backwards
    assert (first["offset"], first["after"], first["records"]) == (2, 5, 4)
    assert (second["offset"], second["after"], second["records"]) == (5, 6, 1)


def test_going_back_in_a_new_session_is_legit(tmp_path: Path) -> None:
    events = clean(6)
    # A new session re-reads from offset 2; another partition's reads interleave.
    events += [rd("reader-0", 2, 0, o, f"v{o}", 5.0 + 0.1 * o) for o in range(2, 6)]
    events += [send("p1", 3.05, p=1, o=0), final(1, 0, "p1"), rd("reader-0", 1, 1, 0, "p1", 3.1)]
    r = run(tmp_path, events)
    assert r.backwards == []
    assert r.ok()


def test_read_of_a_failed_value(tmp_path: Path) -> None:
    events = [*clean(), send("f1", 3.0, outcome="fail"), send("f2", 3.2, outcome="fail")]
    events += [rd("reader-0", 1, 0, 10, "f1", 6.0), final(0, 10, "f1")]
    events += [send("u1", 3.4, outcome="unknown"), final(0, 11, "u1")]
    events += [send("u2", 3.6, outcome="unknown")]
    r = run(tmp_path, events)
    assert r.failed_read == ["f1"]
    assert (r.sends_fail, r.sends_unknown, r.unknown_written) == (2, 2, 1)
    assert "2 failed, 2 unknown (1 written)" in r.summary_line("x")


def test_stuck_by_lag(tmp_path: Path) -> None:
    events = [*clean(), lag("reader-1", {0: 0, 1: 3}), lag("group-0", {0: 5}, t=101.0)]
    events.append(lag("group-0", {0: 0}, t=102.0))  # caught up by its latest sample
    r = run(tmp_path, events)
    assert r.anomalies()["stuck"] == 1
    assert r.stuck[0]["process"] == "reader-1"
    assert r.stuck[0]["behind"] == {"1": 3}


def stall_history(resume_at: float, faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Acks to partition 0 every 0.5 s until 40 s; reader-0 reads them until 3 s, then
    nothing until ``resume_at``, then the rest."""
    events: list[dict[str, Any]] = [*faults]
    for i in range(80):
        t = 0.5 + 0.5 * i
        events += [send(f"v{i}", t, o=i), final(0, i, f"v{i}")]
    done = [i for i in range(80) if 0.5 + 0.5 * i <= 3.0]
    for i in done:
        events.append(rd("reader-0", 1, 0, i, f"v{i}", 0.6 + 0.5 * i))
    rest = [i for i in range(80) if i not in done]
    for k, i in enumerate(rest):
        events.append(rd("reader-0", 1, 0, i, f"v{i}", resume_at + 0.01 * k))
    events.append({"kind": "ends", "t": 99.0, "ends": {"0": 80}})
    return events


def test_stuck_by_stall_in_a_healthy_window(tmp_path: Path) -> None:
    r = run(tmp_path, stall_history(30.0, []))
    assert r.anomalies()["stuck"] == 1
    s = r.stuck[0]
    assert s["process"] == "reader-0"
    assert (s["from"], s["to"], s["partition"]) == (3.5, 30.0, 0)


def test_stall_during_a_fault_is_not_stuck(tmp_path: Path) -> None:
    # Paused from 3.5 s to 15 s: recovery until 20 s; back at 29.9 s is within 10 s.
    faults = [nemesis("pause", "start", 3.5), nemesis("pause", "end", 15.0)]
    r = run(tmp_path, stall_history(29.9, faults))
    assert r.stuck == []
    # The same fault but back only at 32 s: 20 s to 32 s is healthy silence.
    r = run(tmp_path, stall_history(32.0, faults))
    assert len(r.stuck) == 1
    assert (r.stuck[0]["from"], r.stuck[0]["to"]) == (20.5, 32.0)


def test_stall_without_acks_or_after_rebalance_is_not_stuck(tmp_path: Path) -> None:
    # No acks after 3 s: nothing to read.
    events = [e for e in stall_history(30.0, []) if not (e["kind"] == "send" and e["t"] > 3.0)]
    events = [e for e in events if not (e["kind"] == "final" and e["offset"] > 5)]
    events = [e for e in events if not (e["kind"] == "read" and e["offset"] > 5)]
    events.append(rd("reader-0", 1, 0, 6, "late", 30.0))
    events += [send("late", 29.9, o=6), final(0, 6, "late")]
    assert run(tmp_path, events).stuck == []
    # The reader had v5 before its producer heard the ack (at 3.5 s): nothing left to read.
    events = [{**e, "t": 3.5} if e["kind"] == "send" and e["value"] == "v5" else e for e in events]
    assert [e["t"] for e in events if e["kind"] == "read" and e["value"] == "v5"] == [3.1]
    assert run(tmp_path, events).stuck == []
    # group-0 stops at 3 s because the group gave partition 0 to group-1.
    events = [
        {**e, "process": "group-0"} if e["kind"] == "read" and e["t"] <= 3.0 else e
        for e in stall_history(30.0, [])
    ]
    events = [e for e in events if not (e["kind"] == "read" and e["process"] == "reader-0")]
    events += [rd("group-1", 1, 0, i, f"v{i}", 0.6 + 0.5 * i) for i in range(6, 80)]
    r = run(tmp_path, events)
    assert r.stuck == []
    assert r.ok()


def test_unavailability_windows_by_fault_kind(tmp_path: Path) -> None:
    acked = [0.5 * i for i in range(1, 21)]  # 0.5 .. 10.0
    acked += [14.0 + 0.5 * i for i in range(13)]  # 14.0 .. 20.0: kill in 10..14
    acked += [25.0 + 0.5 * i for i in range(11)]  # 25.0 .. 30.0: 20..25 no fault
    acked += [33.5 + 0.5 * i for i in range(3)]  # 33.5 .. 34.5: pause in 30..33.5
    events = [send(f"v{i}", t, o=i) for i, t in enumerate(acked)]
    events += [final(0, i, f"v{i}") for i in range(len(acked))]
    events.append(send("last", 40.0, outcome="unknown", t0=39.5))  # 34.5..39.5: none
    events += [nemesis("kill", "start", 10.2), nemesis("kill", "end", 12.0)]
    events += [
        nemesis("pause", "start", 30.5, "broker-2"),
        nemesis("pause", "end", 31.0, "broker-2"),
    ]
    events += [nemesis("isolate", "start", 15.0), nemesis("isolate", "end", 16.0)]
    r = run(tmp_path, events)
    u = r.unavailability
    assert u["kill"] == {"count": 1, "longest_s": 4.0, "total_s": 4.0}
    assert u["pause"] == {"count": 1, "longest_s": 3.5, "total_s": 3.5}
    assert u["isolate"] == {"count": 0, "longest_s": 0.0, "total_s": 0.0}
    assert u["none"] == {"count": 2, "longest_s": 5.0, "total_s": 10.0}
    line = r.summary_line("x")
    assert "longest unavailable: isolate 0.0s, kill 4.0s, pause 3.5s, none 5.0s" in line
    assert r.ok()


def test_unended_fault_covers_the_rest(tmp_path: Path) -> None:
    events = [send("a", 1.0, o=0), send("b", 5.0, o=1), final(0, 0, "a"), final(0, 1, "b")]
    events.append(nemesis("partition", "start", 3.0))
    u = run(tmp_path, events).unavailability
    assert u["partition"]["count"] == 1
    assert u["none"]["count"] == 0


def faulty_history() -> list[dict[str, Any]]:
    events = stall_history(30.0, [nemesis("kill", "start", 5.0), nemesis("kill", "end", 9.0)])
    events += [send("f", 7.0, outcome="fail"), send("u", 8.0, outcome="unknown")]
    events.append(nemesis("pause", "start", 35.0, "zk-1"))  # never ended
    return events


def test_timeline_png(tmp_path: Path) -> None:
    path = tmp_path / "timeline.png"
    timeline(read_history(roundtrip(tmp_path, faulty_history())), path, "kbroker seed=1")
    data = path.read_bytes()
    assert data[:8] == PNG
    assert len(data) > 10_000


def test_timeline_png_of_empty_histories(tmp_path: Path) -> None:
    for i, events in enumerate(([], [nemesis("kill", "start", 1.0)], [send("a", 0.2, o=0)])):
        path = tmp_path / f"t{i}.png"
        timeline(iter(events), path, "empty")
        data = path.read_bytes()
        assert data[:8] == PNG
        assert len(data) > 1_000


def test_write_results(tmp_path: Path) -> None:
    history = roundtrip(tmp_path, faulty_history())
    report = check(read_history(history))
    out = tmp_path / "out"
    write_results(out, report, history, "kbroker seed=3")
    anomalies = json.loads((out / "anomalies.json").read_text())
    assert anomalies["label"] == "kbroker seed=3"
    assert anomalies["anomalies"]["stuck"] == 1
    assert anomalies["examples"]["stuck"][0]["process"] == "reader-0"
    assert set(anomalies["unavailability"]) == {"kill", "pause", "none"}
    summary = (out / "summary.txt").read_text()
    assert summary.count("\n") == 1
    assert summary.startswith("kbroker seed=3: 80 acked, 1 failed, 1 unknown (0 written)")
    assert (out / "timeline.png").read_bytes()[:8] == PNG
