"""Aligned plain-text tables for the CLI (``--json`` prints the data itself)."""

from __future__ import annotations

from collections.abc import Sequence


def cell(value: object) -> str:
    """How a value reads in a table: None as "-", lists comma-separated, booleans yes/no."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) if value else "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Lines of a table: columns as wide as their widest cell, numbers right-aligned."""
    text = [[cell(v) for v in row] for row in rows]
    numeric = [
        all(
            (isinstance(row[i], int) and not isinstance(row[i], bool)) or row[i] is None
            for row in rows
        )
        and any(row[i] is not None for row in rows)
        for i in range(len(headers))
    ]
    widths = [max([len(h), *(len(r[i]) for r in text)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return [line(list(headers)), *(line(r) for r in text)]
