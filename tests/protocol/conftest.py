"""Test setup for the protocol package.

kbroker.protocol is pure Python; when the native extension is not built the
top-level package cannot be imported, so a bare namespace stands in for it
and only the subpackage under test is loaded.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

_PKG = Path(__file__).resolve().parents[2] / "python" / "kbroker"

try:
    import kbroker  # noqa: F401
except ImportError:
    sys.modules.pop("kbroker", None)
    stub = types.ModuleType("kbroker")
    stub.__path__ = [str(_PKG)]
    sys.modules["kbroker"] = stub
