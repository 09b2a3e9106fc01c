"""The checker of a transactional fault run's history (``--workload txn``): what went wrong.

``check_txn(events)`` reads the ``txn`` events (``bench/faults/history.py``), the
consumers' reads, the final reads at both isolation levels and the nemesis's events,
and returns a ``TxnReport``. A history without a final read at read_committed (no
``final`` and no ``ends`` event tagged ``read_committed``) never did one: ``ValueError``.

Terms. A *read_committed read* is a ``read`` or ``final`` event tagged
``read_committed``; the *final committed read* is the ``final`` ones among them; the
*final uncommitted read* the ``final`` events tagged ``read_uncommitted``. A value's
*position* is ``(partition, offset)``, taken from the final uncommitted read, else from
the client's delivery report (``offsets``). A transaction's *values* are those handed
to the client (``values``). A transaction is *decided committed* when its outcome is
``committed``, or ``unknown`` with a value in a read_committed read (an ``aborted`` one
read there is an aborted read, not a commit).

- **aborted_reads**: a transaction of outcome ``aborted`` (never asked to commit, or its
  abort acknowledged) with a value in any read_committed read. One entry per
  transaction, with the values seen and who saw them.
- **uncommitted_reads**: a read_committed read of a value before its transaction asked
  to commit (the read's ``t`` below the transaction's ``t_end``: the reader recorded
  it after the client returned it, so it was fetched earlier still), or of a value of
  an ``unknown`` transaction none of whose values is in the final committed read (it
  was never committed, yet a reader saw it). One entry per transaction.
- **lost**: a transaction of outcome ``committed`` none of whose values is in the
  final committed read. One entry per transaction.
- **torn**: (a) a decided-committed transaction with some but not all of its values in
  the final committed read (``why``: ``final read``); (b) a read_committed consumer
  that, within one ``(process, session, partition)``, read offsets both below and
  above the position of a value of a decided-committed transaction but not that value
  (it skipped part of a committed transaction; ``why``: ``skipped by a reader``; one
  entry per transaction and process/session).
- **duplicates**: a value at two or more positions among read_committed reads.
- **inconsistent**: a position observed with two different values (delivery reports,
  both final reads, consumer reads).
- **stuck**: the latest ``lag`` sample of a process with a partition behind (a
  read_committed consumer held back at the end, by an open transaction or otherwise).

Information, not anomalies: transactions by outcome, ``unknown`` ones found committed,
and ``unavailability``: every gap of more than ``gap_s`` between acknowledged ends
(commits and aborts) charged to the faults under way, as the idempotent checker does.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.faults.checker import EXAMPLES, _unavailability, fault_intervals

ANOMALIES = (
    "aborted_reads",
    "torn",
    "uncommitted_reads",
    "lost",
    "duplicates",
    "inconsistent",
    "stuck",
)
COMMITTED = "read_committed"
UNCOMMITTED = "read_uncommitted"


@dataclass
class TxnReport:
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    unknown_committed: int = 0  # unknown ones decided committed by what was read
    values: int = 0
    aborted_reads: list[dict[str, Any]] = field(default_factory=list)
    torn: list[dict[str, Any]] = field(default_factory=list)
    uncommitted_reads: list[dict[str, Any]] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    inconsistent: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[dict[str, Any]] = field(default_factory=list)
    unavailability: dict[str, dict[str, float]] = field(default_factory=dict)

    def anomalies(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in ANOMALIES}

    def broker_anomalies(self) -> dict[str, int]:
        return self.anomalies()

    def ok(self) -> bool:
        return not any(self.anomalies().values())

    def summary_line(self, label: str) -> str:
        a = self.anomalies()
        counts = ", ".join(f"{name.replace('_', '-')} {a[name]}" for name in ANOMALIES)
        longest = ", ".join(
            f"{kind} {u['longest_s']:.1f}s" for kind, u in self.unavailability.items()
        )
        return (
            f"{label}: {self.committed} committed, {self.aborted} aborted, "
            f"{self.unknown} unknown ({self.unknown_committed} committed), "
            f"{self.values} values | {counts} | longest unavailable: {longest or 'n/a'}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok(),
            "transactions": {
                "committed": self.committed,
                "aborted": self.aborted,
                "unknown": self.unknown,
                "unknown_committed": self.unknown_committed,
            },
            "values": self.values,
            "anomalies": self.anomalies(),
            "broker_anomalies": self.broker_anomalies(),
            "examples": {name: getattr(self, name)[:EXAMPLES] for name in ANOMALIES},
            "unavailability": self.unavailability,
        }


def _pos(e: dict[str, Any]) -> tuple[int, int]:
    return int(e["partition"]), int(e["offset"])


def check_txn(events: Iterable[dict[str, Any]], *, gap_s: float = 1.0) -> TxnReport:
    txns: dict[str, dict[str, Any]] = {}
    owner: dict[str, str] = {}  # value -> its transaction
    reads: list[dict[str, Any]] = []  # consumers' read_committed reads
    other_reads: list[dict[str, Any]] = []  # consumers' reads at another isolation
    finals: dict[str, list[dict[str, Any]]] = {COMMITTED: [], UNCOMMITTED: []}
    ended: set[str] = set()
    lags: dict[str, dict[str, Any]] = {}
    nemesis: list[dict[str, Any]] = []
    t_first = math.inf
    for e in events:
        kind = e.get("kind")
        if isinstance(e.get("t"), int | float):
            t_first = min(t_first, e["t"])
        if kind == "txn":
            txns[e["txn"]] = e
            for v in e.get("values") or {}:
                owner[v] = e["txn"]
        elif kind == "read":
            (reads if e.get("isolation") == COMMITTED else other_reads).append(e)
        elif kind == "final":
            finals.setdefault(str(e.get("isolation")), []).append(e)
        elif kind == "ends":
            ended.add(str(e.get("isolation")))
        elif kind == "lag":
            lags[e["process"]] = e
        elif kind == "nemesis":
            nemesis.append(e)
    if not finals[COMMITTED] and COMMITTED not in ended:
        raise ValueError(
            "the history has no final read_committed read (no 'final' and no 'ends' "
            "event tagged read_committed): nothing can be judged"
        )

    r = TxnReport()
    for t in txns.values():
        r.values += len(t.get("values") or {})
        if t["outcome"] == "committed":
            r.committed += 1
        elif t["outcome"] == "aborted":
            r.aborted += 1
        else:
            r.unknown += 1

    # Where each value is: the final uncommitted read, else the delivery report.
    position: dict[str, tuple[int, int]] = {}
    for t in txns.values():
        for v, o in (t.get("offsets") or {}).items():
            position[v] = (int(t["values"][v]), int(o))
    for e in finals.get(UNCOMMITTED, []):
        position[e["value"]] = _pos(e)

    committed_reads = [*finals[COMMITTED], *reads]
    in_final: dict[str, set[str]] = defaultdict(set)  # txn -> its values in the final
    for e in finals[COMMITTED]:
        if e["value"] in owner:
            in_final[owner[e["value"]]].add(e["value"])
    seen_by: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    by_value: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in committed_reads:
        by_value[e["value"]].append(e)
        txn = owner.get(e["value"])
        if txn is not None:
            who = str(e.get("process", "final"))
            seen_by[txn][e["value"]].add(who)
    decided = {
        name
        for name, t in txns.items()
        if t["outcome"] == "committed" or (t["outcome"] == "unknown" and name in seen_by)
    }
    r.unknown_committed = sum(1 for n in decided if txns[n]["outcome"] == "unknown")

    for name in sorted(txns, key=_txn_order):
        t = txns[name]
        values = set(t.get("values") or {})
        seen = seen_by.get(name, {})
        if t["outcome"] == "aborted" and seen:
            r.aborted_reads.append(
                {
                    "txn": name,
                    "intent": t.get("intent"),
                    "acked": t.get("acked"),
                    "seen": {v: sorted(w) for v, w in sorted(seen.items())},
                }
            )
        if t["outcome"] == "committed" and values and not in_final.get(name):
            r.lost.append({"txn": name, "values": sorted(values)})
        if name in decided and in_final.get(name) and in_final[name] != values:
            r.torn.append(
                {
                    "txn": name,
                    "why": "final read",
                    "outcome": t["outcome"],
                    "missing": sorted(values - in_final[name]),
                    "present": sorted(in_final[name]),
                }
            )
        dirty = _dirty_reads(t, by_value, values, bool(in_final.get(name)))
        if dirty and t["outcome"] != "aborted":
            r.uncommitted_reads.append({"txn": name, "outcome": t["outcome"], "reads": dirty})

    r.torn.extend(_skipped(txns, decided, position, reads))
    r.duplicates = _duplicates(committed_reads)
    r.inconsistent = _inconsistent(txns, finals, reads + other_reads)
    for proc, e in sorted(lags.items()):
        behind = {str(p): n for p, n in (e.get("behind") or {}).items() if n and n > 0}
        if behind:
            r.stuck.append({"process": proc, "why": "lag at the end", "behind": behind})

    faults = fault_intervals(nemesis, t_first if t_first < math.inf else 0.0)
    acked_ends = [{"t": t["t"]} for t in txns.values() if t.get("acked")]
    t0s = [float(t["t0"]) for t in txns.values() if t.get("t0") is not None]
    r.unavailability = _unavailability(acked_ends, t0s, faults, gap_s)
    return r


def _txn_order(name: str) -> tuple[int, ...] | tuple[str]:
    try:
        return tuple(int(x) for x in name.split("."))
    except ValueError:
        return (name,)


def _dirty_reads(
    t: dict[str, Any],
    by_value: dict[str, list[dict[str, Any]]],
    values: set[str],
    committed_later: bool,
) -> list[dict[str, Any]]:
    """The read_committed reads of ``t``'s values that saw it uncommitted."""
    out = []
    t_end = t.get("t_end")
    never_committed = t["outcome"] == "unknown" and not committed_later
    for e in (e for v in sorted(values) for e in by_value.get(v, [])):
        early = t.get("intent") == "commit" and t_end is not None and e["t"] < t_end
        if early or never_committed:
            out.append(
                {
                    "value": e["value"],
                    "by": e.get("process", "final"),
                    "t": e["t"],
                    "why": "before the commit was asked" if early else "never committed",
                }
            )
    return out[:EXAMPLES]


def _skipped(
    txns: dict[str, dict[str, Any]],
    decided: set[str],
    position: dict[str, tuple[int, int]],
    reads: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Torn (b): a reader's session went past a committed value without reading it."""
    offsets: dict[tuple[str, Any, int], list[int]] = defaultdict(list)
    got: dict[tuple[str, Any], set[str]] = defaultdict(set)
    for e in reads:
        p, o = _pos(e)
        offsets[(e["process"], e.get("session"), p)].append(o)
        got[(e["process"], e.get("session"))].add(e["value"])
    for key in offsets:
        offsets[key].sort()
    out = []
    for name in sorted(decided, key=_txn_order):
        values = txns[name].get("values") or {}
        for proc, session in sorted(got, key=str):
            seen = got[(proc, session)]
            missed = []
            for v in sorted(values):
                if v in seen or v not in position:
                    continue
                p, o = position[v]
                offs = offsets.get((proc, session, p))
                if not offs:
                    continue
                i = bisect.bisect_left(offs, o)
                if 0 < i < len(offs):  # read below and above o, not o
                    missed.append(v)
            if missed:
                out.append(
                    {
                        "txn": name,
                        "why": "skipped by a reader",
                        "process": proc,
                        "session": session,
                        "missed": missed,
                        "read": sorted(seen & set(values)),
                    }
                )
    return out


def _duplicates(committed_reads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for e in committed_reads:
        where[e["value"]].add(_pos(e))
    return [
        {"value": v, "positions": sorted(list(p) for p in ps)}
        for v, ps in sorted(where.items())
        if len(ps) > 1
    ]


def _inconsistent(
    txns: dict[str, dict[str, Any]],
    finals: dict[str, list[dict[str, Any]]],
    reads: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    at: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)  # pos -> who -> value
    for t in txns.values():
        for v, o in (t.get("offsets") or {}).items():
            at[(int(t["values"][v]), int(o))].setdefault("delivery", v)
    for isolation, es in finals.items():
        for e in es:
            at[_pos(e)].setdefault(f"final/{isolation}", e["value"])
    for e in reads:
        at[_pos(e)].setdefault(f"{e['process']}/{e.get('session')}", e["value"])
    return [
        {"partition": pos[0], "offset": pos[1], "values": dict(list(seen.items())[:6])}
        for pos, seen in sorted(at.items())
        if len(set(seen.values())) > 1
    ]
