"""The release wheel: its manylinux tag is one auditwheel confirms, it holds the whole
Python package, the extension and the metadata pyproject.toml declares, and installed
into a fresh virtual environment with no Rust toolchain anywhere on its PATH it runs a
broker that real clients produce to and consume from, on CPython 3.11 (what it is built
against) and on the newest CPython 3.12+ this machine has (the abi3 promise).
"""

from __future__ import annotations

import email.parser
import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import BrokerProcess, consume_all, create_topic, produce, topic_name
from tests.packaging.conftest import ROOT, Release

PACKAGE = ROOT / "python" / "kbroker"
EXTENSION = "kbroker/_kbroker.abi3.so"


def platform_tag(wheel: Path) -> str:
    return wheel.name.removesuffix(".whl").split("-abi3-")[1]


def test_wheel_tag_is_the_one_auditwheel_finds(release: Release) -> None:
    tag = platform_tag(release.wheel)
    assert re.fullmatch(rf"manylinux_2_\d+_{platform.machine()}", tag), tag
    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(release.wheel)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    report = " ".join(shown.stdout.split())
    assert f'consistent with the following platform tag: "{tag}"' in report, report
    # The build command shows the same report (and fails when it disagrees).
    assert f'"{tag}"' in " ".join(release.build_output.split())


def metadata_requirements(requires: list[str]) -> dict[str | None, set[str]]:
    """Requires-Dist lines by extra (None: always), each as name+specifier."""
    by_extra: dict[str | None, set[str]] = {}
    for line in requires:
        req = Requirement(line)
        extra = None
        if req.marker is not None:
            found = re.search(r"extra == ['\"]([\w-]+)['\"]", str(req.marker))
            assert found, line
            extra = found[1]
        by_extra.setdefault(extra, set()).add(canonical(req))
    return by_extra


def canonical(req: Requirement) -> str:
    return f"{canonicalize_name(req.name)}{req.specifier}"


def declared(requires: list[str]) -> set[str]:
    return {canonical(Requirement(r)) for r in requires}


def test_wheel_holds_the_package_and_its_metadata(release: Release) -> None:
    with zipfile.ZipFile(release.wheel) as wheel:
        names = set(wheel.namelist())
        dist_info = f"kbroker-{release.version}.dist-info"
        metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
        wheel_file = wheel.read(f"{dist_info}/WHEEL").decode()
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
        extension = wheel.read(EXTENSION)

    # Every file of the source package (modules, py.typed, the stub, package data such as
    # the Spark connector's pom.xml) and the compiled extension; nothing else under kbroker/.
    source = {
        "kbroker/" + p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyc")
    }
    assert {"kbroker/py.typed", "kbroker/_kbroker.pyi", "kbroker/spark/pom.xml"} <= source
    packaged = {n for n in names if n.startswith("kbroker/")}
    assert packaged == source | {EXTENSION}
    assert extension[:4] == b"\x7fELF"

    assert metadata["Version"] == release.version
    assert metadata["Requires-Python"] == ">=3.11"
    assert f"Tag: cp311-abi3-{platform_tag(release.wheel)}" in wheel_file.splitlines()
    assert "Root-Is-Purelib: false" in wheel_file.splitlines()
    assert re.search(r"^kbroker\s*=\s*kbroker\.cli:main$", entry_points, re.M), entry_points

    # The dependencies and extras are pyproject.toml's, as declared there.
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    requires = metadata_requirements(metadata.get_all("Requires-Dist") or [])
    assert requires[None] == declared(project["dependencies"])
    extras = project["optional-dependencies"]
    assert set(metadata.get_all("Provides-Extra") or []) == set(extras)
    assert "spark" in extras
    for extra, reqs in extras.items():
        assert requires[extra] == declared(reqs), extra


PROBE = "import platform, sys; print(platform.python_implementation(), *sys.version_info[:2])"


def newest_cpython_after_3_11() -> str | None:
    """The newest CPython 3.12+ on this machine: on the PATH, or installed by pyenv (whose
    shims on the PATH run only the selected version)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in range(20, 11, -1)]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.*/bin/python3"), reverse=True)
    best: tuple[tuple[int, int], str] | None = None
    for candidate in filter(None, candidates):
        try:
            probe = subprocess.run(
                [candidate, "-c", PROBE], capture_output=True, text=True, timeout=20
            )
        except OSError:
            continue
        if probe.returncode != 0 or not probe.stdout.startswith("CPython "):
            continue
        major, minor = map(int, probe.stdout.split()[1:])
        if (major, minor) >= (3, 12) and (best is None or (major, minor) > best[0]):
            best = ((major, minor), candidate)
    return None if best is None else best[1]


def interpreter(which: str) -> str:
    """ "3.11": the base interpreter of this test's venv; "newest": the newest CPython 3.12+
    (the test skips when the machine has none)."""
    if which == "3.11":
        return str(getattr(sys, "_base_executable", sys.executable))
    newer = newest_cpython_after_3_11()
    if newer is None:
        pytest.skip("no CPython 3.12+ on this machine")
    return newer


def environment_without_rust(venv: Path) -> dict[str, str]:
    """This process's environment with the fresh venv first on a PATH that has no cargo,
    rustc or rustup (nor this test's own venv), and no Python or Cargo settings that
    would reach into the source tree."""
    own_bin = Path(sys.prefix) / "bin"
    kept = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d
        and Path(d) != own_bin
        and ".cargo" not in Path(d).parts
        and not any(shutil.which(tool, path=d) for tool in ("cargo", "rustc", "rustup"))
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "CARGO", "RUST", "VIRTUAL_ENV", "MATURIN"))
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *kept])
    return env


def run(
    args: list[str], env: Mapping[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, env=env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


@pytest.mark.parametrize("which", ["3.11", "newest"])
def test_wheel_installs_and_serves_without_rust(
    release: Release, which: str, tmp_path: Path
) -> None:
    python = interpreter(which)
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    env = environment_without_rust(venv)
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool

    # pip (this venv's, run for the fresh one) takes only built wheels: nothing compiles.
    implementation, major, minor = run(
        [str(venv / "bin" / "python"), "-c", PROBE], env, tmp_path
    ).stdout.split()
    assert implementation == "CPython"
    version = (int(major), int(minor))
    assert version == (3, 11) if which == "3.11" else version >= (3, 12), version
    run(
        [
            sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
            "install", "--quiet", "--disable-pip-version-check", "--only-binary", ":all:",
            str(release.wheel),
        ],
        env,
        tmp_path,
    )  # fmt: skip
    kbroker = str(venv / "bin" / "kbroker")
    assert run([kbroker, "--version"], env, tmp_path).stdout == (
        f"kbroker, version {release.version}\n"
    )
    # The extension comes from the installed wheel, not from the source tree.
    where = run(
        [str(venv / "bin" / "python"), "-c", "import kbroker._kbroker as m; print(m.__file__)"],
        env,
        tmp_path,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    broker = BrokerProcess(data_dir=tmp_path / "data", command=[kbroker], env=env)
    broker.start()
    try:
        topic = topic_name("wheel")
        create_topic(broker.bootstrap, topic)
        # confluent-kafka (librdkafka) writes; the installed `kbroker consume` reads back.
        produce(broker.bootstrap, topic, [(b"k1", b"one"), (b"k2", b"two"), (None, b"three")])
        consumed = run(
            [
                kbroker, "consume", topic, "-b", broker.bootstrap, "--from", "beginning",
                "--count", "3", "--format", "%k=%s\\n", "--timeout", "20",
            ],
            env,
            tmp_path,
        )  # fmt: skip
        assert consumed.stdout.splitlines() == ["k1=one", "k2=two", "=three"]
        # The installed `kbroker produce` writes; confluent-kafka reads back.
        run(
            [kbroker, "produce", topic, "-b", broker.bootstrap, "-K", ":", "--timeout", "20"],
            env,
            tmp_path,
            stdin="k4:four\nk5:five\n",
        )
        records = consume_all(broker.bootstrap, topic, 1, expected=5)
        assert [(m.key(), m.value()) for m in records] == [
            (b"k1", b"one"),
            (b"k2", b"two"),
            (None, b"three"),
            (b"k4", b"four"),
            (b"k5", b"five"),
        ]
        assert broker.stop() == 0, broker.output()
    finally:
        broker.kill()


def test_readme_installs_this_wheel(release: Release) -> None:
    """The README's install commands name the wheel the build makes (its version and tag)."""
    readme = (ROOT / "README.md").read_text()
    assert f"    pip install {release.wheel.name}\n" in readme
    assert f"    pip install '{release.wheel.name}[spark]'" in readme
