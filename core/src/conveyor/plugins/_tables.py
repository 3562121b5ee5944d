"""Plain-text tables that fit the terminal: the one formatter the CLI and the demo share.

Columns are left-aligned and separated by two spaces. When the table is wider than the terminal,
the widest cells are shortened with an ellipsis until it fits (``wide=True`` keeps every
character, for ``--wide``). Output that goes to a pipe or a file is not shortened, as ``ls`` and
``git`` do, unless ``COLUMNS`` sets a width. Nothing here imports beyond the standard library.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence

__all__ = ["table", "terminal_width"]

_ELLIPSIS = "…"
_MIN_COLUMN = 8  # a column is never shortened below this many characters


def terminal_width() -> int | None:
    """The width to fit: ``COLUMNS``, else the terminal's; ``None`` for a pipe or a file."""
    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return None
    import shutil  # 4 ms (it loads the compression modules): only when a table is printed

    return shutil.get_terminal_size().columns


def _fit(widths: list[int], limit: int) -> list[int]:
    """Shrink the widest columns, one character at a time, until the row fits ``limit``."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        widest = max(range(len(widths)), key=widths.__getitem__)
        if widths[widest] <= _MIN_COLUMN:
            break  # nothing left to shorten: let the terminal wrap
        widths[widest] -= 1
    return widths


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[: width - 1] + _ELLIPSIS


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    width: int | None = None,
    wide: bool = False,
) -> str:
    """Format ``rows`` under ``headers``; the last column is not padded."""
    cells = [[str(h) for h in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    limit = terminal_width() if width is None else width
    if not wide and limit is not None:
        widths = _fit(widths, limit)
    lines = []
    for row in cells:
        fitted = [_cut(cell, w) for cell, w in zip(row, widths, strict=True)]
        padded = [cell.ljust(w) for cell, w in zip(fitted[:-1], widths, strict=False)]
        lines.append("  ".join([*padded, fitted[-1]]).rstrip())
    return "\n".join(lines)
