"""`kbroker topic`: create, list, describe, alter and delete topics."""

from __future__ import annotations

import re

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    fail_if,
    json_option,
    key_values,
)


def _assignment(text: str | None) -> list[list[int]] | None:
    from kbroker.tools.topics import parse_assignment

    if text is None:
        return None
    try:
        return parse_assignment(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--replica-assignment") from None


@click.group("topic")
def topic() -> None:
    """Create, list, describe, alter and delete topics."""


@topic.command("create")
@admin_options
@click.argument("names", nargs=-1, required=True)
@click.option(
    "--partitions", "-p", type=click.IntRange(min=1), help="Partitions [broker's num.partitions]."
)
@click.option(
    "--replication-factor",
    "-r",
    type=click.IntRange(min=1, max=32767),
    help="Replicas per partition [broker's default.replication.factor].",
)
@click.option(
    "--replica-assignment",
    metavar="B:B,B:B,...",
    help="Brokers of each partition, e.g. 1:2,2:3 (instead of -p/-r).",
)
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic setting (repeatable).",
)
@click.option("--if-not-exists", is_flag=True, help="A topic that exists already is no error.")
@click.option("--validate-only", is_flag=True, help="Only check the request; create nothing.")
@json_option
def topic_create(
    bootstrap: str,
    timeout: float,
    names: tuple[str, ...],
    partitions: int | None,
    replication_factor: int | None,
    replica_assignment: str | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    validate_only: bool,
    as_json: bool,
) -> None:
    """Create topics."""
    from kbroker.tools import topics as tool

    assignment = _assignment(replica_assignment)
    if assignment is not None and (partitions is not None or replication_factor is not None):
        raise click.UsageError("--replica-assignment replaces --partitions/--replication-factor")
    settings = key_values(configs, "--config")
    with connect(bootstrap, timeout) as cluster:
        results = tool.create_topics(
            cluster,
            names,
            partitions=partitions,
            replication_factor=replication_factor,
            assignment=assignment,
            configs=settings,
            if_not_exists=if_not_exists,
            validate_only=validate_only,
        )
    if as_json:
        echo_json([{"topic": name, **r} for name, r in results.items()])
    else:
        for name, r in results.items():
            if r["error"] is not None:
                continue
            if r["exists"]:
                click.echo(f"Topic {name} exists already.")
            else:
                verb = "would be created" if validate_only else "created"
                click.echo(
                    f"Topic {name} {verb}: {r['partitions']} partitions, "
                    f"replication factor {r['replication_factor']}."
                )
    fail_if([r["error"] for r in results.values() if r["error"] is not None])


@topic.command("list")
@admin_options
@click.argument("pattern", required=False)
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets...).")
@json_option
def topic_list(
    bootstrap: str, timeout: float, pattern: str | None, internal: bool, as_json: bool
) -> None:
    """List topics, or those whose whole name matches the regular expression PATTERN."""
    from kbroker.tools import topics as tool

    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise click.BadParameter(
                f"not a regular expression: {exc}", param_hint="PATTERN"
            ) from None
    with connect(bootstrap, timeout) as cluster:
        rows = tool.list_topics(cluster, pattern, internal)
    if as_json:
        echo_json(rows)
        return
    headers = ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"] + (["INTERNAL"] if internal else [])
    echo_table(
        headers,
        [
            [r["topic"], r["partitions"], r["replication_factor"]]
            + ([r["internal"]] if internal else [])
            for r in rows
        ],
    )


@topic.command("describe")
@admin_options
@click.argument("names", nargs=-1)
@click.option("--internal", is_flag=True, help="Without TOPICs: include internal topics.")
@click.option("--under-replicated", is_flag=True, help="Only partitions whose ISR lacks a replica.")
@click.option(
    "--under-min-isr",
    is_flag=True,
    help="Only partitions with fewer in sync than min.insync.replicas.",
)
@click.option(
    "--at-min-isr", is_flag=True, help="Only partitions with exactly min.insync.replicas in sync."
)
@click.option("--unavailable", is_flag=True, help="Only partitions without a live leader.")
@json_option
def topic_describe(
    bootstrap: str,
    timeout: float,
    names: tuple[str, ...],
    internal: bool,
    under_replicated: bool,
    under_min_isr: bool,
    at_min_isr: bool,
    unavailable: bool,
    as_json: bool,
) -> None:
    """Show topics (all without NAMES) per partition: leader, replicas, ISR, offline
    replicas, log start and end offsets, size. Filters keep the partitions matching any."""
    from kbroker.tools import topics as tool

    flags = {
        "under_replicated": under_replicated,
        "under_min_isr": under_min_isr,
        "at_min_isr": at_min_isr,
        "unavailable": unavailable,
    }
    with connect(bootstrap, timeout) as cluster:
        found = tool.describe_topics(cluster, names, internal, [f for f, on in flags.items() if on])
    if as_json:
        echo_json(found)
        return
    unreachable = set(found["unreachable_brokers"])

    def leader(node: int | None) -> object:
        return f"{node} (unreachable)" if node in unreachable else node

    for i, t in enumerate(found["topics"]):
        if i:
            click.echo()
        click.echo(
            f"Topic {t['topic']}  id {t['topic_id'] or '-'}  partitions {t['partition_count']}  "
            f"replication factor {t['replication_factor']}  "
            f"min.insync.replicas {t['min_insync_replicas'] or '-'}"
            + ("  (internal)" if t["internal"] else "")
        )
        echo_table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "LOG-START", "LOG-END", "SIZE"],
            [
                [
                    p["partition"],
                    leader(p["leader"]),
                    p["replicas"],
                    p["isr"],
                    p["offline_replicas"],
                    p["log_start_offset"],
                    p["log_end_offset"],
                    p["size_bytes"],
                ]
                for p in t["partitions"]
            ],
        )
    for note in found["notes"]:
        click.echo(f"Note: {note}", err=True)


@topic.command("alter")
@admin_options
@click.argument("name")
@click.option(
    "--partitions", "-p", type=click.IntRange(min=1), help="Grow to this many partitions."
)
@click.option(
    "--replica-assignment", metavar="B:B,...", help="Brokers of each new partition (with -p)."
)
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a topic setting (repeatable).",
)
@click.option(
    "--delete-config",
    "deletes",
    multiple=True,
    metavar="KEY",
    help="Back to the default (repeatable).",
)
@click.option("--validate-only", is_flag=True, help="Only check the request; change nothing.")
def topic_alter(
    bootstrap: str,
    timeout: float,
    name: str,
    partitions: int | None,
    replica_assignment: str | None,
    configs: tuple[str, ...],
    deletes: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Add partitions to a topic and change its settings."""
    from kbroker.tools import configs as config_tool
    from kbroker.tools import topics as tool

    assignment = _assignment(replica_assignment)
    if assignment is not None and partitions is None:
        raise click.UsageError("--replica-assignment needs --partitions")
    settings = key_values(configs, "--config")
    if partitions is None and not settings and not deletes:
        raise click.UsageError("nothing to change: give --partitions, --config or --delete-config")
    verb = "would have" if validate_only else "now has"
    with connect(bootstrap, timeout) as cluster:
        if settings or deletes:
            config_tool.alter(
                cluster,
                config_tool.Resource(config_tool.TOPIC, name),
                settings,
                deletes,
                validate_only,
            )
            click.echo(f"Topic {name}: settings {'would be ' if validate_only else ''}changed.")
        if partitions is not None:
            error = tool.add_partitions(cluster, name, partitions, assignment, validate_only)
            if error is not None:
                raise click.ClickException(error)
            click.echo(f"Topic {name} {verb} {partitions} partitions.")


@topic.command("delete")
@admin_options
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="A topic that does not exist is no error.")
def topic_delete(bootstrap: str, timeout: float, names: tuple[str, ...], if_exists: bool) -> None:
    """Delete topics and all their records."""
    from kbroker.tools import topics as tool

    with connect(bootstrap, timeout) as cluster:
        results = tool.delete_topics(cluster, names, if_exists)
    for name, error in results.items():
        if error is None:
            click.echo(f"Topic {name} deleted.")
    fail_if([e for e in results.values() if e is not None])
