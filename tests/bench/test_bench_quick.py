"""The benchmark harness end to end (`python -m bench --quick`), so it never rots.

Runs Apache Kafka too when bench/kafka/fetch.sh has fetched its jars
(tests/run.sh does), kbroker alone otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench.workloads import (
    QUICK,
    base_session,
    flush_session,
    rate_session,
    security_session,
    wire_rate_session,
    wire_session,
)

from bench import systems

REPO = Path(__file__).resolve().parents[2]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.timeout(420)
@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat (the catch-up consumer) is not installed"
)
def test_quick_run_measures_every_workload_on_every_system(tmp_path: Path) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--data-dir", str(data)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[1/" in proc.stderr  # progress is shown

    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    disk = next(r for r in rows if r.get("type") == "disk")
    assert disk["buffered_write_mb_s"] > 0 and disk["fsync_4k_p99_ms"] > 0
    assert disk["sendfile_loopback_mb_s"] > 0
    expected = {"kbroker", "kafka"} if systems.kafka_available() else {"kbroker"}
    runs = [r for r in rows if "workload" in r]
    assert {r["system"] for r in runs} == expected
    table = base_session(QUICK) + flush_session(QUICK) + rate_session(QUICK)
    names = {w.name for w in table + wire_session(QUICK) + wire_rate_session(QUICK)}
    for system in expected:
        mine = {r["workload"]: r for r in runs if r["system"] == system}
        assert set(mine) == names
        for name, r in mine.items():
            assert r["broker_peak_rss_mb"] > 0 and r["broker_cpu_s"] >= 0, name
            if name != "kreps.e2e":
                assert r["records_s"] > 0 and r["mb_s"] > 0, name
                assert r.get("errors", 0) == 0, name
        assert mine["catchup.c1"]["complete"] and mine["catchup.c3"]["complete"]
        assert mine["catchup.c3"]["records"] == 3 * mine["catchup.fill"]["records"]
        assert mine["omb.rate50"]["publish_p99_ms"] > 0 and mine["kreps.e2e"]["e2e_p99_ms"] > 0
        assert mine["flush.omb.max"]["settings"]["broker"]["log.flush.interval.messages"] == "10000"
        # The wire generator's rows: each answer checked, the catch-up read whole, the
        # generator's own CPU beside each.
        for w in wire_session(QUICK) + wire_rate_session(QUICK):
            r = mine[w.name]
            assert r["generator_cpu_util"] > 0 and r.get("fatal") is None, w.name
        fill, c1 = mine["wire.catchup.fill"], mine["wire.catchup.c1"]
        assert c1["complete"] and c1["records"] == fill["records"] > 0
        assert c1["sendfile_fraction"] > 0 and c1["bytes"] > fill["records"] * 1024
        assert mine["wire.prodcons"]["complete"]
        assert mine["wire.prodcons"]["consumed_records"] == mine["wire.prodcons"]["records"]
        rates = [mine[w.name]["target_rate"] for w in wire_rate_session(QUICK)]
        assert 0 < rates[0] < rates[1]
        assert all(mine[w.name]["publish_p99_ms"] > 0 for w in wire_rate_session(QUICK))

    report = (out / "report.md").read_text()
    assert "| kreps.produce.p1.acks1 |" in report and "## Latency" in report
    assert "## The brokers measured (wire generator)" in report
    assert "| wire.produce.1kib.p16.acks1 |" in report
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        assert (out / "throughput.png").stat().st_size > 0 and (
            out / "latency_cdf.png"
        ).stat().st_size > 0
    # Brokers, the Kafka JVM and load processes are gone with the run.
    assert _processes_mentioning(str(tmp_path)) == []


@pytest.mark.timeout(240)
@pytest.mark.skipif(
    shutil.which("kcat") is None or shutil.which("openssl") is None,
    reason="kcat (the catch-up consumer) or openssl (the run's certificates) is not installed",
)
def test_quick_security_run_measures_each_listener_on_every_system(tmp_path: Path) -> None:
    """`--security`: produce and catch-up rows over PLAINTEXT, SSL and SASL_SSL (PLAIN) of one
    broker per system, Kafka 3.9.1 beside kbroker when its jars are there."""
    out, data = tmp_path / "out", tmp_path / "data"
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench", "--quick", "--security", "plaintext,ssl,sasl_ssl",
            "--out", str(out), "--data-dir", str(data), "--no-plots",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=230,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]

    text = (out / "results.jsonl").read_text()
    assert "sasl.password" not in text and "PlainLoginModule" not in text
    runs = [r for r in map(json.loads, text.splitlines()) if "workload" in r]
    expected = {"kbroker", "kafka"} if systems.kafka_available("3.9.1") else {"kbroker"}
    assert {r["system"] for r in runs} == expected
    assert {r["version"] for r in runs if r["system"] == "kafka"} <= {"3.9.1"}
    names = {w.name for w in security_session(QUICK, ["PLAINTEXT", "SSL", "SASL_SSL"])}
    for system in expected:
        mine = {r["workload"]: r for r in runs if r["system"] == system}
        assert set(mine) == names
        for protocol in ("plaintext", "ssl", "sasl_ssl"):
            produce, consume = mine[f"sec.{protocol}.produce"], mine[f"sec.{protocol}.consume"]
            assert produce["security"] == protocol.upper()
            assert produce["records"] == QUICK.security_records and produce["errors"] == 0
            assert consume["complete"] and consume["records"] == produce["records"]
            for r in (produce, consume):
                assert r["mb_s"] > 0 and r["broker_cpu_s_per_gb"] is not None
                assert r["client_cpu_s_per_gb"] is not None
                if protocol == "plaintext":
                    assert "tls" not in r
                else:
                    assert r["tls"].startswith("TLSv1."), r["tls"]
    report = (out / "report.md").read_text()
    assert "## Cost of security" in report and "| SASL_SSL |" in report
    assert _processes_mentioning(str(tmp_path)) == []
