"""deploy/: the systemd units pass `systemd-analyze verify`; the Grafana dashboard and the
alert rules parse and read only metrics a live broker exports (checked against its /metrics);
the sample server.properties is accepted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, load_properties
from tests.helpers import create_topic, produce, topic_name
from tests.metrics.prom import exported_names, get, promql_metric_names, start_metrics_broker

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "kbroker-dashboard.json"
ALERTS = DEPLOY / "prometheus" / "kbroker-alerts.yml"
# Series Prometheus itself makes for every target.
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_units_verify(tmp_path: Path) -> None:
    # The units name /opt/kbroker/.venv; verify checks that ExecStart exists, so point it at
    # this installation (nothing else changes).
    venv = Path(sys.executable).parent.parent
    units = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        text = unit.read_text().replace("/opt/kbroker/.venv", str(venv))
        (tmp_path / unit.name).write_text(text)
        units.append(str(tmp_path / unit.name))
    assert {Path(u).name for u in units} == {"kbroker.service", "zookeeper.service"}
    if not Path("/usr/share/zookeeper/bin/zkServer.sh").exists():
        pytest.skip("Debian's zookeeper is not installed (deploy/setup.sh test)")
    result = subprocess.run(
        ["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Warnings (unknown keys, bad values) do not fail verify: no line may name our units.
    assert not [line for line in output.splitlines() if str(tmp_path) in line], output


def test_unit_readiness_and_restart_policy() -> None:
    unit = (DEPLOY / "systemd" / "kbroker.service").read_text()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "LimitNOFILE="):
        assert line in unit
    zk = (DEPLOY / "systemd" / "zookeeper.service").read_text()
    assert "ExecStartPost=" in zk and "Restart=on-failure" in zk


def test_sample_server_properties_are_accepted() -> None:
    config = BrokerConfig.from_strings(load_properties(DEPLOY / "server.properties").items())
    assert config.get_optional_str("metrics.listeners") == "0.0.0.0:9308"


def test_promql_name_extraction_finds_unknown_names() -> None:
    # The check below can fail: a name the broker does not export is found.
    expr = (
        'histogram_quantile(0.99, sum by (request, le) (rate(foo_seconds_bucket{request="x",'
        'instance=~"$instance"}[$__rate_interval]))) / on (instance) bar_total offset 5m'
    )
    assert promql_metric_names(expr) == {"foo_seconds_bucket", "bar_total"}
    assert promql_metric_names("topk(10, kafka_log_log_size)") == {"kafka_log_log_size"}


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = []

    def walk(panels: list[dict[str, object]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):  # type: ignore[attr-defined]
                exprs.append(target["expr"])
            walk(panel.get("panels", []))  # type: ignore[arg-type]

    walk(dash["panels"])
    for var in dash["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            m = re.match(r"label_values\((\w+)", query["query"])
            assert m, query
            exprs.append(m.group(1))
    return exprs


# The rule group whose metrics only a cluster member exports (tests/cluster checks it).
CLUSTER_GROUP = "kbroker-cluster"
# The replication rules (tests/cluster/test_replication_metrics.py sees them fire).
REPLICATION_GROUP = "kbroker-replication"


def alert_exprs(cluster: bool = False, group: str | None = None) -> list[str]:
    """The exprs of the rule groups a single node serves, or (``cluster``) of the group
    only a cluster member does, or of the one ``group``."""
    text = ALERTS.read_text()
    # Folded (>) and one-line exprs; commented-out rules are not loaded.
    exprs = []
    current = ""
    only = group
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for i, line in enumerate(lines):
        named = re.match(r"\s*- name:\s*(\S+)", line)
        if named:
            current = named.group(1)
        m = re.match(r"\s*expr:\s*(.*)$", line)
        if not m:
            continue
        if only is not None:
            if current != only:
                continue
        elif (current == CLUSTER_GROUP) != cluster:
            continue
        if m.group(1).strip() == ">":
            indent = len(lines[i + 1]) - len(lines[i + 1].lstrip())
            body = []
            for follow in lines[i + 1 :]:
                if follow.strip() and len(follow) - len(follow.lstrip()) < indent:
                    break
                body.append(follow.strip())
            exprs.append(" ".join(body))
        else:
            exprs.append(m.group(1))
    return exprs


def test_dashboard_and_alerts_use_only_exported_metrics(tmp_path: Path) -> None:
    assert len(_dashboard_exprs()) > 30
    assert len(alert_exprs()) >= 6
    if shutil.which("promtool"):
        check = subprocess.run(
            ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
    broker, base = start_metrics_broker(tmp_path / "data")
    try:
        topic = topic_name("dash")
        create_topic(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, [(None, b"v")])
        status, text = get(base + "/metrics")
        assert status == 200
    finally:
        broker.kill()
    exported = exported_names(text) | PROMETHEUS_OWN
    for source, exprs in (("dashboard", _dashboard_exprs()), ("alerts", alert_exprs())):
        for expr in exprs:
            names = promql_metric_names(expr)
            assert names, (source, expr)
            missing = names - exported
            assert not missing, f"{source} reads {missing}, which the broker does not export"
