"""`kbroker config`: describe and change the settings of topics and brokers."""

from __future__ import annotations

from typing import Any

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    json_option,
    key_values,
    validate_change_option,
)

_resource_options = [
    click.option("--topic", "-t", "topic_name", help="A topic's settings."),
    click.option("--broker", type=click.IntRange(min=0), help="Broker ID's settings."),
    click.option(
        "--broker-default", is_flag=True, help="The cluster-wide default of the broker settings."
    ),
]


def _resource_of(topic_name: str | None, broker: int | None, broker_default: bool) -> Any:
    from kbroker.tools.configs import Resource

    try:
        return Resource.of(topic_name, broker, broker_default)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _with_resource(f: Any) -> Any:
    for option in reversed(_resource_options):
        f = option(f)
    return f


@click.group("config")
def config() -> None:
    """Describe and change the settings of topics and brokers."""


@config.command("describe")
@admin_options
@_with_resource
@click.argument("names", nargs=-1)
@click.option(
    "--all", "include_defaults", is_flag=True, help="Include settings left at their default."
)
@json_option
def config_describe(
    bootstrap: str,
    timeout: float,
    topic_name: str | None,
    broker: int | None,
    broker_default: bool,
    names: tuple[str, ...],
    include_defaults: bool,
    as_json: bool,
) -> None:
    """Show settings (only NAMES if given) with their value and where it comes from."""
    from kbroker.tools import configs as tool

    resource = _resource_of(topic_name, broker, broker_default)
    with connect(bootstrap, timeout) as cluster:
        rows = tool.describe(cluster, resource, names, include_defaults)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["NAME", "VALUE", "SOURCE", "READ-ONLY"],
        [
            [
                r["name"],
                "(sensitive)" if r["sensitive"] else r["value"],
                r["source"],
                r["read_only"],
            ]
            for r in rows
        ],
    )


@config.command("set")
@admin_options
@_with_resource
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
@validate_change_option
def config_set(
    bootstrap: str,
    timeout: float,
    topic_name: str | None,
    broker: int | None,
    broker_default: bool,
    pairs: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Set settings (dynamically: they apply at once and persist)."""
    from kbroker.tools import configs as tool

    resource = _resource_of(topic_name, broker, broker_default)
    settings = key_values(pairs, "KEY=VALUE")
    with connect(bootstrap, timeout) as cluster:
        tool.alter(cluster, resource, settings, (), validate_only)
    verb = "would be set" if validate_only else "set"
    click.echo(f"{', '.join(settings)} {verb} for {resource.label}.")


@config.command("delete")
@admin_options
@_with_resource
@click.argument("names", nargs=-1, required=True, metavar="KEY...")
@validate_change_option
def config_delete(
    bootstrap: str,
    timeout: float,
    topic_name: str | None,
    broker: int | None,
    broker_default: bool,
    names: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Remove dynamic settings, so that the next level (or the default) applies again."""
    from kbroker.tools import configs as tool

    resource = _resource_of(topic_name, broker, broker_default)
    with connect(bootstrap, timeout) as cluster:
        tool.alter(cluster, resource, None, names, validate_only)
    verb = "would be deleted" if validate_only else "deleted"
    click.echo(f"{', '.join(names)} {verb} for {resource.label}.")
