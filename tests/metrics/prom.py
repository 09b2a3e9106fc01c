"""What the metrics tests share: a broker with metrics on, scraping, a real Prometheus server,
and the metric names a PromQL expression uses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers import BrokerProcess, free_port, wait_for


def start_metrics_broker(
    data_dir: Path, *settings: str, args: list[str] | None = None
) -> tuple[BrokerProcess, str]:
    """A broker with --metrics on a free port; (the process, its base URL)."""
    port = free_port()
    b = BrokerProcess(data_dir, args=["--metrics", f"127.0.0.1:{port}", *(args or [])])
    b.start(*settings)
    return b, f"http://127.0.0.1:{port}"


def get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    """(status, body) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[str, float]:
    """Exposition text -> {'name{labels}': value} (labels as written)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one series of ``name`` whose labels include ``labels``."""
    for key, value in samples(text).items():
        metric, _, rest = key.partition("{")
        if metric != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', rest))
        if all(have.get(k) == v for k, v in labels.items()):
            return value
    return None


def exported_names(text: str) -> set[str]:
    """Every series name a /metrics page can hold: the families (# TYPE lines) with the
    suffixes their type adds, and every sample name."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "counter":
                names.add(name + "_total")
            elif kind == "histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
            elif kind == "summary":
                names |= {name + "_sum", name + "_count"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


# PromQL words that are not metric names.
_PROMQL_WORDS = frozenset(
    """
    sum min max avg group stddev stdvar count count_values bottomk topk quantile
    by without on ignoring group_left group_right and or unless bool offset
    rate irate increase delta idelta deriv predict_linear histogram_quantile
    abs ceil floor round clamp clamp_min clamp_max exp ln log2 log10 sqrt
    label_replace label_join time timestamp vector scalar sort sort_desc
    avg_over_time min_over_time max_over_time sum_over_time count_over_time
    last_over_time quantile_over_time stddev_over_time absent absent_over_time
    changes resets day_of_month day_of_week hour minute month year inf nan
    """.split()  # noqa: SIM905
)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, strings, grouping
    labels, durations and Grafana variables left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


@contextmanager
def prometheus(
    tmp: Path, targets: list[str], interval_s: float = 1.0, rules: Path | None = None
) -> Iterator[str]:
    """A real Prometheus server scraping ``targets`` (host:port), evaluating the alerting
    ``rules`` file if given; yields its base URL."""
    exe = shutil.which("prometheus")
    assert exe, "prometheus is not installed (deploy/setup.sh test installs it)"
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {int(interval_s * 1000)}ms\n"
        f"  evaluation_interval: {int(interval_s * 1000)}ms\n"
        + (f"rule_files: [{json.dumps(str(rules))}]\n" if rules is not None else "")
        + "scrape_configs:\n"
        "  - job_name: kbroker\n"
        f"    scrape_timeout: {int(interval_s * 1000)}ms\n"
        f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
    )
    log = open(tmp / "prometheus.log", "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            exe,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()}")
            try:
                return get(url + "/-/ready", timeout=2)[0] == 200
            except OSError:
                return False

        wait_for(up, "prometheus to start", timeout=30)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def promql(url: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query through Prometheus's HTTP API: its result vector."""
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    status, body = get(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}")
    answer = json.loads(body)
    assert status == 200 and answer["status"] == "success", body
    return answer["data"]["result"]  # type: ignore[no-any-return]


def promql_value(url: str, expr: str, at: float | None = None) -> float | None:
    result = promql(url, expr, at)
    if not result:
        return None
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def wait_scraped(url: str, target_port: int, timeout: float = 30) -> None:
    """Until Prometheus has scraped the target successfully."""
    wait_for(
        lambda: promql_value(url, f'up{{instance="127.0.0.1:{target_port}"}}') == 1,
        "prometheus to scrape the broker",
        timeout=timeout,
    )
    time.sleep(0)


def alerts(url: str) -> list[dict[str, Any]]:
    """The alerts Prometheus holds now (pending and firing), through its HTTP API."""
    status, body = get(f"{url}/api/v1/alerts")
    answer = json.loads(body)
    assert status == 200 and answer["status"] == "success", body
    return answer["data"]["alerts"]  # type: ignore[no-any-return]
