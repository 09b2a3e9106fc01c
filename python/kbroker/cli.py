"""The ``kbroker`` command: the broker daemon and tools around it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kbroker import __version__
from kbroker.config import BROKER, BrokerConfig, ConfigError, load_properties


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
    "--zookeeper", default=None, help="ZooKeeper connect string; without it the node runs alone."
)
@click.option(
    "--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"])
)
def serve(
    data_dir: Path | None,
    listen: str | None,
    advertise: str | None,
    config_file: Path | None,
    settings: tuple[str, ...],
    zookeeper: str | None,
    log_level: str,
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
        config = BrokerConfig.from_strings(pairs)
    except ConfigError as exc:
        raise click.ClickException(f"bad setting: {exc}") from None

    from kbroker.broker import run_broker

    sys.exit(run_broker(config, log_level))


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
                f"kbroker log verify: {directory} holds no segment files and no partition directories",
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
                f"BAD {part.name} {Path(b.segment_file).name} offset {b.offset} position {b.position}: {b.reason}{rest}"
            )
        if report.bad:
            bad += len(report.bad)
            failed.append(part.name)
            if not report.clean_shutdown:
                click.echo(
                    f"note: {part.name} has no clean-shutdown marker (a broker is running on it or crashed): "
                    "a bad tail of its last segment is cut off by recovery at the next start"
                )
    click.echo(
        f"checked {len(partitions)} partitions, {segments} segments, {batches} good batches, {size} bytes: "
        f"{bad} bad batches, {len(failed)} partitions with problems"
    )
    if failed:
        sys.exit(1)


@main.command("settings")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_settings(as_json: bool) -> None:
    """List every broker setting with its default."""
    rows = [
        {"name": s.name, "type": s.type.name, "default": s.render(s.default), "doc": s.doc}
        for s in BROKER.values()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    for row in rows:
        click.echo(f"{row['name']:<40} {row['type']:<8} {row['default']!s:<28} {row['doc']}")


# -- groups -------------------------------------------------------------------------

_bootstrap_option = click.option(
    "--bootstrap-server",
    "-b",
    "bootstrap",
    default="127.0.0.1:9092",
    show_default=True,
    help="HOST:PORT of a broker.",
)


def _tool_errors() -> tuple[type[Exception], ...]:
    from kbroker.coordinator.zk_import import ZkImportError
    from kbroker.tools.client import ClientError

    return ClientError, ZkImportError


@main.group("groups")
def groups() -> None:
    """List, describe and delete consumer groups; import offsets from ZooKeeper."""


@groups.command("list")
@_bootstrap_option
@click.option("--state", "states", multiple=True, help="Only groups in this state (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def groups_list(bootstrap: str, states: tuple[str, ...], as_json: bool) -> None:
    """List the groups the broker coordinates."""
    from kbroker.tools import groups as tool
    from kbroker.tools.client import BrokerClient

    try:
        with BrokerClient(bootstrap) as client:
            rows = tool.list_groups(client, states)
    except _tool_errors() as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo(f"{'GROUP':<40} {'STATE':<20} PROTOCOL-TYPE")
    for row in rows:
        click.echo(f"{row['group']:<40} {row['state']:<20} {row['protocol_type']}")


@groups.command("describe")
@_bootstrap_option
@click.argument("group_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def groups_describe(bootstrap: str, group_ids: tuple[str, ...], as_json: bool) -> None:
    """Show state, members, assignments, committed offsets and lag of groups."""
    from kbroker.tools import groups as tool
    from kbroker.tools.client import BrokerClient

    try:
        with BrokerClient(bootstrap) as client:
            described = [tool.describe_group(client, g) for g in group_ids]
    except _tool_errors() as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(described, indent=1))
        return
    for d in described:
        click.echo(
            f"Group {d['group']}: {d['state']} ({d['protocol_type'] or '-'}/{d['protocol'] or '-'}), "
            f"{len(d['members'])} members"
        )
        for m in d["members"]:
            owned = ", ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in m["assignment"].items())
            instance = f" instance={m['group_instance_id']}" if m["group_instance_id"] else ""
            click.echo(
                f"  {m['member_id']}{instance} client={m['client_id']} host={m['host']} [{owned}]"
            )
        click.echo(
            f"  {'TOPIC':<30} {'PARTITION':>9} {'CURRENT':>12} {'LOG-END':>12} {'LAG':>8}  MEMBER"
        )
        for o in d["offsets"]:

            def show(v: object) -> str:
                return "-" if v is None else str(v)

            click.echo(
                f"  {o['topic']:<30} {o['partition']:>9} {show(o['current_offset']):>12} "
                f"{show(o['log_end_offset']):>12} {show(o['lag']):>8}  {o['member_id'] or '-'}"
            )


@groups.command("delete")
@_bootstrap_option
@click.argument("group_ids", nargs=-1, required=True)
def groups_delete(bootstrap: str, group_ids: tuple[str, ...]) -> None:
    """Delete empty groups and their committed offsets."""
    from kbroker.tools import groups as tool
    from kbroker.tools.client import BrokerClient

    try:
        with BrokerClient(bootstrap) as client:
            results = tool.delete_groups(client, list(group_ids))
    except _tool_errors() as exc:
        raise click.ClickException(str(exc)) from None
    failed = False
    for group, error in results.items():
        click.echo(f"{group}: {'deleted' if error is None else error}")
        failed |= error is not None
    if failed:
        sys.exit(1)


@groups.command("import-zk")
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
    from kbroker.coordinator.zk_import import import_offsets, read_zk_offsets
    from kbroker.tools.client import BrokerClient

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
