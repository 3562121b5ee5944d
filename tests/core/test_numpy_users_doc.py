"""docs/numpy-users.md: every Python block runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "numpy-users.md"


def test_every_code_block_runs() -> None:
    """The page's examples run as written (each block sees the names the earlier ones made)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    namespace: dict[str, object] = {}

    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)  # the page's own examples

    assert len(blocks) >= 5
