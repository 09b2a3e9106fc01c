"""`kbroker partition`: preferred leader elections and replica reassignment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    json_option,
    partition_specs,
)


@click.group("partition")
def partition_group() -> None:
    """Elect partition leaders and move replicas between brokers."""


def _results_table(rows: list[dict[str, Any]], ok: str) -> None:
    """TOPIC PARTITION RESULT per partition, and the brokers' messages if there are any."""
    messages = any(r.get("message") for r in rows)
    echo_table(
        ["TOPIC", "PARTITION", "RESULT"] + (["MESSAGE"] if messages else []),
        [
            [r["topic"], r["partition"], ok if r["error"] is None else r["error"]]
            + ([r.get("message")] if messages else [])
            for r in rows
        ],
    )


def _exit_on_failures(rows: list[dict[str, Any]], fine: tuple[str, ...] = ()) -> None:
    """Exit 1 if a partition failed (errors in ``fine`` are outcomes, not failures)."""
    if any(r["error"] is not None and r["error"] not in fine for r in rows):
        sys.exit(1)


@partition_group.command("elect-leaders")
@admin_options
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="Elect in this topic (or these partitions of it); repeatable.",
)
@click.option("--all-topic-partitions", is_flag=True, help="Elect in every partition.")
@click.option(
    "--election-type",
    type=click.Choice(sorted(["preferred", "unclean"])),
    default="preferred",
    show_default=True,
    help="preferred: the first replica, if in sync; unclean: any live replica.",
)
@json_option
def partition_elect_leaders(
    bootstrap: str,
    timeout: float,
    topics: tuple[str, ...],
    all_topic_partitions: bool,
    election_type: str,
    as_json: bool,
) -> None:
    """Elect leaders (ElectLeaders). ELECTION_NOT_NEEDED means the leader is already the
    one this election would choose."""
    from kbroker.tools import partitions as tool

    if bool(topics) == all_topic_partitions:
        raise click.UsageError("give --topic or --all-topic-partitions (exactly one)")
    specs = None if all_topic_partitions else partition_specs(topics)
    with connect(bootstrap, timeout) as cluster:
        rows = tool.elect_leaders(cluster, specs, election_type)
    if as_json:
        echo_json(rows)
    else:
        _results_table(rows, "elected")
    _exit_on_failures(rows, ("ELECTION_NOT_NEEDED",))


@partition_group.group("reassign")
def reassign_group() -> None:
    """Move partition replicas (plans in kafka-reassign-partitions.sh's JSON)."""


_plan_argument = click.argument(
    "plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False, path_type=Path)
)


@reassign_group.command("generate")
@admin_options
@click.option("--topics", required=True, help="Comma-separated topics to move.")
@click.option("--brokers", required=True, help="Comma-separated broker ids to spread them over.")
def reassign_generate(bootstrap: str, timeout: float, topics: str, brokers: str) -> None:
    """Print the current assignment of TOPICS and a proposed one over BROKERS (JSON: keep
    the current one to roll back; edit or pass the proposed one to execute)."""
    from kbroker.tools import partitions as tool

    try:
        broker_ids = [int(b) for b in brokers.split(",") if b.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected ID,ID,..., got {brokers!r}", param_hint="--brokers"
        ) from None
    names = [t.strip() for t in topics.split(",") if t.strip()]
    with connect(bootstrap, timeout) as cluster:
        echo_json(tool.generate(cluster, names, broker_ids))


@reassign_group.command("execute")
@admin_options
@_plan_argument
@click.option(
    "--wait",
    is_flag=True,
    help="Show progress until every partition has moved (Ctrl-C stops waiting, not the move).",
)
@json_option
def reassign_execute(
    bootstrap: str, timeout: float, plan_file: Path, wait: bool, as_json: bool
) -> None:
    """Start moving partitions to the replicas PLAN.json names."""
    import time

    from kbroker.tools import partitions as tool
    from kbroker.tools.client import ClientError

    with connect(bootstrap, timeout) as cluster:
        try:
            plan = tool.read_plan(plan_file)
        except ClientError as exc:
            raise click.ClickException(str(exc)) from None
        rows = tool.execute(cluster, plan)
        started = [(r["topic"], r["partition"]) for r in rows if r["error"] is None]
        if wait and started:
            with click.progressbar(
                length=len(started), label="Partitions moved", file=sys.stderr
            ) as bar:
                done = 0
                while True:
                    moved = len(started) - len(tool.ongoing(cluster, started))
                    bar.update(moved - done)
                    done = moved
                    if done == len(started):
                        break
                    time.sleep(0.5)
    if as_json:
        echo_json(rows)
    else:
        _results_table(rows, "started")
    _exit_on_failures(rows)


@reassign_group.command("verify")
@admin_options
@_plan_argument
@json_option
def reassign_verify(bootstrap: str, timeout: float, plan_file: Path, as_json: bool) -> None:
    """Whether each partition of PLAN.json has reached its replicas; exit 1 until all have."""
    from kbroker.tools import partitions as tool
    from kbroker.tools.client import ClientError

    with connect(bootstrap, timeout) as cluster:
        try:
            plan = tool.read_plan(plan_file)
        except ClientError as exc:
            raise click.ClickException(str(exc)) from None
        rows = tool.verify(cluster, plan)
    if as_json:
        echo_json(rows)
    else:
        echo_table(
            ["TOPIC", "PARTITION", "TARGET", "REPLICAS", "ADDING", "REMOVING", "STATUS"],
            [
                [r["topic"], r["partition"], r["target"], r["replicas"], r["adding"],
                 r["removing"], r["status"]]
                for r in rows
            ],
        )  # fmt: skip
    if any(r["status"] != "complete" for r in rows):
        sys.exit(1)


@reassign_group.command("cancel")
@admin_options
@_plan_argument
@json_option
def reassign_cancel(bootstrap: str, timeout: float, plan_file: Path, as_json: bool) -> None:
    """Stop the reassignments of the partitions PLAN.json names (their replicas go back)."""
    from kbroker.tools import partitions as tool
    from kbroker.tools.client import ClientError

    with connect(bootstrap, timeout) as cluster:
        try:
            plan = tool.read_plan(plan_file)
        except ClientError as exc:
            raise click.ClickException(str(exc)) from None
        rows = tool.cancel(cluster, list(plan))
    if as_json:
        echo_json(rows)
    else:
        _results_table(rows, "cancelled")
    _exit_on_failures(rows, ("NO_REASSIGNMENT_IN_PROGRESS",))
