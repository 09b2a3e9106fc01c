"""Small Java programs (tests/java/*.java, bench/java/*.java) compiled against Apache Kafka's
jars, for tests and benchmarks that drive Kafka's own Java clients.

A program is compiled once per source and classpath (javac, into target/java/, the build
folder Cargo uses, outside git) and reused by later runs. `java_command` gives the command
that runs it; a program prints its observations as ``name=value`` lines, which
`parse_output` reads back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.systems import REPO

BUILD = REPO / "target" / "java"
# A small heap, no C2 compiler: the programs run for seconds. Kafka's jars carry two slf4j
# bindings (simple and reload4j): both are quietened.
JVM_OPTS = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dlog4j.configuration=file:/dev/null",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]


class JavaMissing(RuntimeError):
    """No java or javac on PATH."""


def _jars(folders: Sequence[Path]) -> list[Path]:
    return sorted(j for folder in folders for j in folder.glob("*.jar"))


def classpath(folders: Sequence[Path], classes: Path | None = None) -> str:
    parts = [] if classes is None else [str(classes)]
    return os.pathsep.join([*parts, *(f"{folder}/*" for folder in folders)])


def compile_java(source: Path, folders: Sequence[Path]) -> Path:
    """The folder of the classes of ``source`` (one .java file of a class named as the file)
    compiled against the jars of ``folders``, compiled now unless an earlier run did."""
    javac = shutil.which("javac")
    if javac is None:
        raise JavaMissing("needs javac (a JDK)")
    program = source.stem
    digest = hashlib.sha256(source.read_bytes())
    for jar in _jars(folders):
        digest.update(jar.name.encode())
    classes = BUILD / f"{program}-{digest.hexdigest()[:16]}"
    if (classes / f"{program}.class").exists():
        return classes
    BUILD.mkdir(parents=True, exist_ok=True)
    # Into a folder of its own, then renamed: a concurrent or killed compile leaves no
    # half-written classes where a later run would take them.
    tmp = Path(tempfile.mkdtemp(prefix=f".{program}-", dir=BUILD))
    proc = subprocess.run(
        [javac, "-nowarn", "-d", str(tmp), "-cp", classpath(folders), str(source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac {source.name} failed:\n{proc.stdout}\n{proc.stderr}")
    try:
        os.rename(tmp, classes)
    except OSError:  # another run compiled it first
        shutil.rmtree(tmp, ignore_errors=True)
    return classes


def java_command(
    source: Path, folders: Sequence[Path], *args: str, jvm_opts: Sequence[str] = JVM_OPTS
) -> list[str]:
    """The command that runs the program of ``source`` (compiled if needed) with ``args``."""
    java = shutil.which("java")
    if java is None:
        raise JavaMissing("needs java")
    classes = compile_java(source, folders)
    return [java, *jvm_opts, "-cp", classpath(folders, classes), source.stem, *args]


def parse_output(stdout: str) -> dict[str, str]:
    """The ``name=value`` lines a program printed (a later line wins)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            found[name] = value
    return found
