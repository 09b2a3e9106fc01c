"""The recorded history of a fault run: what every client did, what the nemesis did.

One event per line of ``history.jsonl`` in the run's results folder. Times are
seconds since the run started (``time.monotonic()`` minus the start), so events
of different threads order on one clock.

Kinds of event, each a JSON object with ``kind`` and ``t``:

- ``send``: one produce, written when its outcome is known. ``process`` (the
  producer, e.g. ``producer-0``), ``value`` (unique in the run), ``t0`` (when
  it was handed to the client), ``t`` (when the outcome came), ``outcome``:
  ``ok`` (acknowledged), ``fail`` (definitely not written: the broker refused
  it before appending) or ``unknown`` (may or may not be written: timed out,
  connection lost), ``partition`` and ``offset`` when acknowledged, ``error``
  (text) otherwise.
- ``read``: one record a consumer returned. ``process`` (``group-N`` for a
  member of the consumer group, ``reader-N`` for an assigned reader),
  ``session`` (a number that changes whenever the reader may legitimately go
  back: a new assignment, a restart of the client), ``partition``, ``offset``,
  ``value``.
- ``final``: one record of the final read, done after every fault has healed by
  a fresh reader from the start of each partition to its end: ``partition``,
  ``offset``, ``value``.
- ``ends``: the end offsets (high watermarks) of every partition when the final
  read started: ``ends`` ({partition: offset}, keys as strings in JSON).
- ``lag``: a consumer's position against the end offsets, sampled at the end of
  the run once the cluster is healthy again: ``process``, ``behind``
  ({partition: records not yet read}).
- ``txn`` (the transactional workload, ``bench/faults/txn_workload.py``): one
  transaction, written when its end is known: ``process``, ``txn`` (unique in the
  run), ``intent`` (``commit``/``abort``), ``outcome`` (``committed``, ``aborted`` or
  ``unknown``), ``acked``, ``values`` ({value: partition}), ``offsets`` ({value:
  offset} of the delivered ones), ``t0``, ``t_end`` (when the end was asked, or null),
  ``error``. Its reads and final reads carry ``isolation`` (``read_committed`` or
  ``read_uncommitted``), and so does each ``ends`` event.
- ``nemesis``: a fault starting or ending. ``fault`` (its kind, e.g. ``kill``,
  ``pause``, ``isolate``), ``phase`` (``start`` or ``end``), ``target`` (what
  it hit, e.g. ``broker-2`` or ``zk-1``), ``detail`` (free text).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

KINDS = ("send", "read", "final", "ends", "lag", "nemesis", "txn")
OUTCOMES = ("ok", "fail", "unknown")


class Recorder:
    """Appends events to ``history.jsonl`` from any thread, stamped on one clock."""

    def __init__(self, path: Path, start: float | None = None) -> None:
        self.path = path
        self.start = time.monotonic() if start is None else start
        self._lock = threading.Lock()
        self._out: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def now(self) -> float:
        return round(time.monotonic() - self.start, 6)

    def record(self, kind: str, **fields: Any) -> None:
        assert kind in KINDS, kind
        t = fields.pop("t") if "t" in fields else self.now()
        event = {"kind": kind, "t": t, **fields}
        line = json.dumps(event, separators=(",", ":"))
        with self._lock:
            self._out.write(line + "\n")

    def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def close(self) -> None:
        with self._lock:
            self._out.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """The events of ``path`` in file order; a torn last line (a killed run) is skipped."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
