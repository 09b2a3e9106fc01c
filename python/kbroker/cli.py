"""The ``kbroker`` command: the broker daemon and tools around it."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kbroker import __version__
from kbroker.config import BROKER, BrokerConfig, ConfigError, UnsupportedSetting, load_properties
from kbroker.security.listeners import ListenerSet

if TYPE_CHECKING:
    from kbroker.security.client import ClientSecurity
    from kbroker.tools.cluster import Cluster


def _split_setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="--set")
    return name.strip(), value.strip()


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {text!r}", param_hint=what)
    return host.strip("[]") or "0.0.0.0", int(port)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kbroker")
def main() -> None:
    """kbroker: a streaming broker that speaks the Apache Kafka protocol."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Data directory (log.dirs).",
)
@click.option("--listen", default=None, help="HOST:PORT to listen on [127.0.0.1:9092].")
@click.option(
    "--advertise", default=None, help="HOST:PORT clients are told to use [the listen address]."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A Kafka-style properties file.",
)
@click.option(
    "--set", "settings", multiple=True, metavar="KEY=VALUE", help="Any broker setting (repeatable)."
)
@click.option(
    "--zookeeper",
    default=None,
    metavar="HOST:PORT[,HOST:PORT...][/chroot]",
    help="Join the cluster of this ZooKeeper ensemble (zookeeper.connect); without it the "
    "node runs alone.",
)
@click.option(
    "--broker-id",
    type=click.IntRange(min=0),
    default=None,
    help="This broker's id in its cluster (broker.id) [0].",
)
@click.option(
    "--metrics",
    "metrics_listen",
    default=None,
    metavar="HOST:PORT",
    help="Serve /metrics, /healthz and /readyz here (metrics.listeners).",
)
@click.option(
    "--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"])
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one JSON object a line, for log shippers.",
)
def serve(
    data_dir: Path | None,
    listen: str | None,
    advertise: str | None,
    config_file: Path | None,
    settings: tuple[str, ...],
    zookeeper: str | None,
    broker_id: int | None,
    metrics_listen: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """Run a broker in the foreground until SIGTERM or SIGINT."""
    pairs: list[tuple[str, str]] = []
    try:
        if config_file is not None:
            pairs.extend(load_properties(config_file).items())
        pairs.extend(_split_setting(s) for s in settings)
        if data_dir is not None:
            pairs.append(("log.dirs", str(data_dir)))
        if listen is not None:
            _host_port(listen, "--listen")
            pairs.append(("listeners", f"PLAINTEXT://{listen}"))
        if advertise is not None:
            _host_port(advertise, "--advertise")
            pairs.append(("advertised.listeners", f"PLAINTEXT://{advertise}"))
        if zookeeper is not None:
            pairs.append(("zookeeper.connect", zookeeper))
        if broker_id is not None:
            pairs.append(("broker.id", str(broker_id)))
        if metrics_listen is not None:
            _host_port(metrics_listen, "--metrics")
            pairs.append(("metrics.listeners", metrics_listen))
        config = BrokerConfig.from_strings(pairs)
        ListenerSet.from_config(config)
        metrics_at = config.get_optional_str("metrics.listeners")
        if metrics_at is not None:
            _host_port(metrics_at.rpartition("://")[2], "metrics.listeners")
    except UnsupportedSetting as exc:
        raise click.ClickException(str(exc)) from None
    except ConfigError as exc:
        raise click.ClickException(f"bad setting: {exc}") from None

    from kbroker.daemon import run_broker

    sys.exit(run_broker(config, log_level, log_format))


@main.command("dump-log")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--print-data", is_flag=True, help="Also print each record's key, value and headers.")
@click.option(
    "--max-decompressed",
    default=64 << 20,
    show_default=True,
    help="Bound on a batch's decompressed size.",
)
def dump_log(files: tuple[Path, ...], print_data: bool, max_decompressed: int) -> None:
    """Print the batches (and records) of segment files, checking each CRC."""
    from kbroker.tools.dump import dump_segment

    bad = False
    for path in files:
        click.echo(f"Dumping {path}")
        for line, ok in dump_segment(path, print_data, max_decompressed):
            click.echo(line)
            bad |= not ok
    if bad:
        raise click.ClickException("the file holds invalid data after the last valid batch")


@main.group("log")
def log_group() -> None:
    """Offline tools for partition logs."""


@log_group.command("verify")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def log_verify(directory: Path) -> None:
    """CRC-check every batch of every segment under DIRECTORY (a data directory or one
    partition directory). Read only; safe beside a running broker. Exits 0 when every
    batch is good, 1 when any is bad or unreadable, 2 on usage errors."""
    from kbroker._kbroker import verify_log_dir
    from kbroker.log.log import TopicPartition

    if any(directory.glob("*.log")):
        partitions = [directory]
    else:
        partitions = sorted(
            entry
            for entry in directory.iterdir()
            if entry.is_dir() and TopicPartition.from_dirname(entry.name) is not None
        )
        if not partitions:
            click.echo(
                f"kbroker log verify: {directory} holds no segment files "
                "and no partition directories",
                err=True,
            )
            sys.exit(2)
    segments = batches = size = bad = 0
    failed: list[str] = []
    for part in partitions:
        try:
            report = verify_log_dir(str(part))
        except OSError as exc:
            click.echo(f"UNREADABLE {part.name}: {exc}")
            failed.append(part.name)
            continue
        segments += report.segments
        batches += report.batches
        size += report.bytes
        for b in report.bad:
            rest = (
                f" (the {b.unreadable_after} bytes from here on cannot be read)"
                if b.unreadable_after
                else ""
            )
            click.echo(
                f"BAD {part.name} {Path(b.segment_file).name} offset {b.offset} "
                f"position {b.position}: {b.reason}{rest}"
            )
        if report.bad:
            bad += len(report.bad)
            failed.append(part.name)
            if not report.clean_shutdown:
                click.echo(
                    f"note: {part.name} has no clean-shutdown marker "
                    "(a broker is running on it or crashed): "
                    "a bad tail of its last segment is cut off by recovery at the next start"
                )
    click.echo(
        f"checked {len(partitions)} partitions, {segments} segments, "
        f"{batches} good batches, {size} bytes: "
        f"{bad} bad batches, {len(failed)} partitions with problems"
    )
    if failed:
        sys.exit(1)


@main.command("settings")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_settings(as_json: bool) -> None:
    """List every broker setting with its default; one not supported yet says so (a value
    given for it is refused at start)."""
    rows = [
        {
            "name": s.name,
            "type": s.type.name,
            "default": s.render(s.default),
            "doc": s.doc,
            "supported": s.supported,
            "unsupported_reason": s.unsupported,
            "honoured_values": [s.render(v) for v in s.honoured],
        }
        for s in BROKER.values()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    for row in rows:
        doc = row["doc"]
        if not row["supported"]:
            doc = f"{doc} [a value is refused: {row['unsupported_reason']}]"
        click.echo(f"{row['name']:<40} {row['type']:<8} {row['default']!s:<28} {doc}")


# -- cluster admin: topic, config, offsets, delete-records, cluster -----------------
#
# These speak only the Kafka protocol (versions negotiated with ApiVersions), so
# they work against any Kafka-compatible cluster. The tools in kbroker.tools
# return plain data; --json prints it as is (the field names are the stable,
# documented output), otherwise it is shown as aligned tables.


def _admin_options(f: Any) -> Any:
    f = click.option(
        "--timeout",
        default=30.0,
        show_default=True,
        type=click.FloatRange(min=0.1),
        help="Seconds to wait for each answer.",
    )(f)
    f = click.option(
        "--profile",
        envvar="KBROKER_PROFILE",
        expose_value=False,
        callback=_remember_profile,
        help="Connection profile from ~/.config/kbroker/cli.toml [env KBROKER_PROFILE].",
    )(f)
    f = click.option(
        "--command-config",
        envvar="KBROKER_COMMAND_CONFIG",
        expose_value=False,
        callback=_remember_command_config,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Kafka client settings for TLS and SASL (security.protocol, ssl.truststore.location, "
        "sasl.mechanism, sasl.jaas.config, ...), as Kafka's tools take them "
        "[env KBROKER_COMMAND_CONFIG; else the profile's command_config].",
    )(f)
    return click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap",
        default=None,
        show_default=DEFAULT_BOOTSTRAP,
        envvar="KBROKER_BOOTSTRAP",
        help="HOST:PORT[,HOST:PORT...] of brokers [env KBROKER_BOOTSTRAP; else the profile's].",
    )(f)


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
_PROFILE = "kbroker.profile"


def _remember_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta[_PROFILE] = value


_COMMAND_CONFIG = "kbroker.command_config"


def _remember_command_config(
    ctx: click.Context, param: click.Parameter, value: Path | None
) -> None:
    ctx.meta[_COMMAND_CONFIG] = value


def _client_security(settings: dict[str, Any]) -> ClientSecurity:
    """How to reach the cluster: the --command-config file's (or the profile's) settings."""
    from kbroker.security.client import ClientSecurity

    ctx = click.get_current_context()
    path = ctx.meta.get(_COMMAND_CONFIG) or settings.get("command_config")
    if path is None:
        return ClientSecurity()
    try:
        props = load_properties(Path(path).expanduser())
        return ClientSecurity.from_client_properties(props, str(path))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _connection(bootstrap: str | None, timeout: float) -> tuple[str, float, ClientSecurity]:
    """The bootstrap, timeout and security to use: given explicitly (flag or env), else the
    profile's (--profile, KBROKER_PROFILE or the config file's default), else the defaults."""
    from kbroker.tools.client import ClientError
    from kbroker.tools.profiles import UnknownProfile, profile

    ctx = click.get_current_context()
    try:
        settings = profile(ctx.meta.get(_PROFILE))
    except UnknownProfile as exc:
        raise click.UsageError(str(exc)) from None
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    if ctx.get_parameter_source("timeout") == click.core.ParameterSource.DEFAULT:
        timeout = float(settings.get("timeout", timeout))
    address = bootstrap or settings.get("bootstrap", DEFAULT_BOOTSTRAP)
    return address, timeout, _client_security(settings)


_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@contextmanager
def _cluster(bootstrap: str | None, timeout: float) -> Iterator[Cluster]:
    """A connected cluster; a failure to reach it or a broker error becomes one line."""
    from kbroker.tools.client import ClientError
    from kbroker.tools.cluster import Cluster

    bootstrap, timeout, security = _connection(bootstrap, timeout)
    try:
        with Cluster(bootstrap, timeout, security) as cluster:
            yield cluster
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


def _echo_json(data: object) -> None:
    click.echo(json.dumps(data, indent=1))


def _echo_table(headers: list[str], rows: list[list[object]]) -> None:
    from kbroker.tools.output import table

    for line in table(headers, rows):
        click.echo(line)


def _fail_if(errors: list[str]) -> None:
    """Print each error on stderr and exit 1 if there are any."""
    for error in errors:
        click.echo(f"Error: {error}", err=True)
    if errors:
        sys.exit(1)


def _settings(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for text in pairs:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint=option)
        out[name.strip()] = value.strip()
    return out


def _assignment(text: str | None) -> list[list[int]] | None:
    from kbroker.tools.topics import parse_assignment

    if text is None:
        return None
    try:
        return parse_assignment(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--replica-assignment") from None


def _partition_specs(specs: tuple[str, ...]) -> list[tuple[str, list[int] | None]]:
    from kbroker.tools.offsets import parse_partitions

    try:
        return [parse_partitions(s) for s in specs]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC[:PARTITION,...]") from None


@main.group("topic")
def topic() -> None:
    """Create, list, describe, alter and delete topics."""


@topic.command("create")
@_admin_options
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
@_json_option
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
    settings = _settings(configs, "--config")
    with _cluster(bootstrap, timeout) as cluster:
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
        _echo_json([{"topic": name, **r} for name, r in results.items()])
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
    _fail_if([r["error"] for r in results.values() if r["error"] is not None])


@topic.command("list")
@_admin_options
@click.argument("pattern", required=False)
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets...).")
@_json_option
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
    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.list_topics(cluster, pattern, internal)
    if as_json:
        _echo_json(rows)
        return
    headers = ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"] + (["INTERNAL"] if internal else [])
    _echo_table(
        headers,
        [
            [r["topic"], r["partitions"], r["replication_factor"]]
            + ([r["internal"]] if internal else [])
            for r in rows
        ],
    )


@topic.command("describe")
@_admin_options
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
@_json_option
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
    with _cluster(bootstrap, timeout) as cluster:
        found = tool.describe_topics(cluster, names, internal, [f for f, on in flags.items() if on])
    if as_json:
        _echo_json(found)
        return
    for i, t in enumerate(found["topics"]):
        if i:
            click.echo()
        click.echo(
            f"Topic {t['topic']}  id {t['topic_id'] or '-'}  partitions {t['partition_count']}  "
            f"replication factor {t['replication_factor']}  "
            f"min.insync.replicas {t['min_insync_replicas'] or '-'}"
            + ("  (internal)" if t["internal"] else "")
        )
        _echo_table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "LOG-START", "LOG-END", "SIZE"],
            [
                [
                    p["partition"],
                    p["leader"],
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
@_admin_options
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
    settings = _settings(configs, "--config")
    if partitions is None and not settings and not deletes:
        raise click.UsageError("nothing to change: give --partitions, --config or --delete-config")
    verb = "would have" if validate_only else "now has"
    with _cluster(bootstrap, timeout) as cluster:
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
@_admin_options
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="A topic that does not exist is no error.")
def topic_delete(bootstrap: str, timeout: float, names: tuple[str, ...], if_exists: bool) -> None:
    """Delete topics and all their records."""
    from kbroker.tools import topics as tool

    with _cluster(bootstrap, timeout) as cluster:
        results = tool.delete_topics(cluster, names, if_exists)
    for name, error in results.items():
        if error is None:
            click.echo(f"Topic {name} deleted.")
    _fail_if([e for e in results.values() if e is not None])


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


@main.group("config")
def config() -> None:
    """Describe and change the settings of topics and brokers."""


@config.command("describe")
@_admin_options
@_with_resource
@click.argument("names", nargs=-1)
@click.option(
    "--all", "include_defaults", is_flag=True, help="Include settings left at their default."
)
@_json_option
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
    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.describe(cluster, resource, names, include_defaults)
    if as_json:
        _echo_json(rows)
        return
    _echo_table(
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
@_admin_options
@_with_resource
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--validate-only", is_flag=True, help="Only check the change; apply nothing.")
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
    settings = _settings(pairs, "KEY=VALUE")
    with _cluster(bootstrap, timeout) as cluster:
        tool.alter(cluster, resource, settings, (), validate_only)
    verb = "would be set" if validate_only else "set"
    click.echo(f"{', '.join(settings)} {verb} for {resource.label}.")


@config.command("delete")
@_admin_options
@_with_resource
@click.argument("names", nargs=-1, required=True, metavar="KEY...")
@click.option("--validate-only", is_flag=True, help="Only check the change; apply nothing.")
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
    with _cluster(bootstrap, timeout) as cluster:
        tool.alter(cluster, resource, None, names, validate_only)
    verb = "would be deleted" if validate_only else "deleted"
    click.echo(f"{', '.join(names)} {verb} for {resource.label}.")


# -- users and quotas -------------------------------------------------------------------


@main.group("user")
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
@_admin_options
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
    with _cluster(bootstrap, timeout) as cluster:
        tool.create(cluster, name, password, mechanism.upper(), iterations)
    click.echo(f"{mechanism.upper()} credential of user {name!r} set ({iterations} iterations).")


@user_group.command("list")
@_admin_options
@click.argument("names", nargs=-1)
@_json_option
def user_list(bootstrap: str, timeout: float, names: tuple[str, ...], as_json: bool) -> None:
    """List users' SCRAM credentials (mechanism and iterations; never a secret)."""
    from kbroker.tools import users as tool

    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.describe(cluster, names)
    if as_json:
        _echo_json(rows)
        return
    _echo_table(
        ["USER", "MECHANISM", "ITERATIONS"],
        [[r["user"], r["mechanism"], r["iterations"]] for r in rows],
    )


@user_group.command("delete")
@_admin_options
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

    with _cluster(bootstrap, timeout) as cluster:
        deleted = tool.delete(cluster, name, mechanisms)
    click.echo(f"deleted the {', '.join(deleted)} credential(s) of user {name!r}.")


@main.group("quota")
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
@_admin_options
@_with_entity
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--validate-only", is_flag=True, help="Only check the change; apply nothing.")
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
    for key, text in _settings(pairs, "KEY=VALUE").items():
        try:
            values[key] = float(text)
        except ValueError:
            raise click.BadParameter(f"{key}={text!r} is not a number") from None
    with _cluster(bootstrap, timeout) as cluster:
        tool.alter(cluster, parts, values, (), validate_only)
    verb = "would be set" if validate_only else "set"
    click.echo(f"{', '.join(values)} {verb} for {tool.label(parts)}.")


@quota_group.command("delete")
@_admin_options
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
    with _cluster(bootstrap, timeout) as cluster:
        tool.alter(cluster, parts, None, keys)
    click.echo(f"{', '.join(keys)} removed for {tool.label(parts)}.")


@quota_group.command("describe")
@_admin_options
@_with_entity
@_json_option
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
    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.describe(cluster, parts, strict=named)
    if as_json:
        _echo_json(rows)
        return

    def shown(row: dict[str, Any], key: str) -> str:
        if key not in row:
            return ""
        return "<default>" if row[key] is None else str(row[key])

    _echo_table(
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


@main.command("offsets")
@_admin_options
@click.argument("specs", nargs=-1, required=True, metavar="TOPIC[:PARTITION,...]...")
@click.option(
    "--time",
    "at",
    metavar="WHEN",
    help="Also the first offset at or after WHEN: epoch ms, an ISO date/time (UTC unless "
    "zoned), earliest, latest or max-timestamp.",
)
@_json_option
def offsets_command(
    bootstrap: str, timeout: float, specs: tuple[str, ...], at: str | None, as_json: bool
) -> None:
    """Earliest and latest offset of each partition (and the offset for a time)."""
    from kbroker.tools import offsets as tool

    when = None
    if at is not None:
        try:
            when = tool.parse_time(at)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--time") from None
    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.offsets(cluster, _partition_specs(specs), when)
    if as_json:
        _echo_json(rows)
    else:
        headers = ["TOPIC", "PARTITION", "EARLIEST", "LATEST"]
        extra = ["OFFSET", "TIMESTAMP"] if when is not None else []
        _echo_table(
            [*headers, *extra, "ERROR"],
            [
                [r["topic"], r["partition"], r["earliest"], r["latest"]]
                + [r[k.lower()] for k in extra]
                + [r["error"]]
                for r in rows
            ],
        )
    if any(r["error"] for r in rows):
        sys.exit(1)


@main.command("delete-records")
@_admin_options
@click.argument("specs", nargs=-1, required=True, metavar="TOPIC[:PARTITION,...]...")
@click.option(
    "--before",
    required=True,
    metavar="OFFSET|end",
    help="Delete the records before this offset (end: every record).",
)
@_json_option
def delete_records_command(
    bootstrap: str, timeout: float, specs: tuple[str, ...], before: str, as_json: bool
) -> None:
    """Delete the oldest records of partitions: move their log start offset forward."""
    from kbroker.tools import offsets as tool

    if before == "end":
        offset = -1
    elif before.isdigit():
        offset = int(before)
    else:
        raise click.BadParameter(
            f"expected an offset or 'end', got {before!r}", param_hint="--before"
        )
    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.delete_records(cluster, _partition_specs(specs), offset)
    if as_json:
        _echo_json(rows)
    else:
        _echo_table(
            ["TOPIC", "PARTITION", "LOG-START", "ERROR"],
            [[r["topic"], r["partition"], r["log_start_offset"], r["error"]] for r in rows],
        )
    if any(r["error"] for r in rows):
        sys.exit(1)


@main.command("produce")
@_admin_options
@click.argument("topic")
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
def produce_command(
    bootstrap: str,
    timeout: float,
    topic: str,
    files: tuple[Any, ...],
    partition: int | None,
    key_separator: str | None,
    fmt: str | None,
    headers: tuple[str, ...],
    compression: str,
    acks: str,
    max_line_bytes: int,
) -> None:
    """Send each line of FILES (default: stdin; - is stdin) as a record to TOPIC.
    Keyed records go where Kafka's default partitioner puts them."""
    from kbroker.tools import produce as tool

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
    fixed = [(k, v.encode()) for k, v in _settings(headers, "--header").items()]
    streams = files or (sys.stdin.buffer,)
    with _cluster(bootstrap, timeout) as cluster:
        producer = tool.Producer(
            cluster, topic, partition, tool.CODECS[compression], tool.ACKS[acks]
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


@main.command("consume")
@_admin_options
@click.argument("topic")
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
@_json_option
def consume_command(
    bootstrap: str,
    timeout: float,
    topic: str,
    partitions: tuple[int, ...],
    start: str,
    count: int | None,
    until_end: bool,
    fmt: str,
    group: str | None,
    read_committed: bool,
    as_json: bool,
) -> None:
    """Print the records of TOPIC as they arrive: of the given partitions (default all),
    or of those a consumer group assigns (--group). With --json, one JSON object a line."""
    from kbroker.tools import consume as tool

    try:
        spec = tool.StartSpec.parse(start)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--from") from None
    try:
        tool.check_format(fmt)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    if group is not None and partitions:
        raise click.UsageError("--group assigns the partitions: drop --partition")
    out = sys.stdout.buffer
    seen = 0
    with _cluster(bootstrap, timeout) as cluster:
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


@main.group("cluster")
def cluster_group() -> None:
    """Cluster id, controller and brokers."""


@cluster_group.command("info")
@_admin_options
@_json_option
def cluster_info(bootstrap: str, timeout: float, as_json: bool) -> None:
    """Cluster id, controller and how many brokers."""
    from kbroker.tools import cluster as tool

    with _cluster(bootstrap, timeout) as cluster:
        info = tool.cluster_info(cluster)
    if as_json:
        _echo_json(info)
        return
    click.echo(f"Cluster id:  {info['cluster_id'] or '-'}")
    click.echo(
        f"Controller:  {info['controller_id'] if info['controller_id'] is not None else '-'}"
    )
    click.echo(f"Brokers:     {len(info['brokers'])}")


@cluster_group.command("brokers")
@_admin_options
@_json_option
def cluster_brokers(bootstrap: str, timeout: float, as_json: bool) -> None:
    """The brokers with their endpoint and rack."""
    from kbroker.tools import cluster as tool

    with _cluster(bootstrap, timeout) as cluster:
        brokers = tool.cluster_info(cluster)["brokers"]
    if as_json:
        _echo_json(brokers)
        return
    _echo_table(
        ["ID", "HOST", "PORT", "RACK", "CONTROLLER"],
        [[b["id"], b["host"], b["port"], b["rack"], b["controller"]] for b in brokers],
    )


# -- groups -------------------------------------------------------------------------

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


@main.group("group")
def group() -> None:
    """List, describe and delete consumer groups, reset and delete their committed offsets,
    import offsets from ZooKeeper ("groups" is the same command)."""


@group.command("list")
@_admin_options
@click.option("--state", "states", multiple=True, help="Only groups in this state (repeatable).")
@_json_option
def group_list(bootstrap: str, timeout: float, states: tuple[str, ...], as_json: bool) -> None:
    """List the groups the broker coordinates."""
    from kbroker.tools import groups as tool

    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.list_groups(cluster.bootstrap, states)
    if as_json:
        _echo_json(rows)
        return
    _echo_table(
        ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
        [[r["group"], r["type"], r["state"], r["protocol_type"]] for r in rows],
    )


@group.command("describe")
@_admin_options
@click.argument("group_ids", nargs=-1, required=True)
@_json_option
def group_describe(
    bootstrap: str, timeout: float, group_ids: tuple[str, ...], as_json: bool
) -> None:
    """Show state, members, assignments, committed offsets, end offsets and lag of groups."""
    from kbroker.tools import groups as tool

    with _cluster(bootstrap, timeout) as cluster:
        described = [tool.describe_group(cluster, g) for g in group_ids]
    if as_json:
        _echo_json(described)
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
            _echo_table(
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
        _echo_table(
            ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER"],
            [
                [o["topic"], o["partition"], o["current_offset"], o["log_end_offset"], o["lag"],
                 o["member_id"]]
                for o in d["offsets"]
            ],
        )  # fmt: skip


@group.command("delete")
@_admin_options
@click.argument("group_ids", nargs=-1, required=True)
def group_delete(bootstrap: str, timeout: float, group_ids: tuple[str, ...]) -> None:
    """Delete empty groups and their committed offsets."""
    from kbroker.tools import groups as tool

    with _cluster(bootstrap, timeout) as cluster:
        results = tool.delete_groups(cluster.bootstrap, list(group_ids))
    failed = False
    for group_id, error in results.items():
        click.echo(f"{group_id}: {'deleted' if error is None else error}")
        failed |= error is not None
    if failed:
        sys.exit(1)


@group.command("reset-offsets")
@_admin_options
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
@_json_option
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
    with _cluster(bootstrap, timeout) as cluster:
        plan = tool.reset_offsets(cluster, group_id, _partition_specs(topics), spec, execute)
    if as_json:
        _echo_json(plan)
        return
    _echo_table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [
            [group_id, r["topic"], r["partition"], r["current_offset"], r["new_offset"]]
            for r in plan["partitions"]
        ],
    )
    if not execute:
        click.echo("Dry run: nothing committed (--execute commits these offsets).", err=True)


@group.command("delete-offsets")
@_admin_options
@click.argument("group_id")
@click.argument("topics", nargs=-1, required=True, metavar="TOPIC[:P,...]...")
@_json_option
def group_delete_offsets(
    bootstrap: str, timeout: float, group_id: str, topics: tuple[str, ...], as_json: bool
) -> None:
    """Delete GROUP_ID's committed offsets of topics (or some of their partitions) it no
    longer consumes (OffsetDelete)."""
    from kbroker.tools import group_offsets as tool

    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.delete_offsets(cluster, group_id, _partition_specs(topics))
    if as_json:
        _echo_json(rows)
    else:
        _echo_table(
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
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
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


# `groups` was the first name of `group`: the same commands, not listed in --help.
main.add_command(
    click.Group("groups", commands=group.commands, help=group.help, hidden=True), "groups"
)


# -- partition: elect-leaders, reassign -----------------------------------------------


@main.group("partition")
def partition_group() -> None:
    """Elect partition leaders and move replicas between brokers."""


def _results_table(rows: list[dict[str, Any]], ok: str) -> None:
    """TOPIC PARTITION RESULT per partition, and the brokers' messages if there are any."""
    messages = any(r.get("message") for r in rows)
    _echo_table(
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
@_admin_options
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
@_json_option
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
    specs = None if all_topic_partitions else _partition_specs(topics)
    with _cluster(bootstrap, timeout) as cluster:
        rows = tool.elect_leaders(cluster, specs, election_type)
    if as_json:
        _echo_json(rows)
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
@_admin_options
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
    with _cluster(bootstrap, timeout) as cluster:
        _echo_json(tool.generate(cluster, names, broker_ids))


@reassign_group.command("execute")
@_admin_options
@_plan_argument
@click.option(
    "--wait",
    is_flag=True,
    help="Show progress until every partition has moved (Ctrl-C stops waiting, not the move).",
)
@_json_option
def reassign_execute(
    bootstrap: str, timeout: float, plan_file: Path, wait: bool, as_json: bool
) -> None:
    """Start moving partitions to the replicas PLAN.json names."""
    import time

    from kbroker.tools import partitions as tool
    from kbroker.tools.client import ClientError

    with _cluster(bootstrap, timeout) as cluster:
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
        _echo_json(rows)
    else:
        _results_table(rows, "started")
    _exit_on_failures(rows)


@reassign_group.command("verify")
@_admin_options
@_plan_argument
@_json_option
def reassign_verify(bootstrap: str, timeout: float, plan_file: Path, as_json: bool) -> None:
    """Whether each partition of PLAN.json has reached its replicas; exit 1 until all have."""
    from kbroker.tools import partitions as tool
    from kbroker.tools.client import ClientError

    with _cluster(bootstrap, timeout) as cluster:
        try:
            plan = tool.read_plan(plan_file)
        except ClientError as exc:
            raise click.ClickException(str(exc)) from None
        rows = tool.verify(cluster, plan)
    if as_json:
        _echo_json(rows)
    else:
        _echo_table(
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
@_admin_options
@_plan_argument
@_json_option
def reassign_cancel(bootstrap: str, timeout: float, plan_file: Path, as_json: bool) -> None:
    """Stop the reassignments of the partitions PLAN.json names (their replicas go back)."""
    from kbroker.tools import partitions as tool
    from kbroker.tools.client import ClientError

    with _cluster(bootstrap, timeout) as cluster:
        try:
            plan = tool.read_plan(plan_file)
        except ClientError as exc:
            raise click.ClickException(str(exc)) from None
        rows = tool.cancel(cluster, list(plan))
    if as_json:
        _echo_json(rows)
    else:
        _results_table(rows, "cancelled")
    _exit_on_failures(rows, ("NO_REASSIGNMENT_IN_PROGRESS",))


# -- acl: kafka-acls.sh's create (--add), list and delete (--remove) -----------------------


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
    _echo_table(
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


@main.group("acl")
def acl() -> None:
    """Create, list and delete ACLs (kafka-acls.sh's --add, --list and --remove)."""


@acl.command("create")
@_admin_options
@_acl_resource_options
@_acl_entry_options
@_json_option
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
    with _cluster(bootstrap, timeout) as conn:
        rows = tool.create(conn, bindings)
    if as_json:
        _echo_json(rows)
    else:
        done = [r for r in rows if "error" not in r]
        click.echo(f"{len(done)} ACL(s) created.")
        if done:
            _echo_acls(done)
    _fail_if([_acl_refusal(r) for r in rows if "error" in r])


def _acl_refusal(row: dict[str, Any]) -> str:
    what = f"{row['permission']} {row['principal']} {row['operation']}"
    return f"{row['error']}: {what} on {row['resource_type']} {row['name']!r}"


@acl.command("list")
@_admin_options
@_acl_resource_options
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="TYPE:NAME",
    help="Only this principal's ACLs (repeatable).",
)
@_json_option
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
    with _cluster(bootstrap, timeout) as conn:
        rows = tool.describe(conn, resources if resources.patterns else None, wanted)
    if as_json:
        _echo_json(rows)
    else:
        _echo_acls(rows)


@acl.command("delete")
@_admin_options
@_acl_resource_options
@_acl_entry_options
@click.option("--force", is_flag=True, help="Delete without asking.")
@_json_option
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
    with _cluster(bootstrap, timeout) as conn:
        rows = tool.delete(conn, resources, ops, allowed, denied, allow_hosts, deny_hosts)
    if as_json:
        _echo_json(rows)
    else:
        click.echo(f"{len([r for r in rows if 'error' not in r])} ACL(s) deleted.")
        if rows:
            _echo_acls(rows)
    _fail_if([_acl_refusal(r) for r in rows if "error" in r])


@main.command("log-dirs")
@_admin_options
@click.option(
    "--topic", "topics", multiple=True, help="Only partitions of this topic (repeatable)."
)
@click.option("--broker", "brokers", multiple=True, type=int, help="Only this broker (repeatable).")
@_json_option
def log_dirs_command(
    bootstrap: str, timeout: float, topics: tuple[str, ...], brokers: tuple[int, ...], as_json: bool
) -> None:
    """The log directories of each broker: total and usable bytes, and each partition's
    size, offset lag and whether it is a future replica (DescribeLogDirs)."""
    from kbroker.tools import log_dirs as tool

    with _cluster(bootstrap, timeout) as cluster:
        found = tool.describe_log_dirs(cluster, topics, brokers)
    if as_json:
        _echo_json(found)
    else:
        for b in found["brokers"]:
            for d in b["log_dirs"]:
                click.echo(
                    f"Broker {b['broker']}  {d['path']}  total {d['total_bytes'] or '-'}  "
                    f"usable {d['usable_bytes'] or '-'}"
                    + (f"  error {d['error']}" if d["error"] else "")
                )
                _echo_table(
                    ["TOPIC", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"],
                    [
                        [p["topic"], p["partition"], p["size_bytes"], p["offset_lag"], p["future"]]
                        for p in d["partitions"]
                    ],
                )
    _fail_if(found["notes"])


@main.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script, e.g. `eval "$(kbroker completion bash)"` in
    ~/.bashrc (zsh: ~/.zshrc; fish: `kbroker completion fish | source`)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # every choice has a class
    click.echo(cls(main, {}, "kbroker", "_KBROKER_COMPLETE").source())


# -- pipeline -----------------------------------------------------------------------


def _pipeline_errors() -> tuple[type[BaseException], ...]:
    from kbroker.spark.common import pipeline_exceptions

    return pipeline_exceptions()


def _pipeline_failed(exc: BaseException) -> click.ClickException:
    from kbroker.spark.common import failure_message

    return click.ClickException(failure_message(exc))


def _spark_conf(conf: tuple[str, ...]) -> dict[str, str]:
    try:
        return dict(_split_setting(c) for c in conf)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--conf") from None


_master_option = click.option(
    "--master",
    default=None,
    help="Spark master URL (spark://HOST:7077, yarn, ...) [local[*]].",
)
_conf_option = click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any Spark setting (repeatable).",
)
_pipeline_bootstrap = click.option(
    "--bootstrap",
    default="127.0.0.1:9092",
    show_default=True,
    help="HOST:PORT[,HOST:PORT...] of brokers.",
)


@main.group("pipeline")
def pipeline() -> None:
    """Spark Structured Streaming jobs over kbroker topics (needs kbroker[spark])."""
    try:
        import py4j  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"the Spark pipelines need {exc.name or 'PySpark'}, which the `spark` extra installs: "
            "pip install 'kbroker[spark]'"
        ) from None


@pipeline.command("archive")
@click.option("--topic", required=True, help="A topic, TOPIC,TOPIC,... or a regular expression.")
@click.option("--output", required=True, help="Output directory (a path or any Hadoop URI).")
@_pipeline_bootstrap
@click.option("--once", is_flag=True, help="Archive what is there now, then exit.")
@click.option("--checkpoint", default=None, help="Checkpoint location [OUTPUT/_checkpoint].")
@click.option("--interval", default="10s", show_default=True, help="Time between micro-batches.")
@click.option(
    "--max-records-per-batch",
    type=click.IntRange(min=1),
    default=None,
    help="Bound on the records of one micro-batch.",
)
@_master_option
@_conf_option
def pipeline_archive(
    topic: str,
    output: str,
    bootstrap: str,
    once: bool,
    checkpoint: str | None,
    interval: str,
    max_records_per_batch: int | None,
    master: str | None,
    conf: tuple[str, ...],
) -> None:
    """Persist topics as Parquet partitioned by topic, date and hour, exactly once
    across restarts. Runs until SIGTERM/SIGINT unless --once."""
    from kbroker.spark import archive, spark_session
    from kbroker.spark.archive import check_archive

    try:
        check_archive(bootstrap, topic, output, checkpoint, interval)  # before the JVM starts
        spark = spark_session(master, "kbroker-archive", _spark_conf(conf))
        archive(
            spark,
            bootstrap,
            topic,
            output,
            checkpoint=checkpoint,
            once=once,
            interval=interval,
            max_records_per_batch=max_records_per_batch,
        )
    except _pipeline_errors() as exc:
        raise _pipeline_failed(exc) from None


@pipeline.command("aggregate")
@click.option(
    "--topic", required=True, help="Input topic; values are numbers (or JSON, see --field)."
)
@click.option("--output-topic", required=True, help="Topic the per-window results are written to.")
@click.option(
    "--window", default="10s", show_default=True, help="Tumbling window length (10s, 5m, 1h...)."
)
@click.option("--watermark", default="30s", show_default=True, help="How late a record may be.")
@click.option("--field", default=None, help="Take the number from this member of a JSON value.")
@_pipeline_bootstrap
@click.option("--once", is_flag=True, help="Process what is there now, then exit.")
@click.option(
    "--checkpoint",
    default=None,
    help="Checkpoint location [~/.local/state/kbroker/pipeline/aggregate-IN-OUT].",
)
@click.option("--interval", default="10s", show_default=True, help="Time between micro-batches.")
@_master_option
@_conf_option
def pipeline_aggregate(
    topic: str,
    output_topic: str,
    window: str,
    watermark: str,
    field: str | None,
    bootstrap: str,
    once: bool,
    checkpoint: str | None,
    interval: str,
    master: str | None,
    conf: tuple[str, ...],
) -> None:
    """Per-key count, sum and average over tumbling windows of the record time,
    with a watermark for late records, written to another topic."""
    from kbroker.spark import aggregate, spark_session
    from kbroker.spark.aggregate import check_aggregate

    try:
        check_aggregate(
            bootstrap,
            topic,
            output_topic,
            window=window,
            watermark=watermark,
            field=field,
            interval=interval,
        )  # before the JVM starts
        spark = spark_session(master, "kbroker-aggregate", _spark_conf(conf))
        aggregate(
            spark,
            bootstrap,
            topic,
            output_topic,
            window=window,
            watermark=watermark,
            field=field,
            checkpoint=checkpoint,
            once=once,
            interval=interval,
        )
    except _pipeline_errors() as exc:
        raise _pipeline_failed(exc) from None


if __name__ == "__main__":
    main()
