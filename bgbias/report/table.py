"""Plain-text tables for the terminal: left-aligned text, right-aligned numbers, one header rule."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Render ``rows`` under ``headers``; numbers are right-aligned, floats shown with 3 decimals."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [bool(rows) and all(isinstance(r[i], int | float) for r in rows) for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), "  ".join("-" * w for w in widths), *(line(r) for r in cells)])


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)
