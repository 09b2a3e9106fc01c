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
# Most tests wait on processes (brokers, ZooKeeper, Kafka, Spark) more than they use a CPU,
# so they run two at a time, each test file on one worker; the tests that need the machine
# to themselves (tests/conftest.py's ALONE) run after them, one at a time. One part may
# find nothing to run among the tests the arguments select (pytest's exit code 5), not both.
failed=0 empty=0
# Each part's summary of what did not pass is printed again at the end, where a reader of
# a long log (CI shows its tail) finds both; failure messages are not cut to the width.
summaries=$(mktemp)
trap 'rm -f "$summaries"' EXIT
export CI="${CI:-1}"
pytest_part() {
    local rc=0 output
    output=$(mktemp)
    python -m pytest -q "$@" 2>&1 | tee "$output" || rc=${PIPESTATUS[0]}
    sed -n '/short test summary info/,$p' "$output" >> "$summaries"
    rm -f "$output"
    if (( rc == 5 )); then
        empty=$((empty + 1))
    elif (( rc != 0 )); then
        failed=1
    fi
}
step "pytest: two at a time"
pytest_part -n 2 --dist loadfile --alone skip "$@"
step "pytest: the tests that need the machine alone"
pytest_part --alone only "$@"
if [[ -s "$summaries" ]]; then
    step "both parts' summaries"
    cat "$summaries"
fi
if (( empty == 2 )); then
    echo "no test matches: $*" >&2
    exit 5
fi
exit "$failed"
