#!/usr/bin/env bash
# Builds kbroker's release artifacts into OUT-DIR (default ./dist): an abi3 wheel for
# CPython 3.11 and newer, tagged with the oldest manylinux its binary satisfies on this
# build machine, and an sdist. A release step, not a set-up step: it needs cargo, the
# wheel it makes does not. Safe to run again (cargo builds only what changed).
#   deploy/build-wheel.sh [OUT-DIR]
# The version is rust/Cargo.toml's: the wheel's metadata (pyproject.toml's dynamic
# version, filled in by maturin) and `kbroker --version` (the extension's
# CARGO_PKG_VERSION) both come from it.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist}"

say() { printf '\033[1m[build-wheel]\033[0m %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "build-wheel: a Rust toolchain (cargo >= 1.85) is required" >&2; exit 1; }

# The build tools live in the project's .venv (deploy/setup.sh makes it; made here when
# missing): maturin, the build backend pyproject.toml names, and auditwheel to check the
# manylinux tag maturin claims against the symbols the binary really uses.
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || { say "creating .venv"; "$PY" -m venv .venv; }
if [ ! -x .venv/bin/maturin ] || [ ! -x .venv/bin/auditwheel ]; then
    say "installing maturin and auditwheel into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check "maturin>=1.9,<2" "auditwheel>=6"
fi

# maturin builds the wheel from the sdist it has just made (so the sdist is proven to
# build). It shares target/ with the development build (deploy/setup.sh), so the
# compiled dependencies are reused (their sources never change under a version);
# kbroker's own crate is compiled afresh every time, because the sdist stamps its files
# with one fixed old time, so cargo, which compares file times, would take an earlier
# build for an up-to-date one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo clean --quiet --release -p kbroker-core --manifest-path rust/Cargo.toml

version="$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("rust/Cargo.toml", "rb"))["package"]["version"])')"
say "building kbroker $version into $out"
# A wheel of this version left by an earlier build (maybe with another tag) would be
# taken for this one.
rm -f "$out"/kbroker-"$version"-*.whl
.venv/bin/maturin build --release --sdist --out "$out"

# maturin picks the manylinux tag; auditwheel reads the binary's versioned symbols and
# must agree, or the wheel would promise more systems than it runs on.
shopt -s nullglob
wheels=("$out"/kbroker-"$version"-cp311-abi3-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "build-wheel: expected one kbroker $version wheel in $out, found ${#wheels[@]}" >&2; exit 1; }
wheel="${wheels[0]}"
platform="${wheel##*-abi3-}"
platform="${platform%.whl}"
report="$(.venv/bin/auditwheel show "$wheel")"
printf '%s\n' "$report"
if ! tr -s ' \n' ' ' <<<"$report" | grep -qF "consistent with the following platform tag: \"$platform\""; then
    echo "build-wheel: auditwheel does not confirm $wheel's tag $platform" >&2
    exit 1
fi
say "built $wheel and $out/kbroker-$version.tar.gz"
