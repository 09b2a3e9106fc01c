"""Turns results.jsonl into report.md and PNG plots (medians across repetitions, ratios)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from .harness import QUANTILES

THROUGHPUT_KINDS = ("produce", "rate", "prodcons", "consume")
TARGET_RATIO = 1.2


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _med(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _fmt(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _group(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    by: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if "workload" in r:
            by[r["workload"]][r["system"]].append(r)
    return by


def _kind(rows: list[dict[str, Any]]) -> str:
    return str(rows[0]["settings"].get("kind", ""))


def render(rows: list[dict[str, Any]], out: Path, plots: bool = True) -> Path:
    disk = next((r for r in rows if r.get("type") == "disk"), {})
    machine = next((r for r in rows if r.get("type") == "machine"), {})
    by = _group(rows)
    systems = sorted(
        {r["system"] for r in rows if "system" in r}, key=lambda s: (s != "kbroker", s)
    )
    versions = {r["system"]: r["version"] for r in rows if "system" in r}
    a, b = [*systems, None, None][:2]
    lines: list[str] = ["# kbroker vs Apache Kafka: side-by-side benchmark", ""]
    reps = max((r.get("rep", 1) for r in rows if "workload" in r), default=0)
    lines += [
        f"Run {machine.get('time', '?')}; {machine.get('cpus', '?')} CPUs, load average at start "
        f"{machine.get('loadavg', '?')}; pinning: broker on CPUs {machine.get('broker_cpus')}, "
        f"clients on {machine.get('client_cpus')}; {reps} repetition(s), systems alternating, "
        "medians shown. " + ", ".join(f"{s} {versions[s]}" for s in systems) + ".",
        "",
        f"Disk ({disk.get('dir', '?')}): buffered sequential write "
        f"{disk.get('buffered_write_mb_s')} MiB/s, "
        f"O_DIRECT {disk.get('direct_write_mb_s')} MiB/s, 4 KiB append + fdatasync p50 "
        f"{disk.get('fsync_4k_p50_ms')} ms / p99 {disk.get('fsync_4k_p99_ms')} ms.",
        "",
    ]
    ratio_head = f"{a}/{b}" if b else "ratio"
    lines += [
        "## Throughput",
        "",
        f"| workload | records/s {a} | records/s {b} | MB/s {a} | MB/s {b} | {ratio_head} | "
        f"of disk {a} | of disk {b} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, per in by.items():
        first = next(iter(per.values()))
        if _kind(first) not in THROUGHPUT_KINDS:
            continue
        ra, rb = per.get(a or "", []), per.get(b or "", [])
        ratio = _ratio(_med(ra, "records_s"), _med(rb, "records_s"))
        lines.append(
            f"| {name} | {_fmt(_med(ra, 'records_s'))} | {_fmt(_med(rb, 'records_s'))} | "
            f"{_fmt(_med(ra, 'mb_s'))} | {_fmt(_med(rb, 'mb_s'))} | {_fmt(ratio, 2)} | "
            f"{_fmt(_med(ra, 'disk_fraction'), 2)} | {_fmt(_med(rb, 'disk_fraction'), 2)} |"
        )
    lines += [
        "",
        "MB/s = 10^6 bytes of record values per second; `of disk` = produce MB/s as a fraction of "
        "the disk's buffered sequential write; catch-up `c3` counts the bytes delivered to all "
        "three consumers.",
        "",
    ]

    lines += [
        "## Latency (ms)",
        "",
        "| workload | latency | "
        + " | ".join(f"{s} p50 | {s} p99 | {s} p99.9" for s in systems)
        + " |",
        "|---|---|" + "---:|" * (3 * len(systems)),
    ]
    for name, per in by.items():
        for prefix in ("publish", "e2e"):
            if not any(f"{prefix}_p50_ms" in r for rs in per.values() for r in rs):
                continue
            cells = []
            for s in systems:
                rs = per.get(s, [])
                cells += [_fmt(_med(rs, f"{prefix}_{p}_ms"), 2) for p in ("p50", "p99", "p999")]
            lines.append(f"| {name} | {prefix} | " + " | ".join(cells) + " |")
    rate_rows = [r for r in rows if r.get("target_rate")]
    if rate_rows:
        lines += [
            "",
            f"omb.rate50 ran at {rate_rows[0]['target_rate']:,} records/s "
            "(50% of the lower median omb.max). Latency comes from a probe sending 1000 "
            "timestamped records/s (linger 1 ms) to a one-partition topic on the same broker while "
            "the load runs.",
        ]
    lines += [
        "",
        "## Resources",
        "",
        "| workload | "
        + " | ".join(f"{s} CPU util | {s} CPU s/GB | {s} peak RSS MiB" for s in systems)
        + " | client CPU util |",
        "|---|" + "---:|" * (3 * len(systems) + 1),
    ]
    for name, per in by.items():
        cells = []
        for s in systems:
            rs = per.get(s, [])
            rss = max((r["broker_peak_rss_mb"] for r in rs), default=None)
            cells += [
                _fmt(_med(rs, "broker_cpu_util"), 2),
                _fmt(_med(rs, "broker_cpu_s_per_gb"), 2),
                _fmt(rss),
            ]
        client = max((r["client_cpu_util"] for rs in per.values() for r in rs), default=None)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_fmt(client, 2)} |")
    lines += [
        "",
        "CPU util = broker CPU seconds / wall seconds of the run (1.0 = one core); CPU s/GB = "
        "broker CPU seconds per GB of record values moved (lower is better; comparable even when "
        "the client sets the pace); peak RSS = "
        "the largest VmHWM over the repetitions (reset before each run); client CPU util = the "
        "load generator's CPU seconds / (wall seconds x client CPUs), the largest seen: near 1.0 "
        "the client, not the broker, may set the pace.",
        "",
    ]
    if a == "kbroker" and b == "kafka":
        lines += _targets(by, disk)
    if plots:
        made = _plots(by, systems, out)
        if made:
            lines += ["## Plots", "", *[f"![{p.stem}]({p.name})" for p in made], ""]
    notes = out / "notes.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def _targets(by: dict[str, dict[str, list[dict[str, Any]]]], disk: dict[str, Any]) -> list[str]:
    out = [
        "## Targets (reported, not asserted)",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]

    def row(what: str, measured: str, ok: bool | None) -> None:
        out.append(f"| {what} | {measured} | {'-' if ok is None else 'yes' if ok else 'no'} |")

    for name, per in by.items():
        first = next(iter(per.values()))
        kind = _kind(first)
        if kind not in ("produce", "consume") or name == "catchup.fill":
            continue
        r = _ratio(
            _med(per.get("kbroker", []), "records_s"), _med(per.get("kafka", []), "records_s")
        )
        row(
            f"{name}: kbroker >= {TARGET_RATIO}x Kafka",
            f"{_fmt(r, 2)}x",
            None if r is None else r >= TARGET_RATIO,
        )
    rate = by.get("omb.rate50", {})
    pk, pf = (
        _med(rate.get("kbroker", []), "publish_p99_ms"),
        _med(rate.get("kafka", []), "publish_p99_ms"),
    )
    row(
        "omb.rate50 publish p99 <= Kafka's",
        f"{_fmt(pk, 2)} vs {_fmt(pf, 2)} ms",
        None if pk is None or pf is None else pk <= pf,
    )
    rss = {
        s: max((r["broker_peak_rss_mb"] for per in by.values() for r in per.get(s, [])), default=0)
        for s in ("kbroker", "kafka")
    }
    row(
        "kbroker peak RSS <= 1/4 of Kafka's",
        f"{rss['kbroker']:.0f} vs {rss['kafka']:.0f} MiB",
        None if not rss["kafka"] else rss["kbroker"] * 4 <= rss["kafka"],
    )
    best = max(
        (_med(per.get("kbroker", []), "disk_fraction") or 0 for per in by.values()), default=0
    )
    row(
        "kbroker produce >= 90% of buffered disk write",
        f"best {best:.2f} of {disk.get('buffered_write_mb_s')} MiB/s",
        best >= 0.9 if best else None,
    )
    return [*out, ""]


def _plots(
    by: dict[str, dict[str, list[dict[str, Any]]]], systems: list[str], out: Path
) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made: list[Path] = []
    names = [n for n, per in by.items() if _kind(next(iter(per.values()))) in THROUGHPUT_KINDS]
    if names:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(names) * len(systems) + 1.5))
        height = 0.8 / len(systems)
        for i, s in enumerate(systems):
            meds, lo, hi = [], [], []
            for n in names:
                vals = [r["mb_s"] for r in by[n].get(s, [])] or [0.0]
                m = statistics.median(vals)
                meds.append(m)
                lo.append(m - min(vals))
                hi.append(max(vals) - m)
            ys = [j + i * height for j in range(len(names))]
            ax.barh(ys, meds, height, xerr=[lo, hi], label=s, capsize=2)
        ax.set_yticks([j + 0.4 - height / 2 for j in range(len(names))], names)
        ax.invert_yaxis()
        ax.set_xlabel("MB/s of record values (median, bars: min-max over repetitions)")
        ax.legend()
        ax.set_title("Throughput")
        fig.tight_layout()
        path = out / "throughput.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    panels = [
        (n, p)
        for n, per in by.items()
        for p in ("publish", "e2e")
        if any(f"{p}_quantiles_ms" in r for rs in per.values() for r in rs)
    ]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
        for ax, (n, p) in zip(axes[0], panels, strict=True):
            for s in systems:
                rs = [r for r in by[n].get(s, []) if f"{p}_quantiles_ms" in r]
                if not rs:
                    continue
                # The repetition with the median p99 stands for the system.
                r = sorted(rs, key=lambda r: r[f"{p}_p99_ms"])[len(rs) // 2]
                ax.plot(r[f"{p}_quantiles_ms"], [q * 100 for q in QUANTILES], label=s)
            ax.set_xscale("log")
            ax.set_xlabel("ms")
            ax.set_ylabel("percentile")
            ax.set_title(f"{n} {p}", fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / "latency_cdf.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    return made
