"""`kbroker group` (also `groups`): consumer groups and their committed offsets,
and the import of offsets kept in ZooKeeper."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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

_bootstrap_option = click.option(
    "--bootstrap-server",
    "-b",
    "bootstrap",
    default="127.0.0.1:9092",
    show_default=True,
    envvar="KBROKER_BOOTSTRAP",
    help="HOST:PORT of a broker [env KBROKER_BOOTSTRAP].",
)


def _tool_errors() -> tuple[type[Exception], ...]:
    from kbroker.tools.client import ClientError
    from kbroker.tools.zk_import import ZkImportError

    return ClientError, ZkImportError


@click.group("group")
def group() -> None:
    """List, describe and delete consumer groups, reset and delete their committed offsets,
    import offsets from ZooKeeper ("groups" is the same command)."""


@group.command("list")
@admin_options
@click.option("--state", "states", multiple=True, help="Only groups in this state (repeatable).")
@json_option
def group_list(bootstrap: str, timeout: float, states: tuple[str, ...], as_json: bool) -> None:
    """List the groups the broker coordinates."""
    from kbroker.tools import groups as tool

    unreachable: dict[int, str] = {}
    with connect(bootstrap, timeout) as cluster:
        rows = tool.list_groups(cluster, states, unreachable)
    if as_json:
        echo_json(rows)
    else:
        echo_table(
            ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
            [[r["group"], r["type"], r["state"], r["protocol_type"]] for r in rows],
        )
    echo_unreachable(unreachable, "the groups it coordinates are not listed")


@group.command("describe")
@admin_options
@click.argument("group_ids", nargs=-1, required=True)
@json_option
def group_describe(
    bootstrap: str, timeout: float, group_ids: tuple[str, ...], as_json: bool
) -> None:
    """Show state, members, assignments, committed offsets, end offsets and lag of groups."""
    from kbroker.tools import groups as tool

    with connect(bootstrap, timeout) as cluster:
        described = [tool.describe_group(cluster, g) for g in group_ids]
    if as_json:
        echo_json(described)
        return
    for i, d in enumerate(described):
        if i:
            click.echo()
        click.echo(
            f"Group {d['group']}: {d['state']} {d['type']} group "
            f"({d['protocol_type'] or '-'}/{d['protocol'] or '-'}), "
            f"{len(d['members'])} members"
        )
        if d["members"]:
            echo_table(
                ["MEMBER", "INSTANCE", "CLIENT", "HOST", "ASSIGNMENT"],
                [
                    [
                        m["member_id"],
                        m["group_instance_id"],
                        m["client_id"],
                        m["host"],
                        " ".join(
                            f"{t}:{','.join(map(str, ps))}" for t, ps in m["assignment"].items()
                        )
                        or None,
                    ]
                    for m in d["members"]
                ],
            )
        echo_table(
            ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER"],
            [
                [o["topic"], o["partition"], o["current_offset"], o["log_end_offset"], o["lag"],
                 o["member_id"]]
                for o in d["offsets"]
            ],
        )  # fmt: skip
    for d in described:
        for note in d["notes"]:
            click.echo(f"Note: {note}", err=True)


@group.command("delete")
@admin_options
@click.argument("group_ids", nargs=-1, required=True)
def group_delete(bootstrap: str, timeout: float, group_ids: tuple[str, ...]) -> None:
    """Delete empty groups and their committed offsets."""
    from kbroker.tools import groups as tool

    with connect(bootstrap, timeout) as cluster:
        results = tool.delete_groups(cluster, list(group_ids))
    failed = False
    for group_id, error in results.items():
        click.echo(f"{group_id}: {'deleted' if error is None else error}")
        failed |= error is not None
    if failed:
        sys.exit(1)


@group.command("reset-offsets")
@admin_options
@click.argument("group_id")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="Reset this topic (or these partitions of it); repeatable.",
)
@click.option(
    "--all-topics", is_flag=True, help="Reset every topic the group committed offsets of."
)
@click.option("--to-earliest", is_flag=True, help="To the log start offset.")
@click.option("--to-latest", is_flag=True, help="To the log end offset.")
@click.option("--to-current", is_flag=True, help="To the committed offset (the end if none).")
@click.option("--to-offset", type=click.IntRange(min=0), help="To this offset.")
@click.option("--shift-by", type=int, help="Move the committed offset by N (negative: back).")
@click.option(
    "--to-datetime",
    metavar="DATETIME",
    help="To the first record at or after this ISO date/time (UTC unless it names a zone).",
)
@click.option(
    "--by-duration",
    metavar="DURATION",
    help="To the first record at or after now minus this ISO 8601 duration (PT30M, P1DT2H).",
)
@click.option(
    "--from-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The offsets of a CSV file of TOPIC,PARTITION,OFFSET lines.",
)
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets (the group must be empty).")
@json_option
def group_reset_offsets(
    bootstrap: str,
    timeout: float,
    group_id: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_current: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: str | None,
    by_duration: str | None,
    from_file: Path | None,
    dry_run: bool,
    execute: bool,
    as_json: bool,
) -> None:
    """Show, and with --execute commit, new committed offsets for GROUP_ID, chosen as
    kafka-consumer-groups.sh --reset-offsets does (clamped to the log's offsets). Offsets
    out of range are moved to the nearest end; a group with members is refused."""
    from kbroker.tools import group_offsets as tool
    from kbroker.tools.client import ClientError
    from kbroker.tools.offsets import parse_time

    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    scopes = sum([bool(topics), all_topics, from_file is not None])
    if scopes != 1:
        raise click.UsageError("give --topic, --all-topics, or --from-file (exactly one)")
    try:
        when = None
        if to_datetime is not None:
            when = parse_time(to_datetime)
            if when < 0:
                raise ValueError(f"expected a date/time, got {to_datetime!r}")
        spec = tool.ResetSpec(
            to_earliest=to_earliest,
            to_latest=to_latest,
            to_current=to_current,
            to_offset=to_offset,
            shift_by=shift_by,
            to_datetime=when,
            by_duration=None if by_duration is None else tool.parse_duration(by_duration),
            from_file=None if from_file is None else tool.read_offsets_file(from_file),
        )
        spec.check()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    with connect(bootstrap, timeout) as cluster:
        plan = tool.reset_offsets(cluster, group_id, partition_specs(topics), spec, execute)
    if as_json:
        echo_json(plan)
        return
    echo_table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [
            [group_id, r["topic"], r["partition"], r["current_offset"], r["new_offset"]]
            for r in plan["partitions"]
        ],
    )
    if not execute:
        click.echo("Dry run: nothing committed (--execute commits these offsets).", err=True)


@group.command("delete-offsets")
@admin_options
@click.argument("group_id")
@click.argument("topics", nargs=-1, required=True, metavar="TOPIC[:P,...]...")
@json_option
def group_delete_offsets(
    bootstrap: str, timeout: float, group_id: str, topics: tuple[str, ...], as_json: bool
) -> None:
    """Delete GROUP_ID's committed offsets of topics (or some of their partitions) it no
    longer consumes (OffsetDelete)."""
    from kbroker.tools import group_offsets as tool

    with connect(bootstrap, timeout) as cluster:
        rows = tool.delete_offsets(cluster, group_id, partition_specs(topics))
    if as_json:
        echo_json(rows)
    else:
        echo_table(
            ["TOPIC", "PARTITION", "RESULT"],
            [[r["topic"], r["partition"], r["error"] or "deleted"] for r in rows],
        )
    if any(r["error"] for r in rows):
        sys.exit(1)


@group.command("import-zk")
@_bootstrap_option
@click.option(
    "--zookeeper", required=True, metavar="HOST:PORT[/chroot]", help="ZooKeeper holding /consumers."
)
@click.option(
    "--group",
    "group_ids",
    multiple=True,
    help="Only this group (repeatable) [all under /consumers].",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace offsets the group already committed to the broker."
)
@click.option("--dry-run", is_flag=True, help="Show what would be imported; commit nothing.")
@click.option(
    "--zk-timeout", default=15.0, show_default=True, help="Seconds to wait for ZooKeeper."
)
@json_option
def groups_import_zk(
    bootstrap: str,
    zookeeper: str,
    group_ids: tuple[str, ...],
    overwrite: bool,
    dry_run: bool,
    zk_timeout: float,
    as_json: bool,
) -> None:
    """Copy offsets stored under /consumers/GROUP/offsets/TOPIC/PARTITION in ZooKeeper
    into the groups' committed offsets."""
    from kbroker.tools.client import BrokerClient
    from kbroker.tools.zk_import import import_offsets, read_zk_offsets

    try:
        found, unreadable = read_zk_offsets(zookeeper, group_ids, timeout=zk_timeout)
        with BrokerClient(bootstrap) as client:
            reports = import_offsets(
                client, found, unreadable, overwrite=overwrite, dry_run=dry_run
            )
    except _tool_errors() as exc:
        raise click.ClickException(str(exc)) from None

    def tps(d: dict[tuple[str, int], object]) -> list[dict[str, object]]:
        return [{"topic": t, "partition": p, "value": v} for (t, p), v in sorted(d.items())]

    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "group": r.group,
                        "imported": tps(dict(r.imported)),
                        "kept": tps(dict(r.kept)),
                        "failed": tps(dict(r.failed)),
                        "unreadable": r.unreadable,
                    }
                    for r in reports
                ],
                indent=1,
            )
        )
    else:
        verb = "would import" if dry_run else "imported"
        for r in reports:
            click.echo(
                f"{r.group}: {verb} {len(r.imported)}, kept {len(r.kept)} already committed, "
                f"failed {len(r.failed)}, unreadable {len(r.unreadable)}"
            )
            for (t, p), error in sorted(r.failed.items()):
                click.echo(f"  {t}-{p}: {error}")
            for path in r.unreadable:
                click.echo(f"  unreadable znode {path}")
    if any(r.failed or r.unreadable for r in reports):
        sys.exit(1)
