#!/usr/bin/env bash
# Sets up everything and runs every check: ruff, mypy, clippy, cargo test, pytest.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh test
export PATH="$PWD/.venv/bin:$HOME/.cargo/bin:$PATH"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "ruff"
ruff check python tests bench
ruff format --check python tests bench
step "cargo fmt"
cargo fmt --all --check
step "mypy"
mypy
python -m mypy.stubtest kbroker._kbroker
step "cargo clippy"
cargo clippy --quiet --workspace --all-targets -- -D warnings
cargo clippy --quiet -p kbroker-core --features python --lib -- -D warnings
step "cargo test"
cargo test --quiet -p kbroker-core -p kbf-clock
step "pytest"
python -m pytest -q "$@"
