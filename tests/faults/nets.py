"""What the fault tests share: fresh networks on subnets no parallel run uses, and a look
for anything a network left behind."""

from __future__ import annotations

import subprocess
import uuid

from bench.faults import net
from bench.faults.net import Network


def enter_network(nodes: list[str], attempts: int = 20) -> Network:
    """An entered network with a unique run name (tests use ``kbt``, the harness ``kbf``)
    on a random subnet from 100 to 249, another one while the subnet is in use."""
    for _ in range(attempts):
        hex5 = uuid.uuid4().hex[:5]
        nw = Network(f"kbt{hex5}", nodes, subnet=100 + int(hex5, 16) % 150)
        try:
            return nw.__enter__()
        except net.SubnetInUse:
            continue
    raise RuntimeError(f"no free subnet in {attempts} attempts")


def leftovers(name: str) -> list[str]:
    """Namespaces, links and root routes of run ``name`` still there, and the range
    blackhole if it stayed without any network needing it."""
    found = [f"netns {ns}" for ns in net._namespaces() if ns.startswith(name)]
    found += [f"link {link}" for link in net._links() if link.startswith(name)]
    # The range blackhole may stay only while another network (a parallel test run)
    # still routes part of the range; the lock keeps the two consistent.
    with net._range_lock():
        routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, timeout=10)
        lines = routes.stdout.splitlines()
        found += [f"route {line}" for line in lines if name in line]
        if not net._range_routes():
            found += [f"route {line}" for line in lines if net.RANGE in line]
    return found
