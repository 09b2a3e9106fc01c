"""The fault harness at CI's size: kbroker's cluster (3 brokers, 3 ZooKeeper nodes, each in
a network namespace) under every fault kind once, in the order seed 7 gives, with the
default settings (acks=all, min.insync.replicas 2, no unclean election): the checker
must find no lost write, duplicate, inconsistent offset or stuck consumer (a duplicate
the client made by sending a record again under a new producer epoch excepted: see
bench/faults/postmortem.py).

The long run is ``python -m bench.faults --minutes 30``; Apache Kafka runs under the
same harness with ``--system kafka``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from bench.faults.history import read_history
from bench.faults.nemesis import KINDS
from bench.faults.net import available, running

REPO = Path(__file__).resolve().parents[2]
SEED = 7
# Each fault 4-6 s, 6-8 s apart: the whole run is about 3 minutes.
RUN_TIMEOUT = 600


def leftovers(prefix: str = "kbf") -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    mounts = Path("/proc/mounts").read_text()
    found = [line for line in names.splitlines() if line.startswith(prefix)]
    found += [line.split(":")[1].strip() for line in links.splitlines() if f" {prefix}" in line]
    found += [line for line in mounts.splitlines() if "/disks/b" in line and "faults" in line]
    return found


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_every_fault_kind_once_loses_nothing(tmp_path: Path) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    before = leftovers()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.faults",
            "--each-once",
            "--seed",
            str(SEED),
            "--hold",
            "4,6",
            "--gap",
            "6,8",
            "--rate",
            "50",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    folders = list(tmp_path.glob("kbroker-seed7-*"))
    assert len(folders) == 1, (done.stdout, done.stderr[-3000:])
    folder = folders[0]
    summary = (folder / "summary.txt").read_text() if (folder / "summary.txt").exists() else ""
    anomalies = folder / "anomalies.json"
    # What went wrong, the summary's line (with the harness's problems) last: a long
    # failure is shown cut in the middle.
    found = json.loads(anomalies.read_text()) if anomalies.exists() else None
    detail = (
        json.dumps(found["anomalies"])
        if found is not None and not found["ok"]
        else done.stderr[-2500:]
    )
    assert done.returncode == 0, f"{detail}\n{summary}"
    # It ran what it claims: every kind started and ended, and the clients did work.
    events = list(read_history(folder / "history.jsonl"))
    phases = Counter((e["fault"], e["phase"]) for e in events if e["kind"] == "nemesis")
    assert phases == Counter({(k, p): 1 for k in KINDS for p in ("start", "end")})
    acked = sum(1 for e in events if e["kind"] == "send" and e["outcome"] == "ok")
    final = sum(1 for e in events if e["kind"] == "final")
    assert acked > 1000 and final >= acked
    report = json.loads(anomalies.read_text())
    # A record the client itself sent again under a bumped producer epoch is reported
    # (anomalies) but is not the broker's: no broker can tell it from a new one.
    assert report["ok"] and not any(report["broker_anomalies"].values()), report
    assert (folder / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert leftovers() == before, "the run left namespaces, links or mounts behind"


@pytest.mark.timeout(240)
def test_a_run_stopped_by_sigterm_leaves_nothing_behind(tmp_path: Path) -> None:
    before = leftovers()
    with run_in_its_first_fault(tmp_path) as run:
        pids = cluster_pids(tmp_path)
        assert pids, "no broker or ZooKeeper process found"
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=90)
    assert run.returncode == 2, err[-2000:]
    assert "interrupted" in err
    assert leftovers() == before
    assert not [p for p in pids if running(p)], "processes left running"


@pytest.mark.timeout(240)
def test_a_run_whose_process_aborts_leaves_nothing_behind(tmp_path: Path) -> None:
    """The clients run in the run's process, and librdkafka aborts it on some malformed
    input (an assertion): no cleanup of its own runs then, so the process it was forked
    from removes what it left."""
    before = leftovers()
    with run_in_its_first_fault(tmp_path) as run:
        pids = cluster_pids(tmp_path)
        assert pids, "no broker or ZooKeeper process found"
        children = [
            int(p) for p in Path(f"/proc/{run.pid}/task/{run.pid}/children").read_text().split()
        ]
        assert len(children) == 1, children
        os.kill(children[0], signal.SIGABRT)
        _, err = run.communicate(timeout=90)
    assert run.returncode == 1, err[-2000:]
    assert "died of SIGABRT" in err
    summary = next(tmp_path.glob("kbroker-seed1-*/summary.txt")).read_text()
    assert "died of SIGABRT" in summary
    assert leftovers() == before
    assert not [p for p in pids if running(p)], "processes left running"


@contextmanager
def run_in_its_first_fault(folder: Path) -> Iterator[subprocess.Popen[str]]:
    """A run of seed 1 (a broker killed or paused for 60 s first), once that fault began."""
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench.faults", "--each-once", "--faults", "kill,pause"),
            *("--seed", "1", "--hold", "60", "--out", str(folder)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 150
        history = None
        while time.monotonic() < deadline and run.poll() is None:
            history = next(folder.glob("kbroker-seed1-*/history.jsonl"), None)
            if history is not None and '"nemesis"' in history.read_text():
                break
            time.sleep(0.5)
        if history is None or run.poll() is not None:
            if run.poll() is None:
                run.terminate()
            out, err = run.communicate(timeout=120)
            pytest.fail(
                f"the run ended (exit {run.returncode}) before its first fault began\n"
                f"stdout: {out[-3000:]}\nstderr: {err[-6000:]}",
                pytrace=False,
            )
        yield run
    finally:
        if run.poll() is None:  # the test failed: the run cleans up on SIGTERM
            run.terminate()
            try:
                run.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                run.kill()
                run.communicate()


def cluster_pids(folder: Path) -> list[int]:
    """The brokers' and ZooKeeper nodes' pids: processes whose command line names ``folder``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in cmdline and b"bench.faults" not in cmdline:
            pids.append(int(proc.name))
    return pids
