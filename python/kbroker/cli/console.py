"""``kbroker console``: serve the web console (kbroker.console) for a cluster.

The connection options are the admin commands' (`admin_options`), so TLS and SASL
settings given with --command-config or a profile apply and the cluster's ACLs decide
what the console may see and do. The web framework is the ``console`` extra; without it
the command says how to install it.
"""

from __future__ import annotations

import socket

import click

from kbroker.cli.common import admin_options, connection

CONSOLE_PACKAGES = ("starlette", "uvicorn", "jinja2", "multipart")


@click.command("console")
@admin_options
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Where the console listens (port 0: any free port; the URL is printed).",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Offer create, delete, add partitions, alter configs and offset resets "
    "(read-only without it).",
)
@click.option(
    "--refresh",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.2, max=3600),
    help="Seconds between two refreshes of an open page.",
)
@click.option(
    "--lag-sample",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds between two samples of every group's lag for the lag charts of the last "
    "hour (0: only while a group's page is open).",
)
@click.option(
    "--metrics",
    "metrics_urls",
    multiple=True,
    metavar="URL",
    help="A broker's Prometheus metrics (http://HOST:PORT/metrics of kbroker's "
    "metrics.listeners), for throughput and latency per broker; repeatable.",
)
def console_command(
    bootstrap: str | None,
    timeout: float,
    listen: str,
    allow_writes: bool,
    refresh: float,
    lag_sample: float,
    metrics_urls: tuple[str, ...],
) -> None:
    """Serve a web console for a Kafka-compatible cluster: brokers, topics, consumer
    groups and records, through the same admin code as the other commands."""
    try:
        import uvicorn

        from kbroker.console.app import LOOPBACK_NAMES, Settings, create_app
    except ImportError as exc:
        missing = exc.name or "a package"
        raise click.ClickException(
            f"kbroker console needs its web packages ({missing} is missing): "
            "pip install 'kbroker[console]'"
        ) from None
    from kbroker.tools.client import ClientError, split_host_port

    for url in metrics_urls:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(
                f"expected an http(s) URL, got {url!r}", param_hint="--metrics"
            )
    if 0 < lag_sample < 1:
        raise click.BadParameter("0 (off) or at least 1 second", param_hint="--lag-sample")
    address, timeout, security = connection(bootstrap, timeout)
    try:
        host, port = split_host_port(listen)
    except ClientError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(128)
    port = sock.getsockname()[1]
    on_loopback = host in LOOPBACK_NAMES or host.startswith("127.")
    settings = Settings(
        bootstrap=address,
        timeout=timeout,
        security=security,
        allow_writes=allow_writes,
        refresh=refresh,
        lag_sample=lag_sample,
        metrics_urls=metrics_urls,
        allowed_hosts=(*LOOPBACK_NAMES, host) if on_loopback else None,
    )
    shown_host = f"[{host}]" if family == socket.AF_INET6 else host
    mode = "writes allowed" if allow_writes else "read-only"
    click.echo(f"kbroker console for {address} ({mode}): http://{shown_host}:{port}/", err=False)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            log_level="warning",
            access_log=False,
            server_header=False,
            lifespan="on",
        )
    )
    server.run(sockets=[sock])
