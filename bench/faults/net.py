"""A cluster's network on one machine: one network namespace per node, and faults on it.

Every node gets its own namespace with one veth pair into a bridge in the root
namespace; the bridge holds the subnet's ``.1`` address, so clients running in
the root namespace reach every node. Nodes get ``10.213.<subnet>.<10+i>/24``
(their order in ``nodes``). Nodes have no default route: they reach the subnet
and nothing else, so nothing from inside a namespace can leave the machine.

Names, for a run called ``name`` (e.g. ``kbf3a``) and a node ``b1``:

- namespace ``kbf3a-b1``;
- the root side of its veth pair ``kbf3a-b1`` (a link name, not a namespace
  name: the two do not clash), the namespace side ``eth0``;
- the bridge ``kbf3a-br`` (so no node may be called ``br``).

Link names are at most 15 characters (``IFNAMSIZ``); the constructor checks
``len(name) + 1 + len(node) <= 15``.

While a ``Network`` exists the root namespace holds ``blackhole
10.213.0.0/16``: a bridge's own /24 route is more specific and wins while the
bridge exists; once it is gone, packets a client still sends to a node die
here instead of following the default route off the machine. Several networks
(different subnets) may exist at once; the last one to go removes the route.

Faults (each idempotent, all undone by ``heal()``):

- ``isolate(node)``: the root side of the node's veth is set down; the node's
  side loses its carrier. Nothing goes in or out: other nodes and clients time
  out (or get "no route to host" once ARP gives up).
- ``cut(a, b)``: ``a``'s packets to ``b`` are dropped; see ``cut`` for the two
  ways (``how="drop"``, silent loss, the default; ``how="blackhole"``, a
  blackhole route, which fails ``a``'s own sends at once with EINVAL).
- ``partition(groups)``: ``cut`` both ways between every two nodes of
  different groups.
- ``cut_from_clients(node)``: ``node``'s packets to the bridge address are
  dropped, so root-namespace clients (which speak from the bridge address)
  cannot reach it, while it still reaches the other nodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

RANGE = "10.213.0.0/16"
IFNAMSIZ = 15  # usable characters of a Linux link name
NODE_IFNAME = "eth0"
# A locally administered MAC address no interface has: a node's packets sent to it
# are flooded by the bridge and dropped by every receiver (not theirs), i.e. lost.
NOWHERE_MAC = "02:00:00:00:0d:ed"
LOCK_PATH = "/run/lock/kbroker-bench-faults-net.lock"
COMMAND_TIMEOUT = 15.0
HOW = ("drop", "blackhole")

_NAME = re.compile(r"^[a-z][a-z0-9]*$")


class NetError(RuntimeError):
    """A command setting up, faulting or tearing down the network failed."""


class SubnetInUse(NetError):
    """Another network (or a crashed run's bridge) already routes the subnet."""


def _run(args: Sequence[str], *, check: bool = True, timeout: float = COMMAND_TIMEOUT) -> str:
    """Runs ``args``; returns stdout. Raises ``NetError`` naming the command and its stderr."""
    try:
        done = subprocess.run(
            list(args), check=False, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        raise NetError(f"`{' '.join(args)}` did not finish within {timeout} s") from e
    except OSError as e:
        raise NetError(f"`{' '.join(args)}` could not start: {e}") from e
    if check and done.returncode != 0:
        raise NetError(
            f"`{' '.join(args)}` exited {done.returncode}: "
            f"{done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


@contextlib.contextmanager
def _range_lock() -> Iterator[None]:
    """Serialises, between processes, adding or deleting a bridge together with the shared
    root-namespace blackhole: whenever the lock is free, the blackhole exists exactly when
    some bridge routes part of RANGE (crashed runs aside). Not re-entrant."""
    os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _range_routes() -> list[str]:
    """Root-namespace routes inside RANGE other than its blackhole (one per bridge)."""
    out = _run(["ip", "-4", "route", "show", "root", RANGE])
    return [line for line in out.splitlines() if line.strip() and not line.startswith("blackhole")]


def _remove_range_blackhole_if_unused() -> bool:
    """Removes the blackhole unless some bridge still routes part of RANGE; True if removed.
    The caller holds ``_range_lock()``."""
    if _range_routes():
        return False
    out = _run(["ip", "-4", "route", "show", "type", "blackhole", RANGE])
    if not out.strip():
        return False
    _run(["ip", "route", "del", "blackhole", RANGE])
    return True


def _namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _links() -> list[str]:
    """Root-namespace link names (without the ``@peer`` suffix)."""
    out = _run(["ip", "-o", "link", "show"])
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


class Network:
    """One namespace per node, bridged into the root namespace; see the module docstring."""

    def __init__(self, name: str, nodes: list[str], subnet: int = 0) -> None:
        if not _NAME.match(name):
            raise ValueError(f"run name {name!r}: lower-case letters and digits, a letter first")
        if not nodes:
            raise ValueError("a network needs at least one node")
        if len(set(nodes)) != len(nodes):
            raise ValueError(f"node names repeat: {nodes}")
        if not 0 <= subnet <= 255:
            raise ValueError(f"subnet {subnet}: 0..255 (the third byte of 10.213.x.0/24)")
        if len(nodes) > 240:
            raise ValueError("at most 240 nodes (addresses .10 to .249)")
        for node in nodes:
            if not _NAME.match(node) or node == "br":
                raise ValueError(f"node name {node!r}: lower-case letters and digits, not 'br'")
            link = f"{name}-{node}"
            if len(link) > IFNAMSIZ:
                raise ValueError(
                    f"link name {link!r} is {len(link)} characters; Linux allows {IFNAMSIZ}"
                )
        self.name = name
        self.nodes = list(nodes)
        self.subnet = subnet
        self.bridge = f"{name}-br"
        self.gateway = f"10.213.{subnet}.1"
        self._addresses = {node: f"10.213.{subnet}.{10 + i}" for i, node in enumerate(nodes)}
        self._isolated: set[str] = set()
        self._cuts: dict[tuple[str, str], str] = {}  # (from, to) -> how
        self._client_cuts: dict[str, str] = {}  # node -> how
        self._up = False

    # -- names and addresses -------------------------------------------------

    def address(self, node: str) -> str:
        return self._addresses[self._known(node)]

    def namespace(self, node: str) -> str:
        return f"{self.name}-{self._known(node)}"

    def link(self, node: str) -> str:
        """The root-namespace side of the node's veth pair."""
        return f"{self.name}-{self._known(node)}"

    def exec_prefix(self, node: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(node)]

    def _known(self, node: str) -> str:
        if node not in self._addresses:
            raise KeyError(f"{node!r} is not a node of network {self.name} ({self.nodes})")
        return node

    def _ip(self, node: str, *args: str, check: bool = True) -> str:
        return _run(["ip", "-n", self.namespace(node), *args], check=check)

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self) -> Network:
        """Creates the network; on a network that is up already, does nothing."""
        if self._up:
            return self
        try:
            self._create()
        except BaseException:
            self._destroy()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._destroy()

    def _create(self) -> None:
        clashes = [n for n in (self.bridge, *map(self.link, self.nodes)) if n in _links()]
        clashes += [ns for ns in map(self.namespace, self.nodes) if ns in _namespaces()]
        if clashes:
            raise NetError(f"already exist (a crashed run? sweep({self.name!r})): {clashes}")
        prefix = f"10.213.{self.subnet}.0/24"
        with _range_lock():
            taken = _run(["ip", "-4", "route", "show", "root", prefix]).strip()
            if taken:
                raise SubnetInUse(
                    f"{prefix} is already routed in the root namespace ({taken}); "
                    "another Network uses this subnet (or sweep() a crashed run)"
                )
            self._up = True
            _run(["ip", "route", "replace", "blackhole", RANGE])
            _run(["ip", "link", "add", self.bridge, "type", "bridge", "stp_state", "0"])
            _run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
        for node in self.nodes:
            ns, link = self.namespace(node), self.link(node)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", link, "type", "veth", "peer", "name", NODE_IFNAME,
                  "netns", ns])  # fmt: skip
            _run(["ip", "link", "set", link, "master", self.bridge])
            _run(["ip", "link", "set", link, "up"])
            self._ip(node, "link", "set", "lo", "up")
            self._ip(node, "addr", "add", f"{self.address(node)}/24", "dev", NODE_IFNAME)
            self._ip(node, "link", "set", NODE_IFNAME, "up")

    def _destroy(self) -> None:
        """Removes everything this network may have created; tries every step, then raises."""
        if not self._up:
            return
        errors: list[str] = []
        existing_links = set(_links())
        existing_ns = set(_namespaces())
        for node in self.nodes:
            # Deleting the root side deletes the pair even if a process still holds the
            # namespace alive after its name is gone.
            if self.link(node) in existing_links:
                try:
                    _run(["ip", "link", "del", self.link(node)])
                except NetError as e:
                    errors.append(str(e))
            if self.namespace(node) in existing_ns:
                try:
                    _run(["ip", "netns", "del", self.namespace(node)])
                except NetError as e:
                    errors.append(str(e))
        with _range_lock():
            if self.bridge in existing_links:
                try:
                    _run(["ip", "link", "del", self.bridge])
                except NetError as e:
                    errors.append(str(e))
            try:
                _remove_range_blackhole_if_unused()
            except NetError as e:
                errors.append(str(e))
        self._up = False
        self._isolated.clear()
        self._cuts.clear()
        self._client_cuts.clear()
        if errors:
            raise NetError(f"tearing down network {self.name}: " + "; ".join(errors))

    # -- faults --------------------------------------------------------------

    def isolate(self, node: str) -> None:
        """``node`` reaches nobody and nobody (root-namespace clients too) reaches it.

        The root side of its veth is set down, so its own side has no carrier: every
        packet either way is lost. Only the root side goes down so that the node's
        permanent neighbour entries (``cut``) survive. Connections time out; new
        connections from either side time out or fail with "no route to host" once
        ARP gives up (about 3 s).
        """
        _run(["ip", "link", "set", self.link(node), "down"])
        self._isolated.add(node)

    def cut(self, a: str, b: str, one_way: bool = False, *, how: str = "drop") -> None:
        """``a`` stops reaching ``b``; unless ``one_way``, ``b`` stops reaching ``a`` too.

        Only packets *sent by* ``a`` to ``b``'s address are affected; ``a`` still
        receives everything ``b`` sends. So with ``one_way``:

        - datagrams (UDP, ICMP echo requests) from ``b`` arrive at ``a``, those from
          ``a`` to ``b`` do not (ping from ``b`` fails anyway: the reply is lost);
        - TCP is broken both ways: a connection opened by ``a`` never gets its SYN
          through; one opened by ``b`` reaches ``a``, whose SYN-ACK is lost, so ``b``'s
          connect stalls until it times out; on an established connection, data from
          ``b`` arrives at ``a`` (an application there sees it) but ``a``'s ACKs and
          replies are lost, so ``b`` retransmits until its retransmission timeout
          kills the connection, and ``a``'s writes are never delivered.

        ``how``:

        - ``"drop"`` (default): a permanent neighbour entry in ``a``'s namespace maps
          ``b``'s address to a MAC address nobody has; the bridge floods those frames
          and every port discards them. Silent loss, as on a real network: ``a``'s
          connects to ``b`` time out.
        - ``"blackhole"``: ``ip route add blackhole B/32`` in ``a``'s namespace. Still
          silent towards ``b``, but ``a``'s own connects/sends to ``b`` fail at once
          with EINVAL (the kernel's error for a blackhole route on local output).
        """
        if how not in HOW:
            raise ValueError(f"how={how!r}: one of {HOW}")
        self._known(a), self._known(b)
        if a == b:
            raise ValueError(f"cut({a!r}, {b!r}): a node cannot be cut from itself")
        self._cut_one(a, b, how)
        if not one_way:
            self._cut_one(b, a, how)

    def _cut_one(self, a: str, b: str, how: str) -> None:
        old = self._cuts.get((a, b))
        if old is not None and old != how:
            self._uncut_address(a, self.address(b), old)
        self._cut_address(a, self.address(b), how)
        self._cuts[(a, b)] = how

    def _cut_address(self, node: str, address: str, how: str) -> None:
        if how == "drop":
            self._ip(node, "neigh", "replace", address, "lladdr", NOWHERE_MAC,
                     "dev", NODE_IFNAME, "nud", "permanent")  # fmt: skip
        else:
            self._ip(node, "route", "replace", "blackhole", f"{address}/32")

    def _uncut_address(self, node: str, address: str, how: str) -> None:
        if how == "drop":
            self._ip(node, "neigh", "del", address, "dev", NODE_IFNAME, check=False)
        else:
            self._ip(node, "route", "del", "blackhole", f"{address}/32", check=False)

    def partition(self, groups: list[list[str]], *, how: str = "drop") -> None:
        """Nodes in different groups are cut from each other both ways (see ``cut``).

        Nodes in no group are left alone (they keep reaching everyone); root-namespace
        clients still reach every node. A node may be in one group only.
        """
        seen: dict[str, int] = {}
        for i, group in enumerate(groups):
            for node in group:
                self._known(node)
                if node in seen:
                    raise ValueError(f"{node!r} is in groups {seen[node]} and {i}")
                seen[node] = i
        for a, ga in seen.items():
            for b, gb in seen.items():
                if ga != gb:
                    self._cut_one(a, b, how)

    def cut_from_clients(self, node: str, *, how: str = "drop") -> None:
        """Root-namespace clients no longer reach ``node``; it still reaches other nodes.

        ``node``'s packets to the bridge address (the source address of every client
        in the root namespace) are lost, as in ``cut``: a client's SYN arrives, the
        SYN-ACK does not, so its connect times out; established connections stall.
        """
        if how not in HOW:
            raise ValueError(f"how={how!r}: one of {HOW}")
        old = self._client_cuts.get(self._known(node))
        if old is not None and old != how:
            self._uncut_address(node, self.gateway, old)
        self._cut_address(node, self.gateway, how)
        self._client_cuts[node] = how

    def heal(self) -> None:
        """Every link up, every fault route and neighbour entry removed.

        Works from what the namespaces hold, not only from what this object did, so it
        also clears faults made by hand with the same commands.
        """
        for node in self.nodes:
            _run(["ip", "link", "set", self.link(node), "up"])
            self._ip(node, "link", "set", NODE_IFNAME, "up")
            self._ip(node, "route", "flush", "type", "blackhole")
            self._ip(node, "neigh", "flush", "dev", NODE_IFNAME, "nud", "permanent")
        self._isolated.clear()
        self._cuts.clear()
        self._client_cuts.clear()

    def faults(self) -> list[str]:
        """The active faults, readable, e.g. ``isolate b1``, ``cut b1 -> zk2 (drop)``."""
        out = [f"isolate {node}" for node in self.nodes if node in self._isolated]
        out += [f"cut {a} -> {b} ({how})" for (a, b), how in sorted(self._cuts.items())]
        out += [f"cut clients -> {n} ({how})" for n, how in sorted(self._client_cuts.items())]
        return out


def sweep(prefix: str = "kbf") -> list[str]:
    """Removes namespaces and root-namespace links whose names start with ``prefix``
    (what crashed runs left), then the range blackhole if no bridge routes into the
    range any more. Returns what it removed, e.g. ``["link kbf3a-b1", "netns kbf3a-b1"]``.

    Careful: a live run whose name starts with ``prefix`` is swept too.
    """
    if not prefix:
        raise ValueError("an empty prefix would sweep every namespace")
    removed: list[str] = []
    links = [n for n in _links() if n.startswith(prefix)]
    # veth root sides first (that deletes their peers), then namespaces, bridges last.
    for link in links:
        if not link.endswith("-br") and link in _links():  # not gone with its peer already
            _run(["ip", "link", "del", link])
            removed.append(f"link {link}")
    for ns in _namespaces():
        if ns.startswith(prefix):
            # Processes a crashed run left in it (a broker, a ZooKeeper node) go first:
            # they would keep running, unreachable, in a namespace nobody can name.
            killed = []
            for pid in _run(["ip", "netns", "pids", ns], check=False).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    removed.append(f"process {pid} in {ns}")
                    killed.append(int(pid))
                except (ProcessLookupError, ValueError):
                    pass
            _wait_gone(killed)  # their files close (a disk can then be unmounted)
            _run(["ip", "netns", "del", ns])
            removed.append(f"netns {ns}")
    with _range_lock():
        for link in links:
            if link.endswith("-br") and link in _links():
                _run(["ip", "link", "del", link])
                removed.append(f"link {link}")
        if _remove_range_blackhole_if_unused():
            removed.append(f"route blackhole {RANGE}")
    return removed


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: neither gone nor a zombie (a process whose parent died
    is reaped by whatever adopted it, maybe later)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _wait_gone(pids: list[int], timeout: float = 15) -> None:
    """Waits until no process of ``pids`` runs: they are not this process's children, so
    it cannot wait for them."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


@functools.cache
def available() -> str | None:
    """None when namespaces, veth pairs and bridges work here; otherwise why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"kbfprobe{os.getpid() % 100000}"
    try:
        _run(["ip", "-V"])
        _run(["ip", "netns", "add", probe])
        try:
            _run(["ip", "link", "add", probe, "type", "veth", "peer", "name", "eth0",
                  "netns", probe])  # fmt: skip
            _run(["ip", "link", "del", probe])
            _run(["ip", "link", "add", probe, "type", "bridge"])
            _run(["ip", "link", "del", probe])
        finally:
            _run(["ip", "netns", "del", probe], check=False)
    except NetError as e:
        return f"network namespaces do not work here: {e}"
    return None
