"""bench.faults.net with real traffic: a TCP (and UDP) server in every node's namespace,
probes from every namespace and from the root namespace, before, during and after each
kind of fault; and nothing left behind afterwards, also after an exception or a crash."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bench.faults import net
from bench.faults.net import Network

from tests.faults.nets import enter_network, leftovers

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(net.available() is not None, reason=str(net.available())),
]

PORT = 7411
CONNECT_TIMEOUT = 1.0
NODES = ["zk1", "zk2", "b1", "b2", "b3"]

# Runs inside a node's namespace: accepts TCP connections (and closes them), appends every
# UDP datagram to a file; exits by itself after a while should the test lose it.
SERVER = """
import signal, socket, sys, threading
signal.alarm(60)
port, log = int(sys.argv[1]), sys.argv[2]
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", port)); tcp.listen(64)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", port))
def datagrams():
    while True:
        data, _ = udp.recvfrom(1024)
        with open(log, "ab") as f:
            f.write(data + b"\\n")
threading.Thread(target=datagrams, daemon=True).start()
print("ready", flush=True)
while True:
    conn, _ = tcp.accept(); conn.close()
"""

# Connects to every target at once, each with a short timeout; prints {target: connected}.
PROBE = """
import json, socket, sys, threading
timeout, port, targets = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
result = {}
def probe(address):
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        result[address] = True
    except OSError:
        result[address] = False
threads = [threading.Thread(target=probe, args=(a,)) for a in targets]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(result))
"""

# Sends one UDP datagram.
SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(sys.argv[3].encode(), (sys.argv[1], int(sys.argv[2])))
except OSError as e:
    print(e)
"""

ROOT = "root"
Matrix = dict[tuple[str, str], bool]


@contextlib.contextmanager
def servers(network: Network, tmp_path: Path) -> Iterator[None]:
    procs = []
    try:
        for node in network.nodes:
            log = tmp_path / f"udp-{node}.log"
            cmd = [*network.exec_prefix(node), sys.executable, "-c", SERVER, str(PORT), str(log)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def matrix(network: Network) -> Matrix:
    """Whether each source (every node, and ROOT) can open a TCP connection to each node."""
    sources = [*network.nodes, ROOT]
    procs = {}
    for src in sources:
        prefix = [] if src == ROOT else network.exec_prefix(src)
        targets = [network.address(n) for n in network.nodes if n != src]
        cmd = [*prefix, sys.executable, "-c", PROBE, str(CONNECT_TIMEOUT), str(PORT), *targets]
        procs[src] = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    by_address = {network.address(n): n for n in network.nodes}
    result: Matrix = {}
    for src, proc in procs.items():
        out, _ = proc.communicate(timeout=CONNECT_TIMEOUT + 10)
        for address, ok in json.loads(out).items():
            result[(src, by_address[address])] = ok
    return result


def expected(network: Network, blocked: Callable[[str, str], bool]) -> Matrix:
    return {
        (src, dst): not blocked(src, dst)
        for src in [*network.nodes, ROOT]
        for dst in network.nodes
        if src != dst
    }


def differences(got: Matrix, want: Matrix) -> list[str]:
    return [
        f"{src} -> {dst}: {'connects' if got[k] else 'blocked'}, expected "
        f"{'connects' if want[k] else 'blocked'}"
        for k in sorted(want)
        for src, dst in [k]
        if got.get(k) != want[k]
    ]


def assert_matrix(network: Network, blocked: Callable[[str, str], bool]) -> None:
    want = expected(network, blocked)
    assert differences(matrix(network), want) == []


def assert_healed(network: Network, within: float = 8.0) -> None:
    """Everyone reaches everyone again (ARP and bridge ports may take a moment)."""
    want = expected(network, lambda _s, _d: False)
    deadline = time.monotonic() + within
    while True:
        diff = differences(matrix(network), want)
        if not diff or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert diff == []
    assert network.faults() == []


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Network]:
    nw = enter_network(NODES)
    try:
        with nw, servers(nw, tmp_path):
            assert_healed(nw)
            yield nw
    finally:
        assert leftovers(nw.name) == []


def test_names_addresses_and_lengths() -> None:
    nw = Network("kbf3a", ["zk1", "b1"], subnet=7)
    assert nw.address("zk1") == "10.213.7.10"
    assert nw.address("b1") == "10.213.7.11"
    assert nw.namespace("b1") == "kbf3a-b1"
    assert nw.exec_prefix("b1") == ["ip", "netns", "exec", "kbf3a-b1"]
    with pytest.raises(ValueError, match="15"):
        Network("kbfverylong", ["broker1"])
    with pytest.raises(ValueError):
        Network("kbf3a", ["br"])
    with pytest.raises(ValueError):
        Network("kbf3a", ["b1", "b1"])
    with pytest.raises(KeyError):
        nw.address("b9")


def test_isolate(network: Network) -> None:
    network.isolate("b1")
    network.isolate("b1")  # idempotent
    assert network.faults() == ["isolate b1"]
    assert_matrix(network, lambda s, d: "b1" in (s, d))
    network.heal()
    assert_healed(network)


@pytest.mark.parametrize("how", ["drop", "blackhole"])
def test_cut_both_ways(network: Network, how: str) -> None:
    network.cut("b1", "zk2", how=how)
    network.cut("b1", "zk2", how=how)
    assert network.faults() == [f"cut b1 -> zk2 ({how})", f"cut zk2 -> b1 ({how})"]
    assert_matrix(network, lambda s, d: {s, d} == {"b1", "zk2"})
    network.heal()
    assert_healed(network)


def test_cut_one_way(network: Network, tmp_path: Path) -> None:
    network.cut("b1", "b2", one_way=True)
    assert network.faults() == ["cut b1 -> b2 (drop)"]
    # TCP fails both ways: b2's SYN reaches b1, but b1's SYN-ACK is lost.
    assert_matrix(network, lambda s, d: {s, d} == {"b1", "b2"})

    # Datagrams show the direction: b2 -> b1 arrives, b1 -> b2 does not.
    def send(src: str, dst: str, text: str) -> None:
        cmd = [*network.exec_prefix(src), sys.executable, "-c", SEND]
        cmd += [network.address(dst), str(PORT), text]
        subprocess.run(cmd, check=True, timeout=10)

    def received(node: str) -> list[str]:
        log = tmp_path / f"udp-{node}.log"
        return log.read_text().split() if log.exists() else []

    send("b2", "b1", "from-b2")
    send("b1", "b2", "from-b1")
    send("b1", "b3", "b1-to-b3")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (received("b1") and received("b3")):
        time.sleep(0.05)
    time.sleep(0.3)  # time for the lost one to have arrived, were it not lost
    assert received("b1") == ["from-b2"]
    assert received("b3") == ["b1-to-b3"]
    assert received("b2") == []

    network.heal()
    assert_healed(network)
    send("b1", "b2", "after-heal")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not received("b2"):
        time.sleep(0.05)
    assert received("b2") == ["after-heal"]


def test_partition(network: Network) -> None:
    groups = [["b1", "zk1"], ["b2", "b3", "zk2"]]
    network.partition(groups)
    network.partition(groups)
    side = {n: i for i, g in enumerate(groups) for n in g}
    assert len(network.faults()) == 2 * 2 * 3
    # Nodes across the line are cut both ways; root-namespace clients reach everyone.
    assert_matrix(network, lambda s, d: s != ROOT and side[s] != side[d])
    network.heal()
    assert_healed(network)


def test_cut_from_clients(network: Network) -> None:
    network.cut_from_clients("b2")
    assert network.faults() == ["cut clients -> b2 (drop)"]
    assert_matrix(network, lambda s, d: (s, d) == (ROOT, "b2"))
    network.heal()
    assert_healed(network)


def test_faults_combine_and_heal_at_once(network: Network) -> None:
    network.isolate("zk1")
    network.cut("b1", "b2", how="blackhole")
    network.cut("b1", "b2")  # switches the way of cutting
    network.cut_from_clients("b3", how="blackhole")
    assert network.faults() == [
        "isolate zk1",
        "cut b1 -> b2 (drop)",
        "cut b2 -> b1 (drop)",
        "cut clients -> b3 (blackhole)",
    ]
    assert_matrix(
        network,
        lambda s, d: "zk1" in (s, d) or {s, d} == {"b1", "b2"} or (s, d) == (ROOT, "b3"),
    )
    network.heal()
    assert_healed(network)


def test_exception_inside_with_tears_down() -> None:
    nw = enter_network(["b1", "b2"])
    with pytest.raises(RuntimeError, match="boom"), nw:
        nw.isolate("b1")
        nw.cut("b1", "b2")
        assert leftovers(nw.name) != []
        raise RuntimeError("boom")
    assert leftovers(nw.name) == []


def test_subnet_in_use_is_refused_and_left_alone() -> None:
    with enter_network(["b1"]) as nw:
        other = nw.name.replace("kbt", "kbu")
        with pytest.raises(net.SubnetInUse, match="already routed"):
            Network(other, ["b1"], nw.subnet).__enter__()
        # The refused network removed nothing of the live one, and made nothing.
        assert net._namespaces().count(nw.namespace("b1")) == 1
        assert leftovers(other) == []
    assert leftovers(nw.name) == []


def test_sweep_removes_a_crashed_run() -> None:
    crashed = enter_network(["zk1", "b1", "b2"])  # and never __exit__: the run "crashed"
    name, subnet = crashed.name, crashed.subnet
    crashed.isolate("b1")
    crashed.cut("zk1", "b2")
    # A process the crashed run left in a namespace (its broker, say).
    orphan = subprocess.Popen([*crashed.exec_prefix("b1"), "sleep", "300"])
    assert len(leftovers(name)) >= 7
    removed = net.sweep(name)
    assert sorted(r for r in removed if not r.startswith("route")) == sorted(
        [f"link {name}-{n}" for n in ["zk1", "b1", "b2"]]
        + [f"link {name}-br"]
        + [f"netns {name}-{n}" for n in ["zk1", "b1", "b2"]]
        + [f"process {orphan.pid} in {name}-b1"]
    )
    assert orphan.wait(10) == -9
    assert leftovers(name) == []
    assert net.sweep(name) == []
    # A new run with the same name can start (on the same subnet, unless a parallel
    # test run took it meanwhile).
    try:
        with Network(name, ["zk1", "b1", "b2"], subnet):
            pass
    except net.SubnetInUse:
        pass
    assert leftovers(name) == []


def test_sweep_refuses_an_empty_prefix() -> None:
    with pytest.raises(ValueError):
        net.sweep("")
