#!/usr/bin/env bash
# Copies Apache Kafka's broker and perf-tool jars (and a logging backend) from
# Maven Central into a cache outside git, for bench/ to start a KRaft node.
# Idempotent: does nothing when the jars are already there.
#   bench/kafka/fetch.sh [VERSION]     (default: the version in pom.xml)
# Cache: ${XDG_CACHE_HOME:-~/.cache}/kbroker-bench/kafka-VERSION/lib
# (KBROKER_BENCH_KAFKA_LIB overrides the folder).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${1:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")}"
lib="${KBROKER_BENCH_KAFKA_LIB:-${XDG_CACHE_HOME:-$HOME/.cache}/kbroker-bench/kafka-$version/lib}"
if compgen -G "$lib/kafka_2.13-$version.jar" >/dev/null && [ -f "$lib/.complete" ]; then
    exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "fetch.sh: Maven (mvn) is needed to fetch Kafka" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "fetch.sh: Java 17+ is needed to run Kafka" >&2; exit 1; }
echo "[bench] fetching Apache Kafka $version into $lib" >&2
tmp="$lib.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mvn -q -B -Dstyle.color=never -f "$here/pom.xml" -Dkafka.version="$version" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >&2
touch "$tmp/.complete"
mkdir -p "$(dirname "$lib")"
rm -rf "$lib"
mv "$tmp" "$lib"
