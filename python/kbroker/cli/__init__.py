"""The ``kbroker`` command: the broker daemon and tools around it.

`main` is the root click group; each command group lives in its own module of this package
(serve, settings, logs, topics, configs, users, quotas, offsets, records, cluster, groups,
partitions, acls, pipeline, console) and is attached here. The options every cluster command shares
are declared once in `kbroker.cli.common`. The work itself is done in `kbroker.tools`; the
command modules parse, call, print and choose the exit code.
"""

from __future__ import annotations

import click

from kbroker import __version__
from kbroker.cli import (
    acls,
    cluster,
    configs,
    console,
    groups,
    logs,
    offsets,
    partitions,
    pipeline,
    quotas,
    records,
    serve,
    settings,
    topics,
    users,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kbroker")
def main() -> None:
    """kbroker: a streaming broker that speaks the Apache Kafka protocol."""


for command in (
    serve.serve,
    logs.dump_log,
    logs.log_group,
    settings.list_settings,
    topics.topic,
    configs.config,
    users.user_group,
    quotas.quota_group,
    offsets.offsets_command,
    offsets.delete_records_command,
    records.produce_command,
    records.consume_command,
    cluster.cluster_group,
    groups.group,
    partitions.partition_group,
    acls.acl,
    logs.log_dirs_command,
    settings.completion,
    pipeline.pipeline,
    console.console_command,
):
    main.add_command(command)

# `groups` was the first name of `group`: the same commands, not listed in --help.
main.add_command(
    click.Group("groups", commands=groups.group.commands, help=groups.group.help, hidden=True),
    "groups",
)

__all__ = ["main"]
