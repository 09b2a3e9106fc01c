"""What the pipeline jobs share: duration strings, running a query to its end, readable errors.

`parse_duration("10s")` -> ``"10 seconds"`` (Spark's interval form) or a
`PipelineError`; `run_query()` waits for a streaming query (to the end of the
available data, or until SIGTERM/SIGINT stops it gracefully); `spark_error()`
turns a Spark/Py4J exception into one readable line for the command line.
"""

from __future__ import annotations

import re
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from kbroker.spark.kafka import PipelineError

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

_DURATION = re.compile(r"^\s*(\d+)\s*([A-Za-z]+)\s*$")
_UNITS = {
    "ms": "milliseconds",
    "millisecond": "milliseconds",
    "milliseconds": "milliseconds",
    "s": "seconds",
    "sec": "seconds",
    "second": "seconds",
    "seconds": "seconds",
    "m": "minutes",
    "min": "minutes",
    "minute": "minutes",
    "minutes": "minutes",
    "h": "hours",
    "hour": "hours",
    "hours": "hours",
    "d": "days",
    "day": "days",
    "days": "days",
}
_MS = {
    "milliseconds": 1,
    "seconds": 1000,
    "minutes": 60_000,
    "hours": 3_600_000,
    "days": 86_400_000,
}


def parse_duration(text: str, what: str = "duration", *, allow_zero: bool = False) -> str:
    """``10s``, ``500ms``, ``5m``, ``1h``, ``1d`` or ``10 seconds`` -> ``"10 seconds"``."""
    m = _DURATION.match(text)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise PipelineError(
            f"bad {what} {text!r}: expected a number and a unit, e.g. 10s, 500ms, 5m, 1h, 1d"
        )
    amount = int(m.group(1))
    if amount == 0 and not allow_zero:
        raise PipelineError(f"bad {what} {text!r}: must be more than zero")
    return f"{amount} {unit}"


def duration_ms(spark_interval: str) -> int:
    """``"10 seconds"`` (as `parse_duration` returns) -> 10000."""
    amount, unit = spark_interval.split()
    return int(amount) * _MS[unit]


def spark_error(exc: BaseException) -> str:
    """The first meaningful line of a Spark error, without JVM stack traces."""
    text = getattr(exc, "desc", None) or str(exc)
    for line in str(text).splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "JVM stacktrace", "Traceback")):
            return line[:1000]
    return type(exc).__name__


def run_query(query: StreamingQuery, *, until_stopped: bool) -> None:
    """Waits for ``query``: until it ends by itself (an availableNow trigger), or, with
    ``until_stopped``, until SIGTERM or SIGINT, which stop it between batches.
    A failed query raises `PipelineError`."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - pyspark always brings both
        raise PipelineError("PySpark is not installed") from None

    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if until_stopped and threading.current_thread() is threading.main_thread():

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        while not query.awaitTermination(1):
            if stop.is_set():
                query.stop()
                break
        failure = query.exception()
        if failure is not None:
            raise PipelineError(f"query {query.name or query.id} failed: {spark_error(failure)}")
    except (PySparkException, Py4JError) as exc:
        raise PipelineError(f"query {query.name or query.id} failed: {spark_error(exc)}") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def pipeline_exceptions() -> tuple[type[BaseException], ...]:
    """What a pipeline command reports as a one-line error: kbroker's own refusals and
    Spark's failures (a bad master URL, a JVM that would not start, a failed query)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from kbroker.spark.jars import JarsError
    from kbroker.spark.session import SessionError

    return PipelineError, JarsError, SessionError, PySparkException, Py4JError


def failure_message(exc: BaseException) -> str:
    from kbroker.spark.jars import JarsError
    from kbroker.spark.session import SessionError

    if isinstance(exc, PipelineError | JarsError | SessionError):
        return str(exc)
    return f"Spark failed: {spark_error(exc)}"
