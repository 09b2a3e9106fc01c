"""The broker keeps request memory mapped between requests (glibc's malloc tuned).

Each check runs in a fresh interpreter: malloc's settings are the process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Allocates and frees frames as the network layer does, and reports what glibc
# mapped afresh (mmapped chunks while held, pages given back after the free).
PROBE = r"""
import ctypes, json, os, sys

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    from kbroker.daemon import keep_request_memory
    print(json.dumps(keep_request_memory()), file=sys.stderr)
held = [bytearray(1 << 20) for _ in range(8)]
mapped_while_held = libc.mallinfo2().hblkhd
del held
arena_after_free = libc.mallinfo2().arena
print(json.dumps({"mmapped": mapped_while_held, "arena": arena_after_free}))
"""


def probe(mode: str, env: dict[str, str] | None = None) -> tuple[dict[str, int], str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return json.loads(out.stdout), out.stderr


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc")


def test_frames_come_from_the_heap_and_stay_mapped_once_tuned() -> None:
    default, _ = probe("default")
    tuned, said = probe("tuned")
    # glibc's default: a 1 MiB buffer is an mmap of its own (given back when freed).
    assert default["mmapped"] >= 8 << 20
    # Tuned: from the heap, which keeps the freed 8 MiB mapped for the next frames.
    assert tuned["mmapped"] < 1 << 20
    assert tuned["arena"] >= 8 << 20
    assert "MALLOC_MMAP_THRESHOLD_=16777216" in said


def test_a_users_malloc_variable_is_left_to_glibc() -> None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    tuned, said = probe("tuned", env)
    assert tuned["mmapped"] >= 8 << 20
    assert "MALLOC_MMAP_THRESHOLD_" not in said
    assert "MALLOC_TRIM_THRESHOLD_=67108864" in said
