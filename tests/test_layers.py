"""Modules stand in layers: no import cycles among kbroker's modules, and the rooms
(packages) import downward only, in the order ROOM_LAYERS gives and ARCHITECTURE.md draws.

Python: every `import` and `from ... import` in python/kbroker, wherever it
is (module level, under `if TYPE_CHECKING:`, inside a function), is an edge
of the module graph; a strongly connected component of more than one module
is a cycle. Importing a package (`import kbroker.log`, `from kbroker.log
import LogManager`) depends on its `__init__.py`; `from kbroker.log import
cleaner` depends on the submodule. A submodule's import does not count as
depending on its parent package's `__init__.py` (Python runs it first, but a
package that re-exports its modules would otherwise always be a cycle).

Rust: `crate::module` paths in rust/src/*.rs (comments left out) are the
edges between the core's modules; lib.rs and py.rs (the binding layer, above
everything) are left out.

KNOWN_CYCLES lists cycles still being broken (none now). It only shrinks: a cycle
not in it fails, and so does an entry that is no longer a cycle as written.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "kbroker"
RUST_SRC = ROOT / "rust" / "src"

# Python cycles allowed to remain until the broker core is reshaped; empty it
# as they go. Each is one strongly connected component, exactly.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()

# Rust module cycles allowed to remain (crate-relative module names).
KNOWN_RUST_CYCLES: frozenset[frozenset[str]] = frozenset()

# Rust files that are not layers of the core: the crate root and the bindings.
RUST_EXCLUDED = frozenset({"lib", "py"})

Graph = dict[str, dict[str, list[str]]]  # module -> imported module -> where


# -- Python --------------------------------------------------------------------


def python_modules(package: Path, name: str = "kbroker") -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package) for every .py file under `package`.

    Extension modules count as leaves through their .pyi stub.
    """
    modules: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        module = ".".join(parts)
        if path.suffix == ".pyi" and module in modules:
            continue
        modules[module] = (path, is_package)
    return modules


def _resolve(target: str, modules: Mapping[str, object]) -> str | None:
    """The module `target` names, or the closest enclosing one we have."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def _imports(
    module: str, path: Path, is_package: bool, modules: Mapping[str, object]
) -> Iterable[tuple[str, int]]:
    """(imported module, line) for every import statement anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _resolve(alias.name, modules)
                if found is not None:
                    yield found, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                # `from pkg import submodule` imports the submodule itself.
                sub = f"{source}.{alias.name}"
                found = sub if sub in modules else _resolve(source, modules)
                if found is not None:
                    yield found, node.lineno


def python_graph(package: Path = PACKAGE, name: str = "kbroker") -> Graph:
    modules = python_modules(package, name)
    graph: Graph = {module: {} for module in modules}
    for module, (path, is_package) in modules.items():
        for target, line in _imports(module, path, is_package, modules):
            if target != module:
                where = f"{path.relative_to(package.parent)}:{line}"
                places = graph[module].setdefault(target, [])
                if where not in places:
                    places.append(where)
    return graph


# -- Rust ------------------------------------------------------------------------

_COMMENT = re.compile(r"//.*")
_CRATE_PATH = re.compile(r"\bcrate::(\w+)")
_CRATE_GROUP = re.compile(r"\bcrate::\{([^}]*)\}")
_MACRO = re.compile(r"macro_rules!\s*(\w+)")
_ROOT_REEXPORT = re.compile(r"pub use (\w+)::\{?([\w, ]+)\}?;")


def rust_graph(src: Path = RUST_SRC) -> Graph:
    """Module -> module it uses through `crate::` paths (bindings and root excluded)."""
    texts = {
        p.stem: _COMMENT.sub("", p.read_text())
        for p in sorted(src.glob("*.rs"))
        if p.stem not in RUST_EXCLUDED
    }
    # Names reachable at the crate root that live in a module: exported
    # macros and the root's `pub use module::{...}` re-exports.
    owner = {m: m for m in texts}
    for module, text in texts.items():
        for macro in _MACRO.findall(text):
            owner[macro] = module
    lib = src / "lib.rs"
    if lib.exists():
        for module, names in _ROOT_REEXPORT.findall(lib.read_text()):
            for item in names.split(","):
                owner.setdefault(item.strip(), module)
    graph: Graph = {m: {} for m in texts}
    for module, text in texts.items():
        for lineno, line in enumerate(text.splitlines(), 1):
            names = _CRATE_PATH.findall(line)
            for group in _CRATE_GROUP.findall(line):
                names += [n.strip().split("::")[0] for n in group.split(",")]
            for name in names:
                target = owner.get(name)
                where = f"{module}.rs:{lineno}"
                if target is not None and target != module:
                    places = graph[module].setdefault(target, [])
                    if where not in places:
                        places.append(where)
    return graph


# -- cycles ----------------------------------------------------------------------


def cycles(graph: Graph) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(component: frozenset[str], graph: Graph) -> str:
    lines = [f"cycle among {sorted(component)}:"]
    for module in sorted(component):
        for target, where in sorted(graph[module].items()):
            if target in component:
                lines.append(f"  {module} -> {target}  ({', '.join(where)})")
    return "\n".join(lines)


def check_cycles(graph: Graph, known: frozenset[frozenset[str]]) -> list[str]:
    """Problems: cycles not in `known`, and entries of `known` that are gone."""
    found = cycles(graph)
    problems = [describe(c, graph) for c in sorted(found - known, key=sorted)]
    problems += [
        f"{sorted(c)} is no longer a cycle as listed: update KNOWN_CYCLES (it only shrinks)"
        for c in sorted(known - found, key=sorted)
    ]
    return problems


# -- rooms ---------------------------------------------------------------------

# The rooms, lowest first (ARCHITECTURE.md draws them): a module imports only modules of
# its own layer or of layers below. A module's layer is that of the longest name here that
# is it or encloses it (the package itself encloses nothing: each room is named); the few
# modules placed apart from their room are named on their own.
ROOM_LAYERS: tuple[tuple[str, ...], ...] = (
    # Foundations: the Rust core, the wire protocol, errors, settings, futures.
    (
        "kbroker",
        "kbroker._kbroker",
        "kbroker.protocol",
        "kbroker.errors",
        "kbroker.futures",
        "kbroker.heap",
        "kbroker.config",
        "kbroker.kafka_settings",
    ),
    # Partition logs, security, metrics hooks, and value types others build on.
    (
        "kbroker.log",
        "kbroker.security",
        "kbroker.metrics",
        "kbroker.metadata.model",
        "kbroker.quota.entity",
    ),
    # Kafka's ZooKeeper formats: the JSON of every znode, kept by a single node too.
    ("kbroker.cluster.zk_data", "kbroker.cluster.errors"),
    # Where metadata is kept and cached on this broker; the network server and connections.
    ("kbroker.metadata", "kbroker.quota", "kbroker.network"),
    # ZooKeeper itself: the client, the watchers, the registration, the controller election.
    ("kbroker.cluster",),
    # Partitions served (replication) and the cluster's controller.
    ("kbroker.replication", "kbroker.controller"),
    # The coordinators, over replicated internal topics.
    ("kbroker.coordinator", "kbroker.txn"),
    # A broker's part in a cluster: composes the ZooKeeper room and the controller.
    ("kbroker.cluster.member",),
    # The broker and the request handlers (which name the broker for types only).
    ("kbroker.broker", "kbroker.handlers"),
    # Entry points and clients: the daemon, the command line and its tools, the web
    # console, Spark.
    ("kbroker.daemon", "kbroker.cli", "kbroker.tools", "kbroker.console", "kbroker.spark"),
)


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = ROOM_LAYERS) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching name, layer)
    for layer, names in enumerate(layers):
        for name in names:
            encloses = "." in name and module.startswith(name + ".")
            if (module == name or encloses) and (best is None or len(name) > best[0]):
                best = (len(name), layer)
    return None if best is None else best[1]


def upward_imports(graph: Graph, layers: tuple[tuple[str, ...], ...] = ROOM_LAYERS) -> list[str]:
    """Imports of a module from a higher layer, and modules no layer names."""
    problems = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{module} is in no layer: add its room to ROOM_LAYERS")
            continue
        for target, where in sorted(targets.items()):
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > mine:
                problems.append(
                    f"{module} (layer {mine}) imports {target} (layer {theirs})  "
                    f"({', '.join(where)})"
                )
    return problems


# -- the tests -------------------------------------------------------------------


def test_rooms_import_downward() -> None:
    problems = upward_imports(python_graph())
    assert not problems, "\n".join(problems)


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from pkg.high import H\n",
            "low/apart.py": "from pkg.high import H\n",
            "high.py": "from pkg.low.a import f\n",
            "stray.py": "",
        },
    )
    layers = (("pkg", "pkg.low"), ("pkg.high", "pkg.low.apart"))
    assert layer_of("pkg.low.apart", layers) == 1  # the longer name wins
    assert upward_imports(python_graph(package, "pkg"), layers) == [
        "pkg.low.a (layer 0) imports pkg.high (layer 1)  (pkg/low/a.py:2)",
        "pkg.stray is in no layer: add its room to ROOM_LAYERS",
    ]


def test_python_modules_stand_in_layers() -> None:
    problems = check_cycles(python_graph(), KNOWN_CYCLES)
    assert not problems, "\n\n".join(problems)


def test_rust_modules_stand_in_layers() -> None:
    problems = check_cycles(rust_graph(), KNOWN_RUST_CYCLES)
    assert not problems, "\n\n".join(problems)


def test_the_graphs_see_real_imports() -> None:
    graph = python_graph()
    assert "kbroker.log.manager" in graph["kbroker.log.cleaner"]
    assert "kbroker._kbroker" in graph["kbroker.log.log"]
    assert "kbroker.protocol.messages.core" in graph["kbroker.protocol.apis"]
    assert "kbroker.protocol.schema" in graph["kbroker.protocol.messages.core"]
    rust = rust_graph()
    assert "log" in rust["cleaner"]
    assert "error" in rust["records"]
    assert "py" not in rust


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "from pkg.a import A\n",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
            "b.py": "def f():\n    from pkg import c\n",
            "c.py": "import pkg.sub\n",
            "sub/__init__.py": "from .. import d\n",
            "sub/x.py": "from . import y\nfrom .y import Y\nfrom pkg.sub import Z\n",
            "sub/y.py": "import os\nfrom ..a import A\n",
            "d.py": "",
        },
    )
    graph = python_graph(package, "pkg")
    assert set(graph["pkg"]) == {"pkg.a"}
    assert set(graph["pkg.a"]) == {"pkg.b"}
    assert set(graph["pkg.b"]) == {"pkg.c"}
    assert set(graph["pkg.c"]) == {"pkg.sub"}
    assert set(graph["pkg.sub"]) == {"pkg.d"}
    assert set(graph["pkg.sub.x"]) == {"pkg.sub", "pkg.sub.y"}
    assert set(graph["pkg.sub.y"]) == {"pkg.a"}
    assert cycles(graph) == set()


def test_a_cycle_is_found_and_the_allowlist_only_shrinks(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import B\n",
            "b.py": "def f():\n    from pkg.c import C\n",
            "c.py": "import pkg.a\n",
            "d.py": "import pkg.a\n",
        },
    )
    graph = python_graph(package, "pkg")
    cycle = frozenset({"pkg.a", "pkg.b", "pkg.c"})
    assert cycles(graph) == {cycle}
    assert check_cycles(graph, frozenset({cycle})) == []
    (new,) = check_cycles(graph, frozenset())
    assert "pkg.b -> pkg.c  (pkg/b.py:2)" in new
    (gone,) = check_cycles(graph, frozenset({cycle, frozenset({"pkg.a", "pkg.d"})}))
    assert "no longer a cycle" in gone


def test_rust_paths_macros_and_root_reexports_are_edges(tmp_path: Path) -> None:
    (tmp_path / "lib.rs").write_text("pub mod a;\npub use err::{Error, Result};\n")
    (tmp_path / "py.rs").write_text("use crate::a::X;\n")
    (tmp_path / "err.rs").write_text("#[macro_export]\nmacro_rules! bad { () => {} }\n")
    (tmp_path / "a.rs").write_text(
        "use crate::corrupt;\nuse crate::Result;\n// crate::b::nothing\nfn f() { crate::bad!() }\n"
    )
    (tmp_path / "b.rs").write_text("use crate::{a::X, err};\n")
    graph = rust_graph(tmp_path)
    assert set(graph) == {"a", "b", "err"}
    assert set(graph["a"]) == {"err"}
    assert set(graph["b"]) == {"a", "err"}


@pytest.mark.parametrize("known", [KNOWN_CYCLES, KNOWN_RUST_CYCLES])
def test_known_cycles_are_real_cycles_not_single_modules(
    known: frozenset[frozenset[str]],
) -> None:
    assert all(len(c) > 1 for c in known)
