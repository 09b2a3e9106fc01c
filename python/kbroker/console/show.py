"""Record keys, values and header values as a person reads them, bounded in size.

Formats: ``text`` (UTF-8, undecodable bytes replaced), ``json`` (pretty-printed when the
bytes are JSON, else shown as text), ``hex`` (bytes in pairs), and ``auto`` (JSON when it
parses, text when it is UTF-8, hex otherwise). At most ``limit`` bytes of a field are
shown; a longer one is cut and its full size kept for the page to say so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

FORMATS = ("auto", "text", "json", "hex")
# Longest JSON document parsed to be pretty-printed (a longer one is shown as text).
MAX_JSON_PARSE = 1 << 20


@dataclass(frozen=True)
class Shown:
    """One field as shown: ``text`` (None for a null field), the format used, the field's
    full size in bytes and whether ``text`` is cut."""

    text: str | None
    format: str
    size: int
    cut: bool


def show(data: bytes | None, fmt: str, limit: int) -> Shown:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if data is None:
        return Shown(None, fmt, 0, False)
    if fmt in ("auto", "json"):
        pretty = _pretty_json(data)
        if pretty is not None:
            return _bounded(pretty, "json", len(data), limit)
        if fmt == "json":
            fmt = "text"
    if fmt == "auto":
        try:
            data.decode()
            fmt = "text"
        except UnicodeDecodeError:
            fmt = "hex"
    if fmt == "hex":
        head = data[:limit]
        return Shown(head.hex(" "), "hex", len(data), len(data) > limit)
    # Cut before decoding so a huge value is never decoded whole; a character split by
    # the cut is replaced.
    return Shown(data[:limit].decode(errors="replace"), "text", len(data), len(data) > limit)


def _pretty_json(data: bytes) -> str | None:
    if len(data) > MAX_JSON_PARSE or data[:1] not in b'{["':
        return None
    try:
        return json.dumps(json.loads(data), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return None


def _bounded(text: str, fmt: str, size: int, limit: int) -> Shown:
    return Shown(text[:limit], fmt, size, len(text) > limit)
