"""Loopback ports for the servers the tests and the benchmarks start."""

from __future__ import annotations

import os
import socket
from pathlib import Path

# The ports handed to the brokers, ZooKeepers and other servers the tests and benchmarks
# start come from below the kernel's ephemeral range. A port the kernel chose (bind to
# port 0) was free when chosen, but that range also serves every client connection's
# local port, so between the choice and the server's bind a connection could take it
# ("address already in use"). Each pytest-xdist worker takes a band of its own, so two
# workers never hand out the same port.
_PORT_BAND = 1500
_next_port: int | None = None


def _port_band() -> range:
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    top = ephemeral_low - index * _PORT_BAND
    if top - _PORT_BAND < 1024:
        raise RuntimeError(f"no port band for worker {worker!r} below {ephemeral_low}")
    return range(top - _PORT_BAND, top)


def free_port() -> int:
    """A loopback port nothing listens on (at the moment), from this process's band below
    the ephemeral range, never one this process handed out lately (the band's ports are
    taken in turn)."""
    global _next_port
    band = _port_band()
    if _next_port is None or _next_port not in band:
        _next_port = band.start + os.getpid() % len(band)
    for _ in range(len(band)):
        port, _next_port = _next_port, band.start + (_next_port + 1 - band.start) % len(band)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {band.start}-{band.stop - 1}")
