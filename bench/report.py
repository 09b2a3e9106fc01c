"""Turns results.jsonl into report.md and PNG plots (medians across repetitions, ratios)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from .harness import QUANTILES

THROUGHPUT_KINDS = ("produce", "rate", "prodcons", "consume", "transactions")
WIRE_KINDS = ("wire.produce", "wire.consume", "wire.prodcons", "wire.rate")
TARGET_RATIO = 1.2
# The wire.* rows' goals (issue 29): kbroker's throughput against Kafka's, its CPU per GB
# against Kafka's, produce against the disk's buffered write, catch-up against sendfile to
# a loopback socket, and the probe's p99 at fixed rates against Kafka's.
WIRE_TARGET_RATIO = 1.5
WIRE_CPU_RATIO = 1 / 3
WIRE_DISK_FRACTION = 0.9
WIRE_SENDFILE_FRACTION = 0.8
WIRE_P99_RATIO = 1 / 3
# A librdkafka row whose client used this much of its core(s) measured the client.
CLIENT_BOUND_UTIL = 0.9
# Over TLS (and SASL_SSL), kbroker's produce throughput against Kafka's.
SECURE_TARGET_RATIO = 1.5
SECURITY_ORDER = ("PLAINTEXT", "SSL", "SASL_SSL")


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
        f"{disk.get('fsync_4k_p50_ms')} ms / p99 {disk.get('fsync_4k_p99_ms')} ms"
        + (
            f"; sendfile of a cached file to a loopback socket "
            f"{disk['sendfile_loopback_mb_s']} MiB/s."
            if disk.get("sendfile_loopback_mb_s")
            else "."
        ),
        "",
    ]
    ratio_head = f"{a}/{b}" if b else "ratio"
    lines += [
        "## Throughput",
        "",
        f"| workload | records/s {a} | records/s {b} | MB/s {a} | MB/s {b} | {ratio_head} | "
        f"of disk {a} | of disk {b} | client-bound |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
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
            f"{_fmt(_med(ra, 'disk_fraction'), 2)} | {_fmt(_med(rb, 'disk_fraction'), 2)} | "
            + ", ".join(s for s in systems if _client_bound(per.get(s, [])))
            + " |"
        )
    lines += [
        "",
        "MB/s = 10^6 bytes of record values per second; `of disk` = produce MB/s as a fraction of "
        "the disk's buffered sequential write; catch-up `c3` counts the bytes delivered to all "
        "three consumers. These rows use librdkafka clients (what users run); `client-bound` "
        f"names the systems whose run had the clients at {CLIENT_BOUND_UTIL:.0%} or more of "
        "their CPUs (median): there the row measured the client, not the broker. The wire "
        "rows below measure the brokers.",
        "",
    ]
    lines += _wire(by, systems, disk)

    lines += [
        "## Latency (ms)",
        "",
        "| workload | latency | "
        + " | ".join(f"{s} p50 | {s} p99 | {s} p99.9" for s in systems)
        + " |",
        "|---|---|" + "---:|" * (3 * len(systems)),
    ]
    for name, per in by.items():
        for prefix in ("publish", "e2e", "commit"):
            if not any(f"{prefix}_p50_ms" in r for rs in per.values() for r in rs):
                continue
            cells = []
            for s in systems:
                rs = per.get(s, [])
                cells += [_fmt(_med(rs, f"{prefix}_{p}_ms"), 2) for p in ("p50", "p99", "p999")]
            lines.append(f"| {name} | {prefix} | " + " | ".join(cells) + " |")
    rate_rows = [r for r in rows if r.get("target_rate") and r["workload"] == "omb.rate50"]
    if rate_rows:
        lines += [
            "",
            f"omb.rate50 ran at {rate_rows[0]['target_rate']:,} records/s "
            "(50% of the lower median omb.max).",
        ]
    wire_rates = {
        r["workload"]: r["target_rate"]
        for r in rows
        if r.get("target_rate") and r["workload"].startswith("wire.rate")
    }
    if wire_rates:
        lines += [
            "",
            ", ".join(f"{n} ran at {v:,} records/s" for n, v in sorted(wire_rates.items()))
            + " from the wire generator (50% and 80% of the lower median "
            "wire.produce.1kib.p16.acks1).",
        ]
    if rate_rows or wire_rates:
        lines += [
            "Latency comes from a probe sending 1000 timestamped records/s (linger 1 ms) to a "
            "one-partition topic on the same broker, on its own connection, while the load runs.",
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
    lines += _security(by, systems)
    lines += _transactions(by, systems)
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


def _client_bound(rows: list[dict[str, Any]]) -> bool:
    util = _med(rows, "client_cpu_util")
    return util is not None and util >= CLIENT_BOUND_UTIL


def _wire(
    by: dict[str, dict[str, list[dict[str, Any]]]], systems: list[str], disk: dict[str, Any]
) -> list[str]:
    """The wire.* rows: each system's MB/s, CPU per GB and the generator's CPU, with the
    goals of issue 29 beside them when kbroker and Kafka both ran."""
    names = [n for n, per in by.items() if _kind(next(iter(per.values()))) in WIRE_KINDS]
    if not names:
        return []
    both = systems[:2] == ["kbroker", "kafka"]
    head = "| workload | " + " | ".join(
        f"MB/s {s} | CPU s/GB {s} | generator CPU {s}" for s in systems
    )
    if both:
        head += " | kbroker/kafka MB/s | kbroker/kafka CPU per GB | of limit kbroker"
    lines = [
        "## The brokers measured (wire generator)",
        "",
        "`python -m bench.wire`: pre-encoded Produce requests (about 64 KiB batches, 4 "
        "partitions a request) pipelined over 4 connections, 8 in flight each; catch-up Fetch "
        "into one reused buffer. `generator CPU` = the generator's CPU as a fraction of its one "
        "core (the broker is measured only where it stays well under 0.5). `of limit` = "
        "produce MB/s over the disk's buffered sequential write, catch-up MB/s (batch bytes) over "
        "sendfile to a loopback socket, both measured in this run.",
        "",
        head + " |",
        "|---|" + "---:|" * (3 * len(systems) + (3 if both else 0)),
    ]
    verdicts: list[tuple[str, str, bool | None]] = []
    for name in names:
        per = by[name]
        cells = []
        for s in systems:
            rs = per.get(s, [])
            cells += [
                _fmt(_med(rs, "mb_s")),
                _fmt(_med(rs, "broker_cpu_s_per_gb"), 2),
                _fmt(_med(rs, "generator_cpu_util"), 2),
            ]
        if both:
            k, f = per.get("kbroker", []), per.get("kafka", [])
            tput = _ratio(_med(k, "mb_s"), _med(f, "mb_s"))
            cpu = _ratio(_med(k, "broker_cpu_s_per_gb"), _med(f, "broker_cpu_s_per_gb"))
            limit = _med(k, "sendfile_fraction") or _med(k, "disk_fraction")
            cells += [_fmt(tput, 2), _fmt(cpu, 2), _fmt(limit, 2)]
            kind = _kind(next(iter(per.values())))
            if kind in ("wire.produce", "wire.consume", "wire.prodcons"):
                verdicts.append(
                    (
                        f"{name}: kbroker >= {WIRE_TARGET_RATIO}x Kafka, CPU per GB <= 1/3",
                        f"{_fmt(tput, 2)}x, {_fmt(cpu, 2)}",
                        None
                        if tput is None or cpu is None
                        else tput >= WIRE_TARGET_RATIO and cpu <= WIRE_CPU_RATIO,
                    )
                )
            if kind == "wire.rate":
                pk, pf = _med(k, "publish_p99_ms"), _med(f, "publish_p99_ms")
                verdicts.append(
                    (
                        f"{name}: the probe's publish p99 <= 1/3 of Kafka's",
                        f"{_fmt(pk, 2)} vs {_fmt(pf, 2)} ms",
                        None if pk is None or pf is None else pk <= WIRE_P99_RATIO * pf,
                    )
                )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    if not both:
        return lines
    k_rows = [r for n in names for r in by[n].get("kbroker", [])]
    best_disk = max((r.get("disk_fraction") or 0 for r in k_rows), default=0)
    best_send = max((r.get("sendfile_fraction") or 0 for r in k_rows), default=0)
    verdicts += [
        (
            f"kbroker wire produce >= {WIRE_DISK_FRACTION:.0%} of the buffered disk write",
            f"best {best_disk:.2f} of {disk.get('buffered_write_mb_s')} MiB/s",
            best_disk >= WIRE_DISK_FRACTION if best_disk else None,
        ),
        (
            f"kbroker catch-up >= {WIRE_SENDFILE_FRACTION:.0%} of sendfile to loopback",
            f"{best_send:.2f} of {disk.get('sendfile_loopback_mb_s')} MiB/s",
            best_send >= WIRE_SENDFILE_FRACTION if best_send else None,
        ),
    ]
    met = sum(1 for *_, ok in verdicts if ok)
    lines += [
        f"Goals (reported, not asserted): {met} of {len(verdicts)} met.",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        *[
            f"| {w} | {m} | {'-' if ok is None else 'yes' if ok else 'no'} |"
            for w, m, ok in verdicts
        ],
        "",
    ]
    return lines


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
        if kind not in ("produce", "consume") or name == "catchup.fill" or name.startswith("sec."):
            continue
        r = _ratio(
            _med(per.get("kbroker", []), "records_s"), _med(per.get("kafka", []), "records_s")
        )
        row(
            f"{name}: kbroker >= {TARGET_RATIO}x Kafka",
            f"{_fmt(r, 2)}x",
            None if r is None else r >= TARGET_RATIO,
        )
    for protocol in ("SSL", "SASL_SSL"):
        per = by.get(f"sec.{protocol.lower()}.produce", {})
        r = _ratio(
            _med(per.get("kbroker", []), "records_s"), _med(per.get("kafka", []), "records_s")
        )
        if r is not None:
            row(
                f"sec.{protocol.lower()}.produce: kbroker >= {SECURE_TARGET_RATIO}x Kafka over "
                f"{protocol}",
                f"{_fmt(r, 2)}x",
                r >= SECURE_TARGET_RATIO,
            )
    for system in ("kbroker", "kafka"):
        verdict = _sasl_cost(by, system)
        if verdict is not None:
            row(
                f"{system}: SASL_SSL (PLAIN) costs an established connection nothing over SSL",
                verdict[0],
                verdict[1],
            )
    if all(name.startswith(("sec.", "txn.")) for name in by):
        # A security or transactions run: the other targets are for the other workloads.
        return [*out, ""]
    rate = by.get("omb.rate50", {})
    pk, pf = (
        _med(rate.get("kbroker", []), "publish_p99_ms"),
        _med(rate.get("kafka", []), "publish_p99_ms"),
    )
    if rate:
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


def _spread(rows: list[dict[str, Any]], key: str) -> float | None:
    """(max - min) / median of ``key`` over repetitions: the run's own noise."""
    vals = [r[key] for r in rows if r.get(key) is not None]
    if len(vals) < 2 or not statistics.median(vals):
        return None
    return (max(vals) - min(vals)) / statistics.median(vals)


def _sasl_cost(
    by: dict[str, dict[str, list[dict[str, Any]]]], system: str
) -> tuple[str, bool | None] | None:
    """SASL_SSL against SSL for one system, produce and consume: the medians' ratio of
    throughput and of broker CPU per GB, and whether each lies within the rows' own noise, the
    larger spread over repetitions of the SSL and the SASL_SSL rows (None when one repetition
    gives no spread)."""
    parts: list[str] = []
    within: list[bool | None] = []
    for kind in ("produce", "consume"):
        ssl = by.get(f"sec.ssl.{kind}", {}).get(system, [])
        sasl = by.get(f"sec.sasl_ssl.{kind}", {}).get(system, [])
        for key, label in (("mb_s", "MB/s"), ("broker_cpu_s_per_gb", "CPU s/GB")):
            r = _ratio(_med(sasl, key), _med(ssl, key))
            if r is None:
                continue
            spreads = [_spread(ssl, key), _spread(sasl, key)]
            noise = None if None in spreads else max(x for x in spreads if x is not None)
            parts.append(f"{kind} {label} x{r:.2f}" + ("" if noise is None else f" (±{noise:.2f})"))
            within.append(None if noise is None else abs(r - 1) <= noise)
    if not parts:
        return None
    ok = None if None in within else all(within)
    return "; ".join(parts), ok


def _security(by: dict[str, dict[str, list[dict[str, Any]]]], systems: list[str]) -> list[str]:
    """The cost of TLS and SASL: each system's sec.* rows against its own PLAINTEXT rows."""
    protocols = [p for p in SECURITY_ORDER if f"sec.{p.lower()}.produce" in by]
    if not protocols:
        return []
    out = [
        "## Cost of security (TLS, SASL)",
        "",
        "Each system's rows over each listener of one broker; `x plain` = the same figure over "
        "its PLAINTEXT listener (throughput: below 1 is the cost; CPU s/GB: above 1 is the "
        "cost). CPU s/GB = CPU seconds per GB of record values, the broker's and the load "
        "generator's (producers, or kcat).",
        "",
        "| system | listener | produce MB/s | x plain | consume MB/s | x plain | "
        "broker CPU s/GB produce | x plain | broker CPU s/GB consume | x plain | "
        "client CPU s/GB produce | client CPU s/GB consume | TLS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for system in systems:
        plain = {
            kind: by.get(f"sec.plaintext.{kind}", {}).get(system, [])
            for kind in ("produce", "consume")
        }
        for protocol in protocols:
            rows = {
                kind: by.get(f"sec.{protocol.lower()}.{kind}", {}).get(system, [])
                for kind in ("produce", "consume")
            }
            if not rows["produce"] and not rows["consume"]:
                continue
            cells: list[str] = []
            for key, digits in (("mb_s", 1), ("broker_cpu_s_per_gb", 2)):
                for kind in ("produce", "consume"):
                    v = _med(rows[kind], key)
                    cells += [_fmt(v, digits), _fmt(_ratio(v, _med(plain[kind], key)), 2)]
            # Columns: MB/s produce, consume; then CPU produce, consume (each with its ratio).
            cells = cells[0:2] + cells[2:4] + cells[4:6] + cells[6:8]
            client = [_fmt(_med(rows[k], "client_cpu_s_per_gb"), 2) for k in ("produce", "consume")]
            tls = next((r["tls"] for rs in rows.values() for r in rs if r.get("tls")), "-")
            out.append(f"| {system} | {protocol} | " + " | ".join(cells + client) + f" | {tls} |")
    if "kbroker" in systems and "kafka" in systems:
        out += [
            "",
            "| listener | kbroker/Kafka produce | kbroker/Kafka consume | "
            "Kafka/kbroker broker CPU s/GB produce | consume |",
            "|---|---:|---:|---:|---:|",
        ]
        for protocol in protocols:
            ratios = []
            for key, (x, y) in (
                ("records_s", ("kbroker", "kafka")),
                ("broker_cpu_s_per_gb", ("kafka", "kbroker")),
            ):
                for kind in ("produce", "consume"):
                    per = by.get(f"sec.{protocol.lower()}.{kind}", {})
                    ratios.append(
                        _fmt(_ratio(_med(per.get(x, []), key), _med(per.get(y, []), key)), 2)
                    )
            out.append(f"| {protocol} | " + " | ".join(ratios) + " |")
    return [*out, ""]


def _visible(rows: list[dict[str, Any]]) -> str:
    """``all`` when a read_committed consumer saw exactly the committed records in every
    repetition; otherwise what it saw against what was committed, per repetition."""
    if all(r.get("visible_records") == r["records"] for r in rows):
        return "all"
    return ", ".join(f"{r.get('visible_records')} of {r['records']}" for r in rows)


def _transactions(by: dict[str, dict[str, list[dict[str, Any]]]], systems: list[str]) -> list[str]:
    """Transactional produce: per setup (one node, RF 3) and transaction size, each system's
    throughput, broker CPU and commit latency, then kbroker against Kafka."""
    names = [n for n in by if n.startswith("txn.")]
    if not names:
        return []
    out = [
        "## Transactions",
        "",
        "Each row: transactional producers (confluent-kafka, one process and transactional id "
        "each, acks=all) commit transactions of the given number of 1 KiB records one after "
        "another, spread over 6 partitions. CPU s/GB and ms/txn: broker CPU seconds (three "
        "brokers summed on RF 3, until every follower holds every record and marker) per GB "
        "of record values and per transaction; commit = one `commit_transaction()` call; "
        "visible = a read_committed consumer read exactly the committed records afterwards.",
        "",
        "| setup | records/txn | system | records/s | txn/s | MB/s | broker CPU s/GB | "
        "broker CPU ms/txn | commit p50 ms | commit p99 ms | producers' CPU util | visible |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in names:
        setup = name.split(".")[1]
        for system in systems:
            rs = by[name].get(system, [])
            if not rs:
                continue
            out.append(
                f"| {setup} | {rs[0]['records_per_transaction']:,} | {system} | "
                f"{_fmt(_med(rs, 'records_s'))} | {_fmt(_med(rs, 'transactions_s'))} | "
                f"{_fmt(_med(rs, 'mb_s'))} | {_fmt(_med(rs, 'broker_cpu_s_per_gb'), 2)} | "
                f"{_fmt(_med(rs, 'broker_cpu_ms_per_transaction'), 2)} | "
                f"{_fmt(_med(rs, 'commit_p50_ms'), 2)} | {_fmt(_med(rs, 'commit_p99_ms'), 2)} | "
                f"{_fmt(_med(rs, 'client_cpu_util'), 2)} | {_visible(rs)} |"
            )
    if "kbroker" in systems and "kafka" in systems:
        out += [
            "",
            "| setup | records/txn | kbroker/Kafka records/s | Kafka/kbroker broker CPU s/GB | "
            "Kafka/kbroker commit p50 |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in names:
            k, f = by[name].get("kbroker", []), by[name].get("kafka", [])
            if not k or not f:
                continue
            ratios = [
                _ratio(_med(k, "records_s"), _med(f, "records_s")),
                _ratio(_med(f, "broker_cpu_s_per_gb"), _med(k, "broker_cpu_s_per_gb")),
                _ratio(_med(f, "commit_p50_ms"), _med(k, "commit_p50_ms")),
            ]
            out.append(
                f"| {name.split('.')[1]} | {k[0]['records_per_transaction']:,} | "
                + " | ".join(_fmt(x, 2) for x in ratios)
                + " |"
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
        for p in ("publish", "e2e", "commit")
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
