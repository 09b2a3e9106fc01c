"""The checker of a fault run's history (``bench/faults/history.py``): what went wrong.

``check(events)`` reads every event once and returns a ``Report``. Its definitions,
exactly (a *position* is a ``(partition, offset)``; the *final read* is the ``final``
events, and a history without any ``final`` and without an ``ends`` event never did
one: ``check`` raises ``ValueError``; an ``ends`` event with no ``final`` is a final
read that found nothing):

Send outcome of a value: ``ok`` if any ``send`` of it was acknowledged, else
``unknown`` if any was unknown, else ``fail``. ``sends_ok``/``sends_fail``/
``sends_unknown`` count values by that outcome.

The *start* of a partition is its smallest offset in the final read (the final read
begins at the log start, so anything below was deleted by retention). A partition
with no record in the final read has start 0: everything acknowledged in it is
judged.

- **lost**: a value whose outcome is ``ok`` and that is nowhere in the final read,
  unless its acknowledged offset is below its partition's start (deleted by
  retention: it can not be judged and is skipped).
- **duplicates**: a value seen at two or more distinct positions, counting the final
  read and every consumer read together (one entry per value, with its positions).
  Acknowledgements are not counted here (see inconsistent).
- **inconsistent**: (1) a position observed with two or more different values, the
  observations being acknowledgements, consumer reads and the final read (this
  covers two readers disagreeing, a final read differing from an acknowledged value,
  and two acknowledgements handed the same offset); one entry per position. (2) an
  acknowledged position at or above its partition's start that the final read has
  no record at while the value is in the final read elsewhere (the record moved);
  one entry per value.
- **backwards**: within one ``(process, session, partition)`` offsets must strictly
  increase, in the order the reads are in the history (one thread writes them in
  the order it returned them). A read at or below the highest offset read before in
  that triple starts an *episode*, which lasts while the following reads stay at or
  below it; one entry per episode (``records``: how many reads it spans). A new
  session may legitimately go back.
- **failed_read**: a value whose outcome is ``fail`` seen by any consumer or by the
  final read (one entry per value).
- **stuck**: (a) the latest ``lag`` event of each process, if any partition is
  ``behind`` by more than 0. (b) a stall during the run. *Fault time* is the union
  of every fault's ``[start, end + stall_s / 2]`` (a fault never ended lasts to the
  end; half of ``stall_s`` after a heal is recovery time); the rest is *healthy*.
  A consumer process stalls if, after it read at least one record, an ``ok`` send
  was acknowledged at time ``ta`` with all of these true: its partition is one the
  process read before; the process had not read that value already; the process
  read nothing in ``(ta, ta + stall_s]``, which lies wholly in healthy time and
  before the last read of any consumer (after that, consumers are no longer
  watched; the ``lag`` samples judge the end); and, for a ``group-*`` process, no
  other ``group-*`` process read that partition since this process last did (the
  group gave it to someone else). One entry per such silence, with its window.
- **unknown_written** (information, not an anomaly): values whose outcome is
  ``unknown`` that are in the final read.
- **unavailability**: the times ``t`` of acknowledged sends, sorted, bounded by the
  first send's ``t0`` before and the last send's ``t0`` after (the workload). Every
  gap longer than ``gap_s`` between consecutive ones is a window. A window counts
  for every fault kind whose ``[start, end]`` overlaps it (an unended fault lasts
  forever), or for ``"none"`` if no fault does. Per kind: ``count``,
  ``longest_s``, ``total_s``; every kind the nemesis used appears, and ``"none"``.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ANOMALIES = ("lost", "duplicates", "inconsistent", "backwards", "failed_read", "stuck")
EXAMPLES = 20  # examples of each anomaly kept in to_json()


@dataclass
class Report:
    sends_ok: int = 0
    sends_fail: int = 0
    sends_unknown: int = 0
    lost: list[Any] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    inconsistent: list[dict[str, Any]] = field(default_factory=list)
    backwards: list[dict[str, Any]] = field(default_factory=list)
    failed_read: list[Any] = field(default_factory=list)
    stuck: list[dict[str, Any]] = field(default_factory=list)
    unknown_written: int = 0
    unavailability: dict[str, dict[str, float]] = field(default_factory=dict)
    # Set after the check from the kept data (bench/faults/postmortem.py): the duplicates
    # by who wrote their copies, and how many of them the client itself sent again under
    # a new producer epoch (copies no broker can tell from new records).
    duplicates_explained: dict[str, Any] | None = None
    client_resent: int = 0

    def anomalies(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in ANOMALIES}

    def broker_anomalies(self) -> dict[str, int]:
        """The anomalies a broker is answerable for: all but the client's re-sends."""
        return self.anomalies() | {"duplicates": len(self.duplicates) - self.client_resent}

    def ok(self) -> bool:
        return not any(self.broker_anomalies().values())

    def summary_line(self, label: str) -> str:
        a = self.anomalies()
        counts = ", ".join(
            f"{name.replace('_', '-')} {a[name]}"
            + (
                f" ({self.client_resent} re-sent by the client under a new producer epoch)"
                if name == "duplicates" and self.client_resent
                else ""
            )
            for name in ANOMALIES
        )
        longest = ", ".join(
            f"{kind} {u['longest_s']:.1f}s" for kind, u in self.unavailability.items()
        )
        return (
            f"{label}: {self.sends_ok} acked, {self.sends_fail} failed, "
            f"{self.sends_unknown} unknown ({self.unknown_written} written) | {counts} | "
            f"longest unavailable: {longest or 'n/a'}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok(),
            "sends": {"ok": self.sends_ok, "fail": self.sends_fail, "unknown": self.sends_unknown},
            "unknown_written": self.unknown_written,
            "anomalies": self.anomalies(),
            "broker_anomalies": self.broker_anomalies(),
            "duplicates_explained": self.duplicates_explained,
            "examples": {name: getattr(self, name)[:EXAMPLES] for name in ANOMALIES},
            "unavailability": self.unavailability,
        }


def _p(partition: Any) -> int:
    return int(partition)


def fault_intervals(
    nemesis: list[dict[str, Any]], t_first: float
) -> list[tuple[str, str, float, float]]:
    """``(kind, target, start, end)`` of every fault; end is inf if it never ended."""
    open_: dict[tuple[str, str], list[float]] = defaultdict(list)
    out: list[tuple[str, str, float, float]] = []
    for e in sorted(nemesis, key=lambda e: e["t"]):
        key = (str(e.get("fault")), str(e.get("target", "")))
        if e.get("phase") == "start":
            open_[key].append(e["t"])
        elif e.get("phase") == "end":
            # An end without a start: the fault was on since the history began.
            start = open_[key].pop(0) if open_[key] else t_first
            out.append((key[0], key[1], start, e["t"]))
    for (kind, target), starts in open_.items():
        out.extend((kind, target, s, math.inf) for s in starts)
    return sorted(out, key=lambda f: f[2])


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _healthy(a: float, b: float, faulty: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``[a, b]`` outside the merged, sorted ``faulty`` intervals."""
    out: list[tuple[float, float]] = []
    cur = a
    for s, e in faulty:
        if e <= cur:
            continue
        if s >= b:
            break
        if s > cur:
            out.append((cur, s))
        cur = max(cur, e)
        if cur >= b:
            break
    if cur < b:
        out.append((cur, b))
    return out


def check(events: Iterable[dict[str, Any]], *, stall_s: float = 10.0, gap_s: float = 1.0) -> Report:
    sends: dict[Any, dict[str, Any]] = {}  # value -> its decisive send event
    rank = {"ok": 2, "unknown": 1, "fail": 0}
    reads: list[dict[str, Any]] = []
    finals: list[dict[str, Any]] = []
    lags: dict[str, dict[str, Any]] = {}
    nemesis: list[dict[str, Any]] = []
    saw_ends = False
    t0s: list[float] = []
    t_first = math.inf
    for e in events:
        kind = e.get("kind")
        if isinstance(e.get("t"), int | float):
            t_first = min(t_first, e["t"])
        if kind == "send":
            t0s.append(e.get("t0", e["t"]))
            old = sends.get(e["value"])
            if old is None or rank.get(e["outcome"], 0) > rank.get(old["outcome"], 0):
                sends[e["value"]] = e
        elif kind == "read":
            reads.append(e)
        elif kind == "final":
            finals.append(e)
        elif kind == "ends":
            saw_ends = True
        elif kind == "lag":
            lags[e["process"]] = e  # the latest sample of each process
        elif kind == "nemesis":
            nemesis.append(e)
    if not finals and not saw_ends:
        raise ValueError(
            "the history has no final read (no 'final' and no 'ends' event): "
            "the run did not finish, nothing can be judged lost"
        )

    r = Report()
    outcome = {v: s["outcome"] for v, s in sends.items()}
    r.sends_ok = sum(1 for o in outcome.values() if o == "ok")
    r.sends_fail = sum(1 for o in outcome.values() if o == "fail")
    r.sends_unknown = sum(1 for o in outcome.values() if o == "unknown")
    acks = sorted(
        (s for s in sends.values() if s["outcome"] == "ok"), key=lambda s: (s["t"], str(s["value"]))
    )

    # The final read: its values, each partition's start.
    final_pos: dict[Any, tuple[int, int]] = {}
    final_at: dict[tuple[int, int], Any] = {}
    start: dict[int, int] = {}
    for e in finals:
        pos = (_p(e["partition"]), int(e["offset"]))
        final_pos.setdefault(e["value"], pos)
        final_at.setdefault(pos, e["value"])
        start[pos[0]] = min(start.get(pos[0], pos[1]), pos[1])

    def judged(s: dict[str, Any]) -> bool:
        if s.get("partition") is None or s.get("offset") is None:
            return True
        return int(s["offset"]) >= start.get(_p(s["partition"]), 0)

    # lost, and acknowledged records that moved.
    for s in acks:
        v = s["value"]
        if not judged(s):
            continue
        if v not in final_pos:
            r.lost.append(v)
            continue
        if s.get("partition") is None or s.get("offset") is None:
            continue
        pos = (_p(s["partition"]), int(s["offset"]))
        if pos not in final_at:
            r.inconsistent.append(
                {
                    "value": v,
                    "acked": list(pos),
                    "final": list(final_pos[v]),
                    "why": "acked position empty in the final read, value elsewhere",
                }
            )

    # Positions -> values (inconsistent) and values -> positions (duplicates).
    at: dict[tuple[int, int], tuple[Any, str]] = {}
    disagree: dict[tuple[int, int], dict[str, Any]] = {}
    where: dict[Any, tuple[int, int]] = {}
    more_where: dict[Any, set[tuple[int, int]]] = {}

    def observe(pos: tuple[int, int], value: Any, who: str, counts_dup: bool) -> None:
        first = at.get(pos)
        if first is None:
            at[pos] = (value, who)
        elif first[0] != value:
            seen = disagree.setdefault(pos, {first[1]: first[0]})
            seen.setdefault(who, value)
        if counts_dup:
            w = where.setdefault(value, pos)
            if w != pos:
                more_where.setdefault(value, {w}).add(pos)

    for s in acks:
        if s.get("partition") is not None and s.get("offset") is not None:
            observe((_p(s["partition"]), int(s["offset"])), s["value"], "ack", False)
    for e in finals:
        observe((_p(e["partition"]), int(e["offset"])), e["value"], "final", True)
    for e in reads:
        pos = (_p(e["partition"]), int(e["offset"]))
        observe(pos, e["value"], f"{e['process']}/{e.get('session')}", True)
    for pos, seen in sorted(disagree.items()):
        r.inconsistent.append(
            {
                "partition": pos[0],
                "offset": pos[1],
                "values": {who: v for who, v in list(seen.items())[:6]},
                "why": "position observed with different values",
            }
        )
    for v, positions in more_where.items():
        r.duplicates.append({"value": v, "positions": sorted(list(p) for p in positions)})

    # failed_read, unknown_written.
    seen_values = set(final_pos) | {e["value"] for e in reads}
    r.failed_read = sorted(
        (v for v in seen_values if outcome.get(v) == "fail"), key=lambda v: str(v)
    )
    r.unknown_written = sum(1 for v in final_pos if outcome.get(v) == "unknown")

    # backwards.
    high: dict[tuple[str, Any, int], int] = {}
    episode: dict[tuple[str, Any, int], dict[str, Any]] = {}
    for e in reads:
        key = (e["process"], e.get("session"), _p(e["partition"]))
        off = int(e["offset"])
        h = high.get(key)
        if h is not None and off <= h:
            ep = episode.get(key)
            if ep is None:
                ep = {
                    "process": key[0],
                    "session": key[1],
                    "partition": key[2],
                    "t": e["t"],
                    "offset": off,
                    "after": h,
                    "records": 0,
                }
                episode[key] = ep
                r.backwards.append(ep)
            ep["records"] += 1
        else:
            episode.pop(key, None)
            high[key] = off

    # stuck (a): lag at the end.
    for proc, e in sorted(lags.items()):
        behind = {str(p): n for p, n in (e.get("behind") or {}).items() if n and n > 0}
        if behind:
            r.stuck.append({"process": proc, "why": "lag at the end", "behind": behind})

    # stuck (b): silence in healthy time while records it should read were acked.
    faults = fault_intervals(nemesis, t_first if t_first < math.inf else 0.0)
    r.stuck.extend(_stalls(reads, acks, faults, stall_s))

    r.unavailability = _unavailability(acks, t0s, faults, gap_s)
    return r


def _stalls(
    reads: list[dict[str, Any]],
    acks: list[dict[str, Any]],
    faults: list[tuple[str, str, float, float]],
    stall_s: float,
) -> list[dict[str, Any]]:
    if not reads:
        return []
    faulty = _merge([(s, e + stall_s / 2) for _, _, s, e in faults])
    watched_until = max(e["t"] for e in reads)
    ack_t = [s["t"] for s in acks]
    group_reads: dict[int, list[tuple[float, str]]] = defaultdict(list)  # partition -> reads
    by_proc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(reads, key=lambda e: e["t"]):
        by_proc[e["process"]].append(e)
        if str(e["process"]).startswith("group-"):
            group_reads[_p(e["partition"])].append((e["t"], str(e["process"])))
    out: list[dict[str, Any]] = []
    for proc, rs in sorted(by_proc.items()):
        grouped = str(proc).startswith("group-")
        last_read: dict[int, float] = {}  # partition -> this process's last read of it
        values: set[Any] = set()
        for i, e in enumerate(rs):
            last_read[_p(e["partition"])] = e["t"]
            values.add(e["value"])
            a = e["t"]
            b = rs[i + 1]["t"] if i + 1 < len(rs) else watched_until
            if b - a <= stall_s:
                continue
            for h0, h1 in _healthy(a, b, faulty):
                if h1 - h0 <= stall_s:
                    continue
                lo = bisect.bisect_right(ack_t, h0)
                hi = bisect.bisect_left(ack_t, h1 - stall_s)
                for s in acks[lo:hi]:
                    if s.get("partition") is None or s["value"] in values:
                        continue
                    p = _p(s["partition"])
                    if p not in last_read:
                        continue
                    if grouped and _read_by_other(group_reads[p], proc, last_read[p], h1):
                        continue  # another member read it since: the group moved it
                    out.append(
                        {
                            "process": proc,
                            "why": "no read in a healthy window although records were acked",
                            "from": round(s["t"], 3),
                            "to": round(h1, 3),
                            "partition": p,
                        }
                    )
                    break
    return out


def _read_by_other(reads: list[tuple[float, str]], proc: str, after: float, until: float) -> bool:
    """Whether a process other than ``proc`` read in ``(after, until]`` (``reads`` sorted)."""
    j = bisect.bisect_right(reads, (after, "\uffff"))
    for t, who in reads[j:]:
        if t > until:
            return False
        if who != proc:
            return True
    return False


def _unavailability(
    acks: list[dict[str, Any]],
    t0s: list[float],
    faults: list[tuple[str, str, float, float]],
    gap_s: float,
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {
        kind: {"count": 0, "longest_s": 0.0, "total_s": 0.0} for kind, *_ in faults
    }
    out = dict(sorted(out.items()))
    out["none"] = {"count": 0, "longest_s": 0.0, "total_s": 0.0}
    if not t0s:
        return out
    times = [min(t0s), *sorted(s["t"] for s in acks), max(t0s)]
    for a, b in itertools.pairwise(times):
        if b - a <= gap_s:
            continue
        kinds = {kind for kind, _, s, e in faults if s < b and e > a} or {"none"}
        for kind in kinds:
            u = out[kind]
            u["count"] += 1
            u["longest_s"] = round(max(u["longest_s"], b - a), 3)
            u["total_s"] = round(u["total_s"] + (b - a), 3)
    return out
