"""Operating the broker: Prometheus metrics, health and readiness, systemd, log formats.

A low layer: the broker, the network server, the replica manager, the logs
and the handlers call its hooks (`BrokerMetrics`, `RequestTiming`); it
imports nothing of theirs. The daemon composes it: `build_registry` puts
the broker's accumulators, its state (`StateCollector` over a `BrokerView`)
and prometheus_client's process metrics (CPU, memory, open files) in one
registry that `MetricsServer` serves.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from kbroker.metrics.core import AccumulatorCollector, BrokerMetrics
from kbroker.metrics.state import BrokerView, GroupLag, StateCollector

__all__ = ["BrokerMetrics", "BrokerView", "GroupLag", "build_registry"]

# Counters without their *_created series (one per series would double the scrape).
disable_created_metrics()  # type: ignore[no-untyped-call]


def build_registry(metrics: BrokerMetrics, view: BrokerView) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(AccumulatorCollector(metrics))
    registry.register(StateCollector(view))
    return registry
