"""The transactional fault workload at CI's size: kbroker's cluster (3 brokers, 3
ZooKeeper nodes, each in a network namespace) under kill -9, a split, an isolation and
SIGSTOP once each, in the order seed 16 gives, which aims the kill, the split and the
isolation at a transaction coordinator of the workload (the leader of its
``__transaction_state`` partition). Transactional producers commit and abort
transactions across partitions throughout; the checker (bench/faults/txn_checker.py)
must find no aborted read, torn transaction, uncommitted read, lost commit, duplicate,
inconsistent offset or held-back reader. About a minute and a half.

The long run is ``python -m bench.faults --workload txn --minutes 30``; Apache Kafka
runs under the same harness with ``--system kafka``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from bench.faults.history import read_history
from bench.faults.net import available

from tests.faults.test_fault_run import REPO, leftovers

SEED = 16
FAULTS = ("kill", "split", "isolate", "pause")
RUN_TIMEOUT = 300


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_transactions_under_coordinator_faults(tmp_path: Path) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    before = leftovers()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.faults", "--workload", "txn", "--each-once"),
            *("--faults", ",".join(FAULTS), "--seed", str(SEED)),
            *("--hold", "4,6", "--gap", "5,6", "--out", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    folders = list(tmp_path.glob(f"kbroker-seed{SEED}-txn-*"))
    assert len(folders) == 1, (done.stdout, done.stderr[-3000:])
    folder = folders[0]
    summary = (folder / "summary.txt").read_text() if (folder / "summary.txt").exists() else ""
    anomalies = folder / "anomalies.json"
    detail = anomalies.read_text()[:3000] if anomalies.exists() else done.stderr[-3000:]
    assert done.returncode == 0, f"{summary}\n{detail}"
    report = json.loads(anomalies.read_text())
    assert report["ok"] and not any(report["anomalies"].values()), report
    # It ran what it claims: each fault once, the coordinators among the targets, and
    # transactions of both ends read at both isolation levels.
    events = list(read_history(folder / "history.jsonl"))
    nemesis = [e for e in events if e["kind"] == "nemesis"]
    assert Counter((e["fault"], e["phase"]) for e in nemesis) == Counter(
        {(k, p): 1 for k in FAULTS for p in ("start", "end")}
    )
    on_coordinator = {e["fault"] for e in nemesis if "coordinator" in e.get("detail", "")}
    assert {"kill", "split"} <= on_coordinator, nemesis
    txns = report["transactions"]
    assert txns["committed"] > 100 and txns["aborted"] > 20, txns
    finals = Counter(e["isolation"] for e in events if e["kind"] == "final")
    assert finals["read_committed"] > 500, finals
    # Aborted values are in the log: the read_uncommitted read has more.
    assert finals["read_uncommitted"] > finals["read_committed"], finals
    assert summary.startswith(f"kbroker seed={SEED} txn: ")
    assert leftovers() == before, "the run left namespaces, links or mounts behind"
