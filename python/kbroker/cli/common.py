"""What every cluster command shares: the connection options (bootstrap servers,
profile, Kafka client settings for TLS/SASL, timeout) and --json declared once, the connection
they lead to, and the printing of tables, JSON and errors.

The admin commands speak only the Kafka protocol (versions negotiated with ApiVersions), so
they work against any Kafka-compatible cluster. The tools in kbroker.tools return plain data;
--json prints it as is (the field names are the stable, documented output), otherwise it is
shown as aligned tables.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kbroker.config import ConfigError, load_properties

if TYPE_CHECKING:
    from kbroker.security.client import ClientSecurity
    from kbroker.tools.cluster import Cluster


def split_setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="--set")
    return name.strip(), value.strip()


def admin_options(f: Any) -> Any:
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


def connection(bootstrap: str | None, timeout: float) -> tuple[str, float, ClientSecurity]:
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


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
# --validate-only of the commands that change settings (config set/delete, quota set).
validate_change_option = click.option(
    "--validate-only", is_flag=True, help="Only check the change; apply nothing."
)


@contextmanager
def connect(bootstrap: str | None, timeout: float) -> Iterator[Cluster]:
    """A connected cluster; a failure to reach it or a broker error becomes one line."""
    from kbroker.tools.client import ClientError
    from kbroker.tools.cluster import Cluster

    bootstrap, timeout, security = connection(bootstrap, timeout)
    try:
        with Cluster(bootstrap, timeout, security) as cluster:
            yield cluster
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


def echo_json(data: object) -> None:
    click.echo(json.dumps(data, indent=1))


def echo_table(headers: list[str], rows: list[list[object]]) -> None:
    from kbroker.tools.output import table

    for line in table(headers, rows):
        click.echo(line)


def fail_if(errors: list[str]) -> None:
    """Print each error on stderr and exit 1 if there are any."""
    for error in errors:
        click.echo(f"Error: {error}", err=True)
    if errors:
        sys.exit(1)


def echo_unreachable(unreachable: dict[int, str], what: str) -> None:
    """One line on stderr per broker that could not be reached: its id, what was not read
    because of it, and why."""
    for node, why in sorted(unreachable.items()):
        click.echo(f"Note: broker {node} could not be reached, {what}: {why}", err=True)


def key_values(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for text in pairs:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint=option)
        out[name.strip()] = value.strip()
    return out


def partition_specs(specs: tuple[str, ...]) -> list[tuple[str, list[int] | None]]:
    from kbroker.tools.offsets import parse_partitions

    try:
        return [parse_partitions(s) for s in specs]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC[:PARTITION,...]") from None
