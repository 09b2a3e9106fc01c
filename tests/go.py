"""The tests' Go programs (tests/go/<program>/, a Go module each, go.sum committed): built
once per source by the installed Go toolchain into target/go/ (outside git), the Go
modules fetched through the Go module proxy. Without go, or when the modules cannot be
fetched, the tests that need a program are skipped."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from bench.systems import REPO

SOURCES = Path(__file__).resolve().parent / "go"
BUILD = REPO / "target" / "go"
# Where Go's installer puts it, for a shell whose PATH lacks it.
GO_FALLBACK = Path("/usr/local/go/bin/go")


def go_tool() -> str | None:
    found = shutil.which("go")
    if found is None and GO_FALLBACK.exists():
        found = str(GO_FALLBACK)
    return found


def go_environment() -> dict[str, str]:
    # -mod=mod: the versions are go.mod's (pinned), checked against go.sum. GOTOOLCHAIN=local:
    # never download another toolchain when the installed one is older than go.mod asks.
    return {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}


def build_go(program: str) -> Path:
    """The executable of tests/go/<program>, built now unless an earlier run did."""
    go = go_tool()
    if go is None:
        pytest.skip("needs go (the Go toolchain) to build tests/go/" + program)
    source = SOURCES / program
    digest = hashlib.sha256()
    for path in sorted(source.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    binary = BUILD / f"{program}-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    env = go_environment()
    # Fetching first tells a machine without the module proxy (a skip) from a program that
    # does not compile (a failure).
    fetched = subprocess.run(
        [go, "mod", "download"], cwd=source, env=env, capture_output=True, text=True, timeout=300
    )
    if fetched.returncode != 0:
        pytest.skip(
            f"go could not fetch the modules of tests/go/{program}: {fetched.stderr[-500:]}"
        )
    BUILD.mkdir(parents=True, exist_ok=True)
    # Built beside its final name, then renamed: a concurrent or killed build leaves no
    # half-written executable where a later run would take it.
    fd, tmp = tempfile.mkstemp(prefix=f".{program}-", dir=BUILD)
    os.close(fd)
    built = subprocess.run(
        [go, "build", "-o", tmp, "."],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if built.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"go build of tests/go/{program} failed:\n{built.stderr}")
    os.replace(tmp, binary)
    return binary
