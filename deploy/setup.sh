#!/usr/bin/env bash
# Installs what kbroker needs on a fresh machine and builds it into ./.venv.
# Safe to run again: every step checks before it acts.
#   deploy/setup.sh           runtime only
#   deploy/setup.sh cluster   also ZooKeeper (Debian's package), for deploy/local-cluster.sh
#   deploy/setup.sh test      also the test tools, real Kafka clients, the benchmark's
#                             Apache Kafka jars (bench/kafka/fetch.sh; 3.9.1 too, for
#                             the ZooKeeper-mode tests of tests/cluster, and Kafka
#                             Streams: bench/kafka/fetch-streams.sh), PySpark and
#                             Spark's Kafka connector jars (python -m kbroker.spark)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# System packages: kcat (a real librdkafka client used by the tests),
# zookeeper (a real ZooKeeper server: the cluster tests and deploy/local-cluster.sh),
# prometheus (a real Prometheus server, and promtool, for tests/metrics) and chromium
# with chromium-driver (a real browser for tests/console).
need_apt=()
if [ "$extras" = "test" ] || [ "$extras" = "cluster" ]; then
    [ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
fi
if [ "$extras" = "test" ]; then
    command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
    command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
    # Headless Chromium and its WebDriver for the console's browser tests (tests/console).
    [ -x /usr/bin/chromium ] || need_apt+=(chromium)
    [ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    say "installing system packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: a Rust toolchain (cargo >= 1.85) is required" >&2; exit 1; }

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
spec="."
[ "$extras" = "test" ] && spec=".[test,bench,spark,console]"
say "building and installing kbroker ($spec)"
.venv/bin/python -m pip install -q --disable-pip-version-check -e "$spec"

# Apache Kafka's jars for the benchmark's quick test (Maven Central, cached
# outside git; ~55 MB and ~30 s the first time, nothing afterwards).
if [ "$extras" = "test" ]; then
    if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
        bench/kafka/fetch.sh || say "could not fetch Apache Kafka: the benchmark test runs kbroker alone"
        # Kafka 3.9.1, the last release with ZooKeeper mode: the reference of tests/cluster.
        bench/kafka/fetch.sh 3.9.1 || say "could not fetch Apache Kafka 3.9.1: its compatibility tests skip"
        # Kafka Streams 3.9.1 for the exactly-once word count (bench/streams_eos.py, tests/cluster).
        bench/kafka/fetch-streams.sh || say "could not fetch Kafka Streams: its test skips"
    else
        say "no java/mvn: the benchmark test runs kbroker alone"
    fi
    # Spark's Kafka connector (matching the PySpark of the spark extra) for tests/spark:
    # ~17 MB and ~10 s the first time, cached outside git (kbroker/spark/jars.py).
    if command -v mvn >/dev/null 2>&1; then
        .venv/bin/python -m kbroker.spark >/dev/null
    else
        say "no mvn: cannot fetch Spark's Kafka connector for tests/spark"
    fi
fi
