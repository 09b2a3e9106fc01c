"""`kbroker acl`: kafka-acls.sh's create (--add), list and delete (--remove)."""

from __future__ import annotations

from typing import Any

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    fail_if,
    json_option,
)


def _acl_resource_options(f: Any) -> Any:
    options = [
        click.option(
            "--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable)."
        ),
        click.option(
            "--group",
            "groups",
            multiple=True,
            metavar="NAME",
            help="A consumer group (repeatable).",
        ),
        click.option(
            "--transactional-id",
            "transactional_ids",
            multiple=True,
            metavar="ID",
            help="A transactional id (repeatable).",
        ),
        click.option("--cluster", is_flag=True, help="The cluster itself (kafka-cluster)."),
        click.option(
            "--resource-pattern-type",
            "pattern_type",
            type=click.Choice(["literal", "prefixed", "match", "any"], case_sensitive=False),
            default="literal",
            show_default=True,
            help="Resource names as given (literal), as prefixes (prefixed); to list or delete "
            "also any (either, the same name) or match (every pattern that applies to the name).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _acl_entry_options(f: Any) -> Any:
    options = [
        click.option(
            "--allow-principal",
            "allow_principals",
            multiple=True,
            metavar="TYPE:NAME",
            help="Principal allowed (repeatable), e.g. User:alice.",
        ),
        click.option(
            "--deny-principal",
            "deny_principals",
            multiple=True,
            metavar="TYPE:NAME",
            help="Principal denied (repeatable).",
        ),
        click.option(
            "--allow-host",
            "allow_hosts",
            multiple=True,
            metavar="IP",
            help="Host the allowed principals may connect from (repeatable) [*].",
        ),
        click.option(
            "--deny-host",
            "deny_hosts",
            multiple=True,
            metavar="IP",
            help="Host the denied principals are denied from (repeatable) [*].",
        ),
        click.option(
            "--operation",
            "operations",
            multiple=True,
            metavar="OP",
            help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
            "AlterConfigs, IdempotentWrite or All (repeatable) [All].",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _acl_resources(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster_flag: bool,
    pattern_type: str,
) -> Any:
    from kbroker.tools.acls import Resources

    return Resources.of(topics, groups, transactional_ids, cluster_flag, pattern_type)


def _acl_entries(
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    operations: tuple[str, ...],
) -> tuple[list[str], list[str], list[Any]]:
    from kbroker.tools import acls as tool

    try:
        allowed = [tool.principal(p) for p in allow_principals]
        denied = [tool.principal(p) for p in deny_principals]
        ops = [tool.operation(o) for o in operations]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return allowed, denied, ops


def _echo_acls(rows: list[dict[str, Any]]) -> None:
    echo_table(
        ["RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
        [
            [
                r["resource_type"],
                r["name"],
                r["pattern_type"],
                r["principal"],
                r["host"],
                r["operation"],
                r["permission"],
            ]
            for r in rows
        ],
    )


@click.group("acl")
def acl() -> None:
    """Create, list and delete ACLs (kafka-acls.sh's --add, --list and --remove)."""


@acl.command("create")
@admin_options
@_acl_resource_options
@_acl_entry_options
@json_option
def acl_create(
    bootstrap: str,
    timeout: float,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    pattern_type: str,
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add ACLs: each principal, from each host, for each operation on each resource."""
    from kbroker.tools import acls as tool

    allowed, denied, ops = _acl_entries(allow_principals, deny_principals, operations)
    try:
        resources = _acl_resources(topics, groups, transactional_ids, cluster, pattern_type)
        bindings = tool.grants(resources, ops, allowed, denied, allow_hosts, deny_hosts)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    with connect(bootstrap, timeout) as conn:
        rows = tool.create(conn, bindings)
    if as_json:
        echo_json(rows)
    else:
        done = [r for r in rows if "error" not in r]
        click.echo(f"{len(done)} ACL(s) created.")
        if done:
            _echo_acls(done)
    fail_if([_acl_refusal(r) for r in rows if "error" in r])


def _acl_refusal(row: dict[str, Any]) -> str:
    what = f"{row['permission']} {row['principal']} {row['operation']}"
    return f"{row['error']}: {what} on {row['resource_type']} {row['name']!r}"


@acl.command("list")
@admin_options
@_acl_resource_options
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="TYPE:NAME",
    help="Only this principal's ACLs (repeatable).",
)
@json_option
def acl_list(
    bootstrap: str,
    timeout: float,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    pattern_type: str,
    principals: tuple[str, ...],
    as_json: bool,
) -> None:
    """List ACLs: all of them, or those on the resources named."""
    from kbroker.tools import acls as tool

    try:
        wanted = [tool.principal(p) for p in principals]
        resources = _acl_resources(topics, groups, transactional_ids, cluster, pattern_type)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    with connect(bootstrap, timeout) as conn:
        rows = tool.describe(conn, resources if resources.patterns else None, wanted)
    if as_json:
        echo_json(rows)
    else:
        _echo_acls(rows)


@acl.command("delete")
@admin_options
@_acl_resource_options
@_acl_entry_options
@click.option("--force", is_flag=True, help="Delete without asking.")
@json_option
def acl_delete(
    bootstrap: str,
    timeout: float,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    pattern_type: str,
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    force: bool,
    as_json: bool,
) -> None:
    """Remove the ACLs on the resources named: all of them, or only those of the principals,
    hosts and operations given."""
    from kbroker.tools import acls as tool

    allowed, denied, ops = _acl_entries(allow_principals, deny_principals, operations)
    try:
        resources = _acl_resources(topics, groups, transactional_ids, cluster, pattern_type)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not resources.patterns:
        raise click.UsageError("name a resource: --topic, --group, --cluster or --transactional-id")
    if not force:
        names = ", ".join(str(p) for p in resources.patterns)
        who = "" if allowed or denied else "all "
        click.confirm(f"Delete {who}matching ACLs of {names}?", abort=True, err=True)
    with connect(bootstrap, timeout) as conn:
        rows = tool.delete(conn, resources, ops, allowed, denied, allow_hosts, deny_hosts)
    if as_json:
        echo_json(rows)
    else:
        click.echo(f"{len([r for r in rows if 'error' not in r])} ACL(s) deleted.")
        if rows:
            _echo_acls(rows)
    fail_if([_acl_refusal(r) for r in rows if "error" in r])
