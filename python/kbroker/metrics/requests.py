"""Per-request timing, split as Kafka splits it, and the request log.

The dispatcher makes a `RequestTiming` per request when metrics are on or
the ``kbroker.request`` logger is at DEBUG (nothing otherwise). The
timestamps are monotonic nanoseconds:

- ``received``: the request's last bytes were read from the socket;
- ``dispatched``: its handler started;
- ``local_done``: its handler returned (and, answered at once, was encoded);
- ``completed``: its response was ready (later than ``local_done`` when it
  waited: acks=all, a long-poll fetch, a rebalance);
- `sent` is called by the connection with when the write of the response
  started and ended (it may wait behind earlier responses of the same
  connection, which are written in order).

Request log lines (one per request, after its response is written) look like
Kafka's ``kafka.request.logger`` lines: the request, its client, and the
times of each phase. Turn them on at runtime with IncrementalAlterConfigs on
the BROKER_LOGGER resource (``kbroker.request=DEBUG``).
"""

from __future__ import annotations

import logging
import time

from kbroker.metrics.core import BrokerMetrics, RequestStats

request_log = logging.getLogger("kbroker.request")


def request_logging() -> bool:
    return request_log.isEnabledFor(logging.DEBUG)


class RequestTiming:
    __slots__ = (
        "client_id",
        "completed",
        "correlation_id",
        "dispatched",
        "listener",
        "local_done",
        "name",
        "peer",
        "principal",
        "received",
        "stats",
        "version",
    )

    def __init__(
        self,
        stats: RequestStats | None,
        name: str,
        version: int,
        correlation_id: int,
        received_ns: int,
        dispatched_ns: int,
    ) -> None:
        self.stats = stats
        self.name = name
        self.version = version
        self.correlation_id = correlation_id
        self.received = received_ns
        self.dispatched = dispatched_ns
        self.local_done = 0
        self.completed = 0
        self.client_id = ""
        self.peer = ""
        self.listener = ""
        self.principal = ""

    def handled(self) -> None:
        """The handler returned (its answer may still be on its way)."""
        self.local_done = time.monotonic_ns()

    def ready(self) -> None:
        """The response is ready to be written."""
        self.completed = time.monotonic_ns()

    def sent(self, start_ns: int, end_ns: int) -> None:
        """The response was written (``start_ns == end_ns`` when there was none)."""
        local_done = self.local_done or end_ns
        completed = self.completed or local_done
        queue = self.dispatched - self.received
        local = local_done - self.dispatched
        remote = completed - local_done
        response_queue = start_ns - completed
        send = end_ns - start_ns
        total = end_ns - self.received
        stats = self.stats
        if stats is not None:
            p = stats.phases
            p[0].observe_ns(queue)
            p[1].observe_ns(local)
            p[2].observe_ns(remote)
            p[3].observe_ns(response_queue)
            p[4].observe_ns(send)
            stats.total.observe_ns(total)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug(
                "completed request %s v%d correlation_id=%d client_id=%s from %s listener=%s "
                "principal=%s total_ms=%.3f request_queue_ms=%.3f local_ms=%.3f remote_ms=%.3f "
                "response_queue_ms=%.3f send_ms=%.3f",
                self.name,
                self.version,
                self.correlation_id,
                self.client_id,
                self.peer,
                self.listener,
                self.principal,
                total / 1e6,
                queue / 1e6,
                local / 1e6,
                remote / 1e6,
                response_queue / 1e6,
                send / 1e6,
            )


def new_timing(
    metrics: BrokerMetrics | None,
    name: str,
    version: int,
    correlation_id: int,
    received_ns: int,
    dispatched_ns: int,
) -> RequestTiming | None:
    """A timing for a request, or None when neither metrics nor the request log want one."""
    logging_on = request_logging()
    if metrics is None and not logging_on:
        return None
    stats = metrics.request_stats(name) if metrics is not None else None
    return RequestTiming(stats, name, version, correlation_id, received_ns, dispatched_ns)
