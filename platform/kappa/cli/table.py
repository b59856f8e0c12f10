"""Plain-text tables for the CLI's listings: each column as wide as its widest cell, so a long name (a job, a
path) shifts the columns after it instead of running into them."""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "  # between two columns


def render(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """The header and each row as one line. `align` has one character a column: `<` left, `>` right (numbers).
    A column is as wide as its widest cell, header included; no line ends in spaces."""
    if len(align) != len(header) or not set(align) <= {"<", ">"}:
        raise ValueError(f"align: one '<' or '>' for each of the {len(header)} columns, got {align!r}")
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells, one for each column")
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    return [
        GAP.join(f"{cell:{side}{width}}" for cell, side, width in zip(line, align, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
