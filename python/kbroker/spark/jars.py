"""Spark's Kafka connector jars: fetched with Maven into a cache, chosen for spark.jars.

Owns the local cache of ``spark-sql-kafka-0-10_2.13`` (the version of the
installed PySpark) and its runtime dependencies, copied from Maven Central by
``mvn dependency:copy-dependencies`` with the small ``pom.xml`` next to this
file. The cache lives outside git, one folder per Spark version:

    ${KBROKER_SPARK_JARS:-${XDG_CACHE_HOME:-~/.cache}/kbroker/spark-jars/<version>}

A folder is complete once it holds a ``.complete`` marker, so fetching is
idempotent and an interrupted fetch is redone. `connector_jars()` lists the
jars a SparkSession needs, leaving out those PySpark already ships (Scala,
slf4j, lz4, ...), whose second copy at another version would only conflict.

    python -m kbroker.spark          # fetch (if needed) and print the folder
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

POM = Path(__file__).with_name("pom.xml")
_JAR = re.compile(r"^(?P<name>.+)-(?P<version>\d+(?:\.\d+)+[^/]*)\.jar$")


class JarsError(Exception):
    """The connector's jars are missing and could not be fetched."""


def spark_version() -> str:
    """The installed PySpark's version (the connector must match it)."""
    try:
        import pyspark
    except ImportError:
        raise JarsError("PySpark is not installed: pip install 'kbroker[spark]'") from None
    return str(pyspark.__version__)


def spark_home() -> Path:
    """Where PySpark keeps its own jars (``SPARK_HOME`` or the pyspark package)."""
    env = os.environ.get("SPARK_HOME")
    if env:
        return Path(env)
    import pyspark

    return Path(pyspark.__file__).parent


def cache_dir(version: str | None = None) -> Path:
    override = os.environ.get("KBROKER_SPARK_JARS")
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kbroker" / "spark-jars" / (version or spark_version())


def artifact_name(jar: str) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients`` (the name without its version)."""
    m = _JAR.match(jar)
    return m.group("name") if m else jar.removesuffix(".jar")


def fetch(version: str | None = None, *, quiet: bool = True) -> Path:
    """Copies the connector of ``version`` (default: the installed PySpark's) and its
    runtime dependencies into the cache; does nothing when they are already there."""
    version = version or spark_version()
    target = cache_dir(version)
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("Maven (mvn) is needed to fetch Spark's Kafka connector")
    tmp = target.with_name(f"{target.name}.tmp.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-Dstyle.color=never",
        *(["-q"] if quiet else []),
        "-f",
        str(POM),
        f"-Dspark.version={version}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={tmp}",
    ]
    print(f"[kbroker.spark] fetching spark-sql-kafka-0-10 {version} into {target}", file=sys.stderr)
    try:
        done = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
        )
        if done.returncode != 0:
            tail = "\n".join(done.stdout.strip().splitlines()[-15:])
            raise JarsError(
                f"could not fetch org.apache.spark:spark-sql-kafka-0-10_2.13:{version} with Maven "
                f"(exit {done.returncode}):\n{tail}"
            )
        (tmp / ".complete").write_text(version + "\n")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def connector_jars(version: str | None = None, *, fetch_missing: bool = True) -> list[Path]:
    """The jars to put in ``spark.jars``: the cached connector and those of its
    dependencies that PySpark does not already ship."""
    version = version or spark_version()
    folder = fetch(version) if fetch_missing else cache_dir(version)
    if not (folder / ".complete").exists():
        raise JarsError(
            f"Spark's Kafka connector {version} is not in {folder}: run python -m kbroker.spark"
        )
    shipped = {artifact_name(p.name) for p in (spark_home() / "jars").glob("*.jar")}
    jars = sorted(p for p in folder.glob("*.jar") if artifact_name(p.name) not in shipped)
    if not any(p.name.startswith("spark-sql-kafka-0-10_") for p in jars):
        raise JarsError(f"no spark-sql-kafka-0-10 jar in {folder}")
    return jars


def main() -> int:
    try:
        folder = fetch(quiet=False)
    except JarsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(folder)
    return 0
