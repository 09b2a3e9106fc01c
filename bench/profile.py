"""Sampling profiles of the kbroker process while workloads run (perf, cpu-clock, call graphs).

    python -m bench --systems kbroker --only omb.rate --reps 1 --profile
    python -m bench.profile OUT/profile-*.perf.data      # top symbols, by shared object

``--profile`` attaches ``perf record -e cpu-clock -g`` to kbroker while each
workload runs (software clock: works in VMs without hardware counters) and
leaves ``OUT/profile-kbroker-rep<N>-<workload>.perf.data``. Python 3.11 frames show as the
interpreter's C functions (``_PyEval_EvalFrameDefault`` ...); the Rust
storage is ``_kbroker*.so``; ``[kernel.kallsyms]`` is system-call work.
(py-spy 0.4 cannot read this machine's pyenv-built interpreter.)
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def perf_record(pid: int, out: Path) -> Iterator[None]:
    """Samples ``pid`` until the block ends (a no-op without perf)."""
    if shutil.which("perf") is None:
        yield
        return
    proc = subprocess.Popen(
        [
            "perf",
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "499",
            "--call-graph",
            "dwarf,16384",
            "-p",
            str(pid),
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # perf writes its file on SIGINT
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def top(path: Path, sort: str, n: int) -> str:
    """``perf report`` self-time lines, sorted by ``sort`` (e.g. "dso" or "dso,sym")."""
    report = subprocess.run(
        [
            "perf",
            "report",
            "-i",
            str(path),
            "--stdio",
            "--no-children",
            "--sort",
            sort,
            "-g",
            "none",
            "--percent-limit",
            "0.5",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in report.splitlines() if line.strip() and not line.startswith("#")]
    return "\n".join(lines[:n])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("-n", type=int, default=25)
    args = ap.parse_args(argv)
    for path in args.files:
        print(
            f"== {path}\n-- by shared object\n{top(path, 'dso', 10)}\n"
            f"-- by symbol\n{top(path, 'dso,sym', args.n)}\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
