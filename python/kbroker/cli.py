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
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), help="Data directory (log.dirs).")
@click.option("--listen", default=None, help="HOST:PORT to listen on [127.0.0.1:9092].")
@click.option("--advertise", default=None, help="HOST:PORT clients are told to use [the listen address].")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), help="A Kafka-style properties file.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Any broker setting (repeatable).")
@click.option("--zookeeper", default=None, help="ZooKeeper connect string; without it the node runs alone.")
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
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
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--print-data", is_flag=True, help="Also print each record's key, value and headers.")
@click.option("--max-decompressed", default=64 << 20, show_default=True, help="Bound on a batch's decompressed size.")
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


if __name__ == "__main__":
    main()
