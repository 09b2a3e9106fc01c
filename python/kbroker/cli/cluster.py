"""`kbroker cluster`: cluster id, controller and brokers."""

from __future__ import annotations

import click

from kbroker.cli.common import (
    admin_options,
    connect,
    echo_json,
    echo_table,
    json_option,
)


@click.group("cluster")
def cluster_group() -> None:
    """Cluster id, controller and brokers."""


@cluster_group.command("info")
@admin_options
@json_option
def cluster_info(bootstrap: str, timeout: float, as_json: bool) -> None:
    """Cluster id, controller and how many brokers."""
    from kbroker.tools import cluster as tool

    with connect(bootstrap, timeout) as cluster:
        info = tool.cluster_info(cluster)
    if as_json:
        echo_json(info)
        return
    click.echo(f"Cluster id:  {info['cluster_id'] or '-'}")
    click.echo(
        f"Controller:  {info['controller_id'] if info['controller_id'] is not None else '-'}"
    )
    click.echo(f"Brokers:     {len(info['brokers'])}")


@cluster_group.command("brokers")
@admin_options
@json_option
def cluster_brokers(bootstrap: str, timeout: float, as_json: bool) -> None:
    """The brokers with their endpoint and rack."""
    from kbroker.tools import cluster as tool

    with connect(bootstrap, timeout) as cluster:
        brokers = tool.cluster_info(cluster)["brokers"]
    if as_json:
        echo_json(brokers)
        return
    echo_table(
        ["ID", "HOST", "PORT", "RACK", "CONTROLLER"],
        [[b["id"], b["host"], b["port"], b["rack"], b["controller"]] for b in brokers],
    )
