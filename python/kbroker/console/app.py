"""The console's web application (Starlette): pages, write endpoints and their guards.

Every page is rendered on the server from a Jinja2 template with autoescaping on, so a
name or a record's bytes always show as text; a Content-Security-Policy allows only this
package's own script and style besides. A page asked with ``?partial=1`` is only its live
part, which the page script fetches again every ``refresh`` seconds.

Each cluster call runs in a worker thread with its own `Cluster` connection (the tools
are blocking), at most `MAX_CALLS` at once, bounded by the client timeout on every socket
and by `call_deadline` as a whole. Failures become pages: 404 for a topic, partition or
group the cluster does not have, 400 for values the console cannot use, 403 for a write
in read-only mode or without the page's CSRF token, 502/503/504 when the cluster answers
an error, cannot be reached or does not answer in time; never a traceback.

While it runs the console samples every group's lag every ``lag_sample`` seconds (and
at each view of a group's page) into a `LagHistory` of the last hour, which ``/api/lag``
gives as JSON to the group page's chart (uPlot, vendored under static/vendor); given
the brokers' ``/metrics`` URLs, it scrapes them every ``refresh`` seconds for the
throughput and latency columns of the cluster and topics pages (`BrokerMetrics`).

Writes (create, delete, add partitions, alter configs, reset a group's offsets) exist
only with ``allow_writes``, are POST-only, carry the console's CSRF token, and are done
in two steps: the first validates (the cluster's validate-only mode, or the reset's dry
run) and shows what will happen; the second, the confirmation, does it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from kbroker.console import views
from kbroker.console.history import LagHistory
from kbroker.console.metrics import BrokerMetrics
from kbroker.console.show import FORMATS
from kbroker.security.client import ClientSecurity
from kbroker.tools.client import ClientError
from kbroker.tools.cluster import Cluster
from kbroker.tools.group_offsets import ResetSpec, parse_duration
from kbroker.tools.offsets import parse_time

HERE = Path(__file__).resolve().parent
MAX_CALLS = 8
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    timeout: float
    security: ClientSecurity
    allow_writes: bool = False
    refresh: float = 5.0
    # Bytes of a key, value or header value shown before it is cut.
    max_field_bytes: int = 4096
    # Host names the pages answer to (None: any). A console on loopback answers only to
    # loopback names, so another site's page cannot reach it under its own name.
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_NAMES
    # Seconds between two samples of every group's lag for the lag charts (0: only when a
    # group's page is shown), and how many groups are sampled.
    lag_sample: float = 30.0
    lag_sample_groups: int = 100
    # The brokers' Prometheus /metrics URLs (throughput and latency per broker).
    metrics_urls: tuple[str, ...] = ()

    @property
    def call_deadline(self) -> float:
        """Seconds one page's cluster calls may take in all."""
        return self.timeout * 4 + 5


class PageError(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


class HostCheck:
    """Answers 400 to a request whose Host header is not one of ``allowed`` (DNS
    rebinding: another site's name pointed at this address)."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...] | None) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.allowed is not None:
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in self.allowed:
                response = Response(
                    "This console answers only to its own address.\n", 400, media_type="text/plain"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Console:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.csrf_token = secrets.token_urlsafe(32)
        self.calls = asyncio.Semaphore(MAX_CALLS)
        self.lag_history = LagHistory()
        self.metrics = BrokerMetrics(settings.metrics_urls, settings.timeout)
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )

    # -- plumbing --------------------------------------------------------------------

    async def ask(self, work: Callable[..., Any], *args: Any) -> Any:
        """``work(cluster, *args)`` in a worker thread, on a connection of its own."""

        def run() -> Any:
            s = self.settings
            with Cluster(s.bootstrap, s.timeout, s.security) as cluster:
                return work(cluster, *args)

        async with self.calls:
            try:
                return await asyncio.wait_for(asyncio.to_thread(run), self.settings.call_deadline)
            except TimeoutError:
                raise PageError(
                    504,
                    "The cluster did not answer in time",
                    f"No answer from {self.settings.bootstrap} within "
                    f"{self.settings.call_deadline:g} seconds.",
                ) from None

    def render(self, request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        partial = request.query_params.get("partial") == "1"
        html = self.templates.get_template(name).render(
            partial=partial,
            settings=self.settings,
            csrf=self.csrf_token,
            request=request,
            **values,
        )
        return HTMLResponse(html, status)

    def error_page(self, request: Request, error: PageError) -> HTMLResponse:
        return self.render(
            request, "error.html", error.status, title=error.title, message=error.message
        )

    def guarded(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` with every failure turned into a clear page."""

        async def page(request: Request) -> Response:
            try:
                return await handler(request)
            except PageError as exc:
                return self.error_page(request, exc)
            except views.NotFound as exc:
                return self.error_page(request, PageError(404, "Not found", str(exc)))
            except views.BadInput as exc:
                return self.error_page(request, PageError(400, "Bad request", str(exc)))
            except views.Forbidden as exc:
                return self.error_page(request, PageError(403, "Not allowed", str(exc)))
            except views.Refused as exc:
                return self.error_page(request, PageError(409, "The cluster refused", str(exc)))
            except ClientError as exc:
                return self.error_page(request, _cluster_error(str(exc)))

        return page

    async def write_form(self, request: Request) -> FormData:
        """The form of a write request, once the console allows writes and the request
        carries its CSRF token (else a 403 page)."""
        if not self.settings.allow_writes:
            raise PageError(
                403,
                "Read-only console",
                "This console is read-only: start it with --allow-writes to change the cluster.",
            )
        form = await request.form()
        token = form.get("csrf")
        if not isinstance(token, str) or not hmac.compare_digest(
            token.encode(), self.csrf_token.encode()
        ):
            raise PageError(
                403,
                "Missing or wrong form token",
                "This form did not come from this console's page (CSRF token missing or "
                "wrong); nothing was changed.",
            )
        return form

    # -- pages -----------------------------------------------------------------------

    def metrics_view(self) -> dict[str, Any] | None:
        return self.metrics.view() if self.settings.metrics_urls else None

    async def cluster_page(self, request: Request) -> Response:
        data = await self.ask(views.overview)
        return self.render(
            request, "cluster.html", view="cluster", cluster=data, metrics=self.metrics_view()
        )

    async def topics_page(self, request: Request) -> Response:
        search = request.query_params.get("q", "")
        data = await self.ask(views.topic_list, search)
        return self.render(
            request,
            "topics.html",
            view="topics",
            topics=data["topics"],
            topic_notes=data["notes"],
            search=search,
            metrics=self.metrics_view(),
        )

    async def scrape_metrics(self) -> None:
        """Every `refresh` seconds (at least one), each broker's /metrics."""
        while True:
            try:
                await asyncio.to_thread(self.metrics.scrape_all)
            except Exception as exc:  # the scraper outlives any one failure
                log.warning("cannot scrape the brokers' metrics: %s", exc)
            await asyncio.sleep(max(1.0, self.settings.refresh))

    async def topic_page(self, request: Request) -> Response:
        name = request.path_params["name"]
        all_configs = request.query_params.get("all") == "1"
        data = await self.ask(views.topic, name, all_configs)
        return self.render(
            request, "topic.html", view="topics", topic=data, all_configs=all_configs
        )

    async def records_page(self, request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        partition = _int(q.get("partition", "0"), "partition", 0)
        count = _int(q.get("count", "20"), "count", 1, views.MAX_RECORDS)
        start = q.get("from", "end").strip() or "end"
        fmt = q.get("format", "auto")
        if fmt not in FORMATS:
            raise views.BadInput(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        limit = self.settings.max_field_bytes
        data = await self.ask(views.browse, name, partition, start, count, fmt, limit)
        return self.render(
            request,
            "records.html",
            view="topics",
            data=data,
            shown=data["records"],
            start=start,
            count=count,
            format=fmt,
            formats=FORMATS,
        )

    async def groups_page(self, request: Request) -> Response:
        data = await self.ask(views.group_list)
        return self.render(request, "groups.html", view="groups", data=data)

    async def group_page(self, request: Request) -> Response:
        name = request.path_params["name"]
        data = await self.ask(views.group, name)
        self.lag_history.record(name, time.time(), data["total_lag"])
        return self.render(request, "group.html", view="groups", group=data)

    async def lag_points(self, request: Request) -> Response:
        """A group's lag samples of the last hour as JSON: {"group", "points": [[epoch
        seconds, total lag], ...]}."""
        name = request.query_params.get("group", "")
        points = self.lag_history.points(name, time.time())
        return JSONResponse({"group": name, "points": points})

    async def sample_lags(self) -> None:
        """Every `lag_sample` seconds, the lag of the cluster's groups into the history; a
        cluster that cannot be asked now is asked again next time."""
        while True:
            try:
                lags = await self.ask(views.group_lags, self.settings.lag_sample_groups)
            except Exception as exc:  # the sampler outlives any one failure
                log.warning("cannot sample the groups' lag: %s", exc)
            else:
                now = time.time()
                for group, lag in lags.items():
                    self.lag_history.record(group, now, lag)
            await asyncio.sleep(self.settings.lag_sample)

    # -- writes ----------------------------------------------------------------------

    def confirm(
        self, request: Request, form: FormData, what: str, detail: Any = None
    ) -> HTMLResponse:
        """The confirmation step: what will be done, and a form that does it."""
        fields = [(k, v) for k, v in form.multi_items() if k not in ("csrf", "confirmed")]
        return self.render(
            request,
            "confirm.html",
            view="",
            what=what,
            detail=detail,
            action=request.url.path,
            fields=fields,
        )

    def done(self, request: Request, what: str, link: str, detail: Any = None) -> HTMLResponse:
        return self.render(request, "done.html", view="", what=what, link=link, detail=detail)

    async def create_topic(self, request: Request) -> Response:
        form = await self.write_form(request)
        name = _text(form, "name")
        partitions = _int(_text(form, "partitions", "1"), "partitions", 1, 100_000)
        rf_text = _text(form, "replication_factor", "")
        rf = _int(rf_text, "replication factor", 1, 100) if rf_text else None
        configs = _settings_lines(_text(form, "configs", ""))
        confirmed = form.get("confirmed") == "1"
        await self.ask(views.create_topic, name, partitions, rf, configs, not confirmed)
        if not confirmed:
            return self.confirm(
                request,
                form,
                f"Create topic {name!r} with {partitions} partition(s)"
                + (f", replication factor {rf}" if rf else "")
                + (f", configs {configs}" if configs else "")
                + "? The cluster validated it.",
            )
        return self.done(request, f"Created topic {name!r}.", "/topics/" + quote(name, safe=""))

    async def delete_topic(self, request: Request) -> Response:
        form = await self.write_form(request)
        name = request.path_params["name"]
        if form.get("confirmed") != "1":
            await self.ask(views.topic, name, False)  # NotFound before asking to confirm
            return self.confirm(
                request,
                form,
                f"Delete topic {name!r} and every record in it? This cannot be undone.",
            )
        await self.ask(views.delete_topic, name)
        return self.done(request, f"Deleted topic {name!r}.", "/topics")

    async def add_partitions(self, request: Request) -> Response:
        form = await self.write_form(request)
        name = request.path_params["name"]
        count = _int(_text(form, "count"), "partition count", 1, 100_000)
        confirmed = form.get("confirmed") == "1"
        await self.ask(views.add_partitions, name, count, not confirmed)
        if not confirmed:
            return self.confirm(
                request,
                form,
                f"Grow topic {name!r} to {count} partitions? Keys will map to other "
                "partitions from now on. The cluster validated it.",
            )
        return self.done(
            request, f"Topic {name!r} has {count} partitions.", "/topics/" + quote(name, safe="")
        )

    async def alter_config(self, request: Request) -> Response:
        form = await self.write_form(request)
        name = request.path_params["name"]
        set_values = _settings_lines(_text(form, "set", ""))
        delete = [n.strip() for n in _text(form, "delete", "").split(",") if n.strip()]
        if not set_values and not delete:
            raise views.BadInput("nothing to change: give NAME=VALUE lines or names to delete")
        confirmed = form.get("confirmed") == "1"
        await self.ask(views.alter_config, name, set_values, delete, not confirmed)
        what = ", ".join(
            [
                *(f"{k}={v}" for k, v in set_values.items()),
                *(f"{d} back to its default" for d in delete),
            ]
        )
        if not confirmed:
            return self.confirm(
                request, form, f"Change topic {name!r}: {what}? The cluster validated it."
            )
        return self.done(
            request, f"Changed topic {name!r}: {what}.", "/topics/" + quote(name, safe="")
        )

    async def reset_offsets(self, request: Request) -> Response:
        form = await self.write_form(request)
        name = _text(form, "group")
        topic_name = _text(form, "topic", "") or None
        to = _text(form, "to")
        value_text = _text(form, "value", "")
        if to == "earliest":
            spec = ResetSpec(to_earliest=True)
        elif to == "latest":
            spec = ResetSpec(to_latest=True)
        elif to == "offset":
            spec = ResetSpec(to_offset=_int(value_text, "offset", 0))
        elif to == "shift":
            spec = ResetSpec(shift_by=_int(value_text, "shift", -(2**62)))
        elif to == "current":
            spec = ResetSpec(to_current=True)
        elif to == "datetime":
            try:
                when = parse_time(value_text)
            except ValueError as exc:
                raise views.BadInput(str(exc)) from None
            if when < 0:
                raise views.BadInput(f"expected a date/time, got {value_text!r}")
            spec = ResetSpec(to_datetime=when)
        elif to == "duration":
            try:
                spec = ResetSpec(by_duration=parse_duration(value_text))
            except ValueError as exc:
                raise views.BadInput(str(exc)) from None
        else:
            raise views.BadInput(
                "reset to earliest, latest, current, offset, shift, datetime or duration; "
                f"got {to!r}"
            )
        confirmed = form.get("confirmed") == "1"
        plan = await self.ask(views.reset_offsets, name, topic_name, spec, confirmed)
        if not confirmed:
            return self.confirm(
                request,
                form,
                f"Commit these offsets for group {name!r} (dry run shown; the group must have "
                "no members)?",
                plan,
            )
        return self.done(
            request,
            f"Committed new offsets for group {name!r}.",
            "/groups/" + quote(name, safe=""),
            plan,
        )


def _cluster_error(message: str) -> PageError:
    """The page for a ClientError: the cluster unreachable, silent, or answering an error."""
    if message.startswith(("cannot connect", "cannot authenticate")):
        return PageError(503, "Cannot reach the cluster", message)
    if "failed: timed out" in message:  # a socket timeout under a request
        return PageError(504, "The cluster did not answer in time", message)
    return PageError(502, "The cluster answered an error", message)


def _text(form: FormData, field: str, default: str | None = None) -> str:
    value = form.get(field, default)
    if not isinstance(value, str) or (default is None and not value.strip()):
        raise views.BadInput(f"the form has no {field.replace('_', ' ')}")
    return value.strip()


def _int(text: str, what: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise views.BadInput(f"{what} must be a whole number, got {text!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low} to {high}" if high is not None else f"at least {low}"
        raise views.BadInput(f"{what} must be {bounds}, got {value}")
    return value


def _settings_lines(text: str) -> dict[str, str]:
    """NAME=VALUE per line (blank lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise views.BadInput(f"expected NAME=VALUE, got {line.strip()!r}")
        out[name.strip()] = value.strip()
    return out


def create_app(settings: Settings) -> ASGIApp:
    console = Console(settings)
    g = console.guarded
    routes = [
        Route("/", g(console.cluster_page)),
        Route("/topics", g(console.topics_page)),
        Route("/topics/{name}", g(console.topic_page)),
        Route("/topics/{name}/records", g(console.records_page)),
        Route("/groups", g(console.groups_page)),
        Route("/groups/{name:path}", g(console.group_page)),
        Route("/api/lag", console.lag_points),
        Route("/write/topic", g(console.create_topic), methods=["POST"]),
        Route("/topics/{name}/delete", g(console.delete_topic), methods=["POST"]),
        Route("/topics/{name}/partitions", g(console.add_partitions), methods=["POST"]),
        Route("/topics/{name}/config", g(console.alter_config), methods=["POST"]),
        Route("/write/reset-offsets", g(console.reset_offsets), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        titles = {404: "Not found", 405: "Method not allowed"}
        message = {
            404: "The console has no such page.",
            405: "This address takes no such request (writes are POST forms).",
        }.get(exc.status_code, str(exc.detail))
        return console.error_page(
            request, PageError(exc.status_code, titles.get(exc.status_code, "Error"), message)
        )

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("console page %s failed", request.url.path, exc_info=exc)
        return console.error_page(
            request,
            PageError(500, "The console failed", f"{type(exc).__name__}; see the console's log."),
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks = []
        if settings.lag_sample > 0:
            tasks.append(asyncio.create_task(console.sample_lags()))
        if settings.metrics_urls:
            tasks.append(asyncio.create_task(console.scrape_metrics()))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    return HostCheck(SecurityHeaders(app), settings.allowed_hosts)


class SecurityHeaders:
    """Adds the Content-Security-Policy and friends to every answer."""

    HEADERS: Mapping[bytes, bytes] = {
        b"content-security-policy": CSP.encode(),
        b"x-content-type-options": b"nosniff",
        b"referrer-policy": b"no-referrer",
        b"x-frame-options": b"DENY",
        b"cache-control": b"no-store",
    }

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.HEADERS.items()]
            await send(message)

        await self.app(scope, receive, with_headers)
