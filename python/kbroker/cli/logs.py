"""Tools for partition logs: `dump-log` and `log verify` read segment files offline;
`log-dirs` asks the brokers (DescribeLogDirs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    fail_if,
    json_option,
)


@click.command("dump-log")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--print-data", is_flag=True, help="Also print each record's key, value and headers.")
@click.option(
    "--max-decompressed",
    default=64 << 20,
    show_default=True,
    help="Bound on a batch's decompressed size.",
)
def dump_log(files: tuple[Path, ...], print_data: bool, max_decompressed: int) -> None:
    """Print the batches (and records) of segment files, checking each CRC."""
    from kbroker.tools.dump import dump_segment

    bad = False
    for path in files:
        click.echo(f"Dumping {path}")
        for line, ok in dump_segment(path, print_data, max_decompressed):
            click.echo(line)
            bad |= not ok
    if bad:
        raise click.ClickException("the file holds invalid data after the last valid batch")


@click.group("log")
def log_group() -> None:
    """Offline tools for partition logs."""


@log_group.command("verify")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def log_verify(directory: Path) -> None:
    """CRC-check every batch of every segment under DIRECTORY (a data directory or one
    partition directory). Read only; safe beside a running broker. Exits 0 when every
    batch is good, 1 when any is bad or unreadable, 2 on usage errors."""
    from kbroker._kbroker import verify_log_dir
    from kbroker.log.log import TopicPartition

    if any(directory.glob("*.log")):
        partitions = [directory]
    else:
        partitions = sorted(
            entry
            for entry in directory.iterdir()
            if entry.is_dir() and TopicPartition.from_dirname(entry.name) is not None
        )
        if not partitions:
            click.echo(
                f"kbroker log verify: {directory} holds no segment files "
                "and no partition directories",
                err=True,
            )
            sys.exit(2)
    segments = batches = size = bad = 0
    failed: list[str] = []
    for part in partitions:
        try:
            report = verify_log_dir(str(part))
        except OSError as exc:
            click.echo(f"UNREADABLE {part.name}: {exc}")
            failed.append(part.name)
            continue
        segments += report.segments
        batches += report.batches
        size += report.bytes
        for b in report.bad:
            rest = (
                f" (the {b.unreadable_after} bytes from here on cannot be read)"
                if b.unreadable_after
                else ""
            )
            click.echo(
                f"BAD {part.name} {Path(b.segment_file).name} offset {b.offset} "
                f"position {b.position}: {b.reason}{rest}"
            )
        if report.bad:
            bad += len(report.bad)
            failed.append(part.name)
            if not report.clean_shutdown:
                click.echo(
                    f"note: {part.name} has no clean-shutdown marker "
                    "(a broker is running on it or crashed): "
                    "a bad tail of its last segment is cut off by recovery at the next start"
                )
    click.echo(
        f"checked {len(partitions)} partitions, {segments} segments, "
        f"{batches} good batches, {size} bytes: "
        f"{bad} bad batches, {len(failed)} partitions with problems"
    )
    if failed:
        sys.exit(1)


@click.command("log-dirs")
@admin_options
@click.option(
    "--topic", "topics", multiple=True, help="Only partitions of this topic (repeatable)."
)
@click.option("--broker", "brokers", multiple=True, type=int, help="Only this broker (repeatable).")
@json_option
def log_dirs_command(
    bootstrap: str, timeout: float, topics: tuple[str, ...], brokers: tuple[int, ...], as_json: bool
) -> None:
    """The log directories of each broker: total and usable bytes, and each partition's
    size, offset lag and whether it is a future replica (DescribeLogDirs)."""
    from kbroker.tools import log_dirs as tool

    with connect(bootstrap, timeout) as cluster:
        found = tool.describe_log_dirs(cluster, topics, brokers)
    if as_json:
        echo_json(found)
    else:
        for b in found["brokers"]:
            for d in b["log_dirs"]:
                click.echo(
                    f"Broker {b['broker']}  {d['path']}  total {d['total_bytes'] or '-'}  "
                    f"usable {d['usable_bytes'] or '-'}"
                    + (f"  error {d['error']}" if d["error"] else "")
                )
                echo_table(
                    ["TOPIC", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"],
                    [
                        [p["topic"], p["partition"], p["size_bytes"], p["offset_lag"], p["future"]]
                        for p in d["partitions"]
                    ],
                )
    fail_if(found["notes"])
