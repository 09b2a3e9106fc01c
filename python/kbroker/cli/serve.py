"""`kbroker serve`: run a broker in the foreground from flags, --set and a properties file."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kbroker.cli.common import (
    split_setting,
)
from kbroker.config import BrokerConfig, ConfigError, UnsupportedSetting, load_properties
from kbroker.security.listeners import ListenerSet


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {text!r}", param_hint=what)
    return host.strip("[]") or "0.0.0.0", int(port)


@click.command()
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
        pairs.extend(split_setting(s) for s in settings)
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
