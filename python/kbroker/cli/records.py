"""`kbroker produce` and `kbroker consume`: lines in, records out (kcat-like).

Both also take the flags of Kafka's console tools that mean the same as one of theirs
(`--topic`, `--from-beginning`, `--max-messages`, `--offset`, `--isolation-level`;
`--request-required-acks`, `--compression-codec`, `--property parse.key/key.separator`),
hidden from --help, so a kafka-console-consumer.sh or kafka-console-producer.sh command
line works with `kbroker consume` / `kbroker produce` in its place. `--bootstrap-server`,
`--partition` and `--group` already have Kafka's names.
"""

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


def _topic_argument(f: Any) -> Any:
    """TOPIC, shown as required; it may instead come as Kafka's --topic (`_the_topic`)."""
    return click.argument("topic", required=False, metavar="TOPIC")(f)


_console_topic_option = click.option(
    "--topic", "console_topic", hidden=True, help="kafka-console-*.sh's name of TOPIC."
)


def _the_topic(topic: str | None, console_topic: str | None) -> str:
    """TOPIC from the argument or from --topic (not both, unless they agree)."""
    if console_topic is not None:
        if topic is not None and topic != console_topic:
            raise click.UsageError(f"two topics given: {topic!r} and --topic {console_topic!r}")
        return console_topic
    if topic is None:
        ctx = click.get_current_context()
        [param] = [p for p in ctx.command.params if p.name == "topic"]
        raise click.MissingParameter(ctx=ctx, param=param)
    return topic


def _same_as(ctx: click.Context, ours: str, option: str, theirs: str) -> None:
    """Refuse a Kafka flag given together with our option it stands for."""
    if ctx.get_parameter_source(ours) != click.core.ParameterSource.DEFAULT:
        raise click.UsageError(f"{option} and {theirs} say the same: give one of them")


# kafka-console-producer.sh's --property keys that have a kbroker produce equivalent.
_PRODUCER_PROPERTIES = ("parse.key", "key.separator")


def _producer_properties(pairs: tuple[str, ...], key_separator: str | None) -> str | None:
    """The key separator kafka-console-producer.sh's --property parse.key=true (and
    key.separator, a tab by default) asks for, else ``key_separator`` (-K)."""
    props = {}
    for text in pairs:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="--property")
        props[name.strip()] = value  # as given: a separator may be a space or a tab
    unknown = sorted(set(props) - set(_PRODUCER_PROPERTIES))
    if unknown:
        raise click.BadParameter(
            f"{unknown[0]} is not taken (only parse.key and key.separator are; see --format "
            "for headers, partitions and timestamps)",
            param_hint="--property",
        )
    if props.get("parse.key", "false").lower() != "true":
        return key_separator
    if key_separator is not None:
        raise click.UsageError("--property parse.key=true and --key-separator say the same")
    separator = props.get("key.separator", "\t")
    if not separator:
        raise click.BadParameter("key.separator must not be empty", param_hint="--property")
    return separator


@click.command("produce")
@admin_options
@_topic_argument
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
@_console_topic_option
@click.option(
    "--request-required-acks",
    "console_acks",
    type=click.Choice(["0", "1", "all", "-1"]),
    hidden=True,
    help="kafka-console-producer.sh's name of --acks.",
)
@click.option(
    "--compression-codec",
    "console_codec",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    is_flag=False,
    flag_value="gzip",
    hidden=True,
    help="kafka-console-producer.sh's name of --compression (alone: gzip, as there).",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    hidden=True,
    help="kafka-console-producer.sh's parse.key=true and key.separator (a tab by default).",
)
def produce_command(
    bootstrap: str,
    timeout: float,
    topic: str | None,
    files: tuple[Any, ...],
    partition: int | None,
    key_separator: str | None,
    fmt: str | None,
    headers: tuple[str, ...],
    compression: str,
    acks: str,
    max_line_bytes: int,
    console_topic: str | None,
    console_acks: str | None,
    console_codec: str | None,
    properties: tuple[str, ...],
) -> None:
    """Send each line of FILES (default: stdin; - is stdin) as a record to TOPIC.
    Keyed records go where Kafka's default partitioner puts them."""
    from kbroker.tools import produce as tool

    ctx = click.get_current_context()
    if console_topic is not None and topic is not None:
        # With --topic every argument is a file.
        [param] = [p for p in ctx.command.params if p.name == "files"]
        files = (click.File("rb").convert(topic, param, ctx), *files)
        topic = None
    topic = _the_topic(topic, console_topic)
    if console_acks is not None:
        _same_as(ctx, "acks", "--acks", "--request-required-acks")
        acks = console_acks
    if console_codec is not None:
        _same_as(ctx, "compression", "--compression", "--compression-codec")
        compression = console_codec
    key_separator = _producer_properties(properties, key_separator)
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
@_topic_argument
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
@_console_topic_option
@click.option(
    "--from-beginning",
    is_flag=True,
    hidden=True,
    help="kafka-console-consumer.sh's --from beginning.",
)
@click.option(
    "--offset",
    "console_offset",
    hidden=True,
    help="kafka-console-consumer.sh's --from (earliest, latest or an offset).",
)
@click.option(
    "--max-messages",
    type=click.IntRange(min=1),
    hidden=True,
    help="kafka-console-consumer.sh's name of --count.",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    hidden=True,
    help="kafka-console-consumer.sh's --read-committed.",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    hidden=True,
    help="kafka-console-consumer.sh's formatter settings: refused, pointing at --format.",
)
def consume_command(
    bootstrap: str,
    timeout: float,
    topic: str | None,
    partitions: tuple[int, ...],
    start: str,
    count: int | None,
    until_end: bool,
    fmt: str,
    group: str | None,
    read_committed: bool,
    as_json: bool,
    console_topic: str | None,
    from_beginning: bool,
    console_offset: str | None,
    max_messages: int | None,
    isolation_level: str | None,
    properties: tuple[str, ...],
) -> None:
    """Print the records of TOPIC as they arrive: of the given partitions (default all),
    or of those a consumer group assigns (--group). With --json, one JSON object a line."""
    from kbroker.tools import consume as tool

    ctx = click.get_current_context()
    topic = _the_topic(topic, console_topic)
    if from_beginning and console_offset is not None:
        raise click.UsageError("--from-beginning and --offset say the same: give one of them")
    for given, theirs in ((from_beginning, "--from-beginning"), (console_offset, "--offset")):
        if given:
            _same_as(ctx, "start", "--from", theirs)
    if from_beginning:
        start = "beginning"
    elif console_offset is not None:
        start = console_offset
    if max_messages is not None:
        _same_as(ctx, "count", "--count", "--max-messages")
        count = max_messages
    if isolation_level is not None:
        if read_committed:
            raise click.UsageError("--isolation-level and --read-committed say the same")
        read_committed = isolation_level == "read_committed"
    if properties:
        raise click.BadParameter(
            "Kafka's formatter settings are not taken: print what you want with --format, "
            "e.g. -f '%k\\t%s\\n' for print.key=true, '%p %o %T %k %s\\n' for more fields",
            param_hint="--property",
        )
    try:
        spec = tool.StartSpec.parse(start)
    except ValueError as exc:
        hint = "--offset" if console_offset is not None else "--from"
        raise click.BadParameter(str(exc), param_hint=hint) from None
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
