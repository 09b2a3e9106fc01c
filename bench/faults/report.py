"""A fault run's results folder: the anomalies, the one summary line, the timeline."""

from __future__ import annotations

import json
from pathlib import Path

from bench.faults.checker import Report
from bench.faults.history import read_history
from bench.faults.plot import timeline
from bench.faults.txn_checker import TxnReport


def write_results(folder: Path, report: Report | TxnReport, events_path: Path, label: str) -> None:
    """Writes ``anomalies.json``, ``summary.txt`` and ``timeline.png`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {"label": label, **report.to_json()}
    (folder / "anomalies.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (folder / "summary.txt").write_text(report.summary_line(label) + "\n")
    timeline(read_history(events_path), folder / "timeline.png", label)
