#!/usr/bin/env bash
# Sets up kbroker and starts a single-node broker on 127.0.0.1:9092 with its
# data (and embedded metadata) in ./data. Extra arguments go to `kbroker serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
exec .venv/bin/kbroker serve --data-dir ./data "$@"
