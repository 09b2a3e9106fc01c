"""`kbroker user`: SCRAM users' credentials."""

from __future__ import annotations

import sys

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    json_option,
)


@click.group("user")
def user_group() -> None:
    """SCRAM users: create, list and delete their credentials."""


def _read_password(password_file: str | None) -> str:
    """The password from a file ("-": standard input, first line) or a prompt; never an
    argument, so it stays out of shell histories and process lists."""
    if password_file is None:
        return str(click.prompt("Password", hide_input=True, confirmation_prompt=True))
    try:
        if password_file == "-":
            text = sys.stdin.readline()
        else:
            with open(password_file, encoding="utf-8") as f:
                text = f.readline()
    except OSError as exc:
        raise click.ClickException(f"cannot read the password: {exc}") from None
    password = text.rstrip("\r\n")
    if not password:
        raise click.ClickException("the password file holds no password")
    return password


_MECHANISM_CHOICE = click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"], case_sensitive=False)


@user_group.command("create")
@admin_options
@click.argument("name")
@click.option("--mechanism", type=_MECHANISM_CHOICE, default="SCRAM-SHA-256", show_default=True)
@click.option(
    "--iterations",
    type=click.IntRange(4096, 16384),
    default=8192,
    show_default=True,
    help="PBKDF2 iterations of the salted password.",
)
@click.option(
    "--password-file",
    metavar="FILE",
    help="Read the password from the first line of FILE ('-': standard input); "
    "without it the password is asked for.",
)
def user_create(
    bootstrap: str,
    timeout: float,
    name: str,
    mechanism: str,
    iterations: int,
    password_file: str | None,
) -> None:
    """Create a user's SCRAM credential (or replace it)."""
    from kbroker.tools import users as tool

    password = _read_password(password_file)
    with connect(bootstrap, timeout) as cluster:
        tool.create(cluster, name, password, mechanism.upper(), iterations)
    click.echo(f"{mechanism.upper()} credential of user {name!r} set ({iterations} iterations).")


@user_group.command("list")
@admin_options
@click.argument("names", nargs=-1)
@json_option
def user_list(bootstrap: str, timeout: float, names: tuple[str, ...], as_json: bool) -> None:
    """List users' SCRAM credentials (mechanism and iterations; never a secret)."""
    from kbroker.tools import users as tool

    with connect(bootstrap, timeout) as cluster:
        rows = tool.describe(cluster, names)
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["USER", "MECHANISM", "ITERATIONS"],
        [[r["user"], r["mechanism"], r["iterations"]] for r in rows],
    )


@user_group.command("delete")
@admin_options
@click.argument("name")
@click.option(
    "--mechanism",
    "mechanisms",
    type=_MECHANISM_CHOICE,
    multiple=True,
    help="Only this mechanism's credential (repeatable); default: all of the user's.",
)
def user_delete(bootstrap: str, timeout: float, name: str, mechanisms: tuple[str, ...]) -> None:
    """Delete a user's SCRAM credentials."""
    from kbroker.tools import users as tool

    with connect(bootstrap, timeout) as cluster:
        deleted = tool.delete(cluster, name, mechanisms)
    click.echo(f"deleted the {', '.join(deleted)} credential(s) of user {name!r}.")
