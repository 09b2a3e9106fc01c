"""`kbroker produce` and `kbroker consume`: lines in, records out (kcat-like)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    json_option,
    key_values,
)


@click.command("produce")
@admin_options
@click.argument("topic")
@click.argument("files", nargs=-1, type=click.File("rb"))
@click.option(
    "--partition", "-p", type=click.IntRange(min=0), help="Every record to this partition."
)
@click.option(
    "--key-separator",
    "-K",
    metavar="SEP",
    help="Each line is KEY<SEP>VALUE (else the line is the value, without a key).",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    metavar="FORMAT",
    help="Each line has this form (kcat-like): %k key, %s value, %h headers k=v,..., "
    "%p partition, %T timestamp ms, %% percent; \\t tab. E.g. '%p %k\\t%s'.",
)
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="Header on every record (repeatable).",
)
@click.option(
    "--compression",
    "-z",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option(
    "--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True
)
@click.option(
    "--max-line-bytes",
    type=click.IntRange(min=1),
    default=1 << 20,
    show_default=True,
    help="Refuse longer lines.",
)
def produce_command(
    bootstrap: str,
    timeout: float,
    topic: str,
    files: tuple[Any, ...],
    partition: int | None,
    key_separator: str | None,
    fmt: str | None,
    headers: tuple[str, ...],
    compression: str,
    acks: str,
    max_line_bytes: int,
) -> None:
    """Send each line of FILES (default: stdin; - is stdin) as a record to TOPIC.
    Keyed records go where Kafka's default partitioner puts them."""
    from kbroker.tools import produce as tool

    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    pattern = None
    if fmt is not None:
        if key_separator is not None:
            raise click.UsageError("--format and --key-separator exclude each other")
        try:
            pattern = tool.input_format(fmt)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--format") from None
    fixed = [(k, v.encode()) for k, v in key_values(headers, "--header").items()]
    streams = files or (sys.stdin.buffer,)
    with connect(bootstrap, timeout) as cluster:
        producer = tool.Producer(
            cluster, topic, partition, tool.CODECS[compression], tool.ACKS[acks]
        )
        if producer.created:
            click.echo(
                f"Created topic {topic}: it did not exist and the broker creates topics on "
                "first use (auto.create.topics.enable).",
                err=True,
            )
        try:
            tool.produce_lines(
                producer,
                streams,
                key_separator.encode() if key_separator else None,
                fixed,
                max_line_bytes,
                pattern,
            )
        except KeyboardInterrupt:
            click.echo(f"Interrupted: {producer.sent} records were sent to {topic}.", err=True)
            sys.exit(130)
    click.echo(f"Produced {producer.sent} records to {topic}.", err=True)


@click.command("consume")
@admin_options
@click.argument("topic")
@click.option(
    "--partition",
    "-p",
    "partitions",
    multiple=True,
    type=click.IntRange(min=0),
    help="Only this partition (repeatable) [all].",
)
@click.option(
    "--from",
    "-o",
    "start",
    default="end",
    show_default=True,
    metavar="WHERE",
    help="beginning, end, OFFSET, -N (N before the end), +N (N after the beginning) or "
    "@TIME (epoch ms or ISO date/time, UTC unless zoned).",
)
@click.option("--count", "-c", type=click.IntRange(min=1), help="Stop after this many records.")
@click.option("--until-end", "-e", is_flag=True, help="Stop at the end offsets of when it started.")
@click.option(
    "--format",
    "-f",
    "fmt",
    default="%s\\n",
    show_default=True,
    help="kcat-like: %t topic, %p partition, %o offset, %T timestamp, %k key, %s value, "
    "%K/%S their lengths, %h headers, \\n \\t.",
)
@click.option(
    "--group",
    "-g",
    help="Consume as a member of this consumer group: its partitions, from its committed "
    "offsets (--from where it has none), committing as it goes.",
)
@click.option("--read-committed", is_flag=True, help="Skip records of aborted transactions.")
@json_option
def consume_command(
    bootstrap: str,
    timeout: float,
    topic: str,
    partitions: tuple[int, ...],
    start: str,
    count: int | None,
    until_end: bool,
    fmt: str,
    group: str | None,
    read_committed: bool,
    as_json: bool,
) -> None:
    """Print the records of TOPIC as they arrive: of the given partitions (default all),
    or of those a consumer group assigns (--group). With --json, one JSON object a line."""
    from kbroker.tools import consume as tool

    try:
        spec = tool.StartSpec.parse(start)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--from") from None
    try:
        tool.check_format(fmt)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    if group is not None and partitions:
        raise click.UsageError("--group assigns the partitions: drop --partition")
    out = sys.stdout.buffer
    seen = 0
    with connect(bootstrap, timeout) as cluster:
        try:
            if group is not None:
                found = tool.group_records(
                    cluster, topic, group, spec, count, until_end, read_committed
                )
            else:
                found = tool.records(
                    cluster, topic, partitions or None, spec, count, until_end, read_committed
                )
            for record in found:
                if as_json:
                    out.write(json.dumps(record.to_json()).encode() + b"\n")
                else:
                    out.write(tool.render(fmt, record))
                out.flush()
                seen += 1
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:  # the reader went away (| head): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
    click.echo(f"Consumed {seen} records.", err=True)
