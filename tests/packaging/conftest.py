"""The release artifacts, built once per session by the README's build command
(deploy/build-wheel.sh): the abi3 wheel, the sdist it was built from, and what the
command printed (auditwheel's report among it).

The build needs cargo. It compiles in target/, beside the development build whose
dependencies it reuses: kbroker's crate every time (10 to 20 s).
"""

from __future__ import annotations

import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cargo_version() -> str:
    """The one version kbroker has: rust/Cargo.toml's (the wheel and --version take it)."""
    with open(ROOT / "rust" / "Cargo.toml", "rb") as f:
        return str(tomllib.load(f)["package"]["version"])


@dataclass(frozen=True)
class Release:
    version: str
    wheel: Path
    sdist: Path
    build_output: str


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [str(ROOT / "deploy" / "build-wheel.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output[-4000:]
    version = cargo_version()
    wheels = sorted(out.glob("*.whl"))
    assert [w.name.split("-abi3-")[0] for w in wheels] == [f"kbroker-{version}-cp311"], wheels
    sdist = out / f"kbroker-{version}.tar.gz"
    assert sorted(out.iterdir()) == sorted([wheels[0], sdist])
    return Release(version, wheels[0], sdist, output)
