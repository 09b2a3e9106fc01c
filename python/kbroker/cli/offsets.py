"""`kbroker offsets` and `kbroker delete-records`: partitions' offsets and log start."""

from __future__ import annotations

import sys

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    echo_unreachable,
    json_option,
    partition_specs,
)


@click.command("offsets")
@admin_options
@click.argument("specs", nargs=-1, required=True, metavar="TOPIC[:PARTITION,...]...")
@click.option(
    "--time",
    "at",
    metavar="WHEN",
    help="Also the first offset at or after WHEN: epoch ms, an ISO date/time (UTC unless "
    "zoned), earliest, latest or max-timestamp.",
)
@json_option
def offsets_command(
    bootstrap: str, timeout: float, specs: tuple[str, ...], at: str | None, as_json: bool
) -> None:
    """Earliest and latest offset of each partition (and the offset for a time)."""
    from kbroker.tools import offsets as tool

    when = None
    if at is not None:
        try:
            when = tool.parse_time(at)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--time") from None
    unreachable: dict[int, str] = {}
    with connect(bootstrap, timeout) as cluster:
        rows = tool.offsets(cluster, partition_specs(specs), when, unreachable)
    if as_json:
        echo_json(rows)
    else:
        headers = ["TOPIC", "PARTITION", "EARLIEST", "LATEST"]
        extra = ["OFFSET", "TIMESTAMP"] if when is not None else []
        echo_table(
            [*headers, *extra, "ERROR"],
            [
                [r["topic"], r["partition"], r["earliest"], r["latest"]]
                + [r[k.lower()] for k in extra]
                + [r["error"]]
                for r in rows
            ],
        )
    echo_unreachable(unreachable, "the partitions it leads have no offsets")
    if any(r["error"] for r in rows):
        sys.exit(1)


@click.command("delete-records")
@admin_options
@click.argument("specs", nargs=-1, required=True, metavar="TOPIC[:PARTITION,...]...")
@click.option(
    "--before",
    required=True,
    metavar="OFFSET|end",
    help="Delete the records before this offset (end: every record).",
)
@json_option
def delete_records_command(
    bootstrap: str, timeout: float, specs: tuple[str, ...], before: str, as_json: bool
) -> None:
    """Delete the oldest records of partitions: move their log start offset forward."""
    from kbroker.tools import offsets as tool

    if before == "end":
        offset = -1
    elif before.isdigit():
        offset = int(before)
    else:
        raise click.BadParameter(
            f"expected an offset or 'end', got {before!r}", param_hint="--before"
        )
    unreachable: dict[int, str] = {}
    with connect(bootstrap, timeout) as cluster:
        rows = tool.delete_records(cluster, partition_specs(specs), offset, unreachable)
    if as_json:
        echo_json(rows)
    else:
        echo_table(
            ["TOPIC", "PARTITION", "LOG-START", "ERROR"],
            [[r["topic"], r["partition"], r["log_start_offset"], r["error"]] for r in rows],
        )
    echo_unreachable(unreachable, "no records were deleted from the partitions it leads")
    if any(r["error"] for r in rows):
        sys.exit(1)
