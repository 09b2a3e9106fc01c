"""`kbroker quota`: client quotas of users and client ids."""

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


@click.group("quota")
def quota_group() -> None:
    """Client quotas of users and client ids (Kafka's names and precedence)."""


_entity_options = [
    click.option("--user", help="The user (a principal's name) the quota is set on."),
    click.option("--user-default", is_flag=True, help="The default each user gets."),
    click.option("--client-id", help="The client id the quota is set on."),
    click.option("--client-default", is_flag=True, help="The default each client id gets."),
]


def _with_entity(f: Any) -> Any:
    for option in reversed(_entity_options):
        f = option(f)
    return f


def _entity(
    user: str | None, user_default: bool, client_id: str | None, client_default: bool
) -> Any:
    from kbroker.tools.quotas import entity_of

    try:
        return entity_of(user, user_default, client_id, client_default)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@quota_group.command("set")
@admin_options
@_with_entity
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
@validate_change_option
def quota_set(
    bootstrap: str,
    timeout: float,
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_default: bool,
    pairs: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Set quotas: producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage."""
    from kbroker.tools import quotas as tool

    parts = _entity(user, user_default, client_id, client_default)
    values = {}
    for key, text in key_values(pairs, "KEY=VALUE").items():
        try:
            values[key] = float(text)
        except ValueError:
            raise click.BadParameter(f"{key}={text!r} is not a number") from None
    with connect(bootstrap, timeout) as cluster:
        tool.alter(cluster, parts, values, (), validate_only)
    verb = "would be set" if validate_only else "set"
    click.echo(f"{', '.join(values)} {verb} for {tool.label(parts)}.")


@quota_group.command("delete")
@admin_options
@_with_entity
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
def quota_delete(
    bootstrap: str,
    timeout: float,
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_default: bool,
    keys: tuple[str, ...],
) -> None:
    """Remove quotas, so that the next level of Kafka's precedence applies."""
    from kbroker.tools import quotas as tool

    parts = _entity(user, user_default, client_id, client_default)
    with connect(bootstrap, timeout) as cluster:
        tool.alter(cluster, parts, None, keys)
    click.echo(f"{', '.join(keys)} removed for {tool.label(parts)}.")


@quota_group.command("describe")
@admin_options
@_with_entity
@json_option
def quota_describe(
    bootstrap: str,
    timeout: float,
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_default: bool,
    as_json: bool,
) -> None:
    """Show quotas: of every entity, or of the one named (with --user/--client-id and the
    defaults, exactly that entity)."""
    from kbroker.tools import quotas as tool

    named = user is not None or user_default or client_id is not None or client_default
    parts = _entity(user, user_default, client_id, client_default) if named else []
    with connect(bootstrap, timeout) as cluster:
        rows = tool.describe(cluster, parts, strict=named)
    if as_json:
        echo_json(rows)
        return

    def shown(row: dict[str, Any], key: str) -> str:
        if key not in row:
            return ""
        return "<default>" if row[key] is None else str(row[key])

    echo_table(
        ["USER", "CLIENT-ID", "QUOTAS"],
        [
            [
                shown(r, "user"),
                shown(r, "client_id"),
                ", ".join(f"{k}={v}" for k, v in r["quotas"].items()),
            ]
            for r in rows
        ],
    )
