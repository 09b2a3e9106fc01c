"""bench.ports: ports below the ephemeral range, a band per pytest-xdist worker."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bench import ports


def test_ports_come_from_below_the_ephemeral_range_in_turn() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    got = [ports.free_port() for _ in range(20)]
    assert all(1024 <= p < low for p in got)
    assert len(set(got)) == len(got)


def test_each_worker_has_a_band_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    bands = []
    for worker in ("", "gw0", "gw1", "gw7"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        bands.append(set(ports._port_band()))
    for i, a in enumerate(bands):
        for b in bands[i + 1 :]:
            assert not a & b


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    held = socket.socket()
    try:
        port = ports.free_port()
        held.bind(("127.0.0.1", port))
        monkeypatch.setattr(ports, "_next_port", port)
        assert ports.free_port() != port
    finally:
        held.close()
