"""Aligned plain-text tables for the CLI (``--json`` prints the data itself).

The layout is tabulate's (a small, long-kept library): its "plain" format,
numbers right-aligned, text left-aligned, missing values as "-".
"""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate


def cell(value: object) -> str:
    """How a value reads in a table: None as "-", lists comma-separated, booleans yes/no."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) if value else "-"
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Lines of a table: columns as wide as their widest cell, numbers right-aligned."""
    columns = range(len(headers))
    numeric = {
        i
        for i in columns
        if all(_is_number(row[i]) or row[i] is None for row in rows)
        and any(row[i] is not None for row in rows)
    }
    cells = [[row[i] if i in numeric else cell(row[i]) for i in columns] for row in rows]
    text = tabulate(
        cells,
        headers=list(headers),
        tablefmt="plain",
        missingval="-",
        numalign="right",
        stralign="left",
        # Text that looks like a number (a topic named "0012") stays text.
        disable_numparse=[i for i in columns if i not in numeric] if rows else True,
    )
    return [line.rstrip() for line in text.splitlines()]
