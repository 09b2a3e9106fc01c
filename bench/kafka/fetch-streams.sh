#!/usr/bin/env bash
# Copies Kafka Streams and its run-time jars (kafka-clients, RocksDB's JNI jar, a logging
# backend) from Maven Central into a cache outside git, for the exactly-once word count
# (bench/streams_eos.py and its test). Idempotent: does nothing when the jars are there.
#   bench/kafka/fetch-streams.sh [VERSION]     (default: 3.9.1, as streams-pom.xml)
# Cache: ${XDG_CACHE_HOME:-~/.cache}/kbroker-bench/kafka-streams-VERSION/lib
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${1:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/streams-pom.xml")}"
lib="${XDG_CACHE_HOME:-$HOME/.cache}/kbroker-bench/kafka-streams-$version/lib"
if compgen -G "$lib/kafka-streams-$version.jar" >/dev/null && [ -f "$lib/.complete" ]; then
    exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "fetch-streams.sh: Maven (mvn) is needed" >&2; exit 1; }
echo "[bench] fetching Kafka Streams $version into $lib" >&2
tmp="$lib.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mvn -q -B -Dstyle.color=never -f "$here/streams-pom.xml" -Dkafka.version="$version" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >&2
touch "$tmp/.complete"
mkdir -p "$(dirname "$lib")"
rm -rf "$lib"
mv "$tmp" "$lib"
