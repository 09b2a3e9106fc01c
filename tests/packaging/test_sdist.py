"""The release sdist: it carries the Rust crate, its lock file and the Python package, and
pip builds it into a wheel holding the same files as the release wheel (with cargo: an
sdist is the from-source path)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tests.packaging.conftest import ROOT, Release


def test_sdist_holds_the_crate_and_the_package(release: Release) -> None:
    top = f"kbroker-{release.version}/"
    with tarfile.open(release.sdist) as sdist:
        names = {n.removeprefix(top) for n in sdist.getnames()}
    rust_sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "rust" / "src").rglob("*.rs")}
    python_sources = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "python" / "kbroker").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyc")
    }
    assert rust_sources <= names, rust_sources - names
    assert python_sources <= names, python_sources - names
    assert {"pyproject.toml", "README.md", "Cargo.toml", "Cargo.lock", "rust/Cargo.toml"} <= names
    # No build output or local state travels with it.
    assert not [n for n in names if n.endswith(".so") or n.startswith(("target/", ".venv/"))]


def test_sdist_builds_into_a_wheel(release: Release, tmp_path: Path) -> None:
    """pip builds the sdist as a user's pip would: in an isolated build environment with
    the maturin pyproject.toml asks for. It builds in the release build's target/, so
    cargo takes kbroker's crate as the release build has just compiled it from this same
    sdist (the fixture failed if it did not compile) and this takes seconds."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target"))
    cargo_bin = Path.home() / ".cargo" / "bin"
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), str(cargo_bin)])
    built = subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--wheel-dir", str(tmp_path), str(release.sdist),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    [wheel] = tmp_path.glob("*.whl")
    assert wheel.name.startswith(f"kbroker-{release.version}-cp311-abi3-"), wheel.name

    def files(path: Path) -> set[str]:
        with zipfile.ZipFile(path) as z:
            return {n for n in z.namelist() if not n.endswith(("/RECORD", "/WHEEL"))}

    assert files(wheel) == files(release.wheel)
