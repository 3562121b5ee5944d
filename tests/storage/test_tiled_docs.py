"""The TiledEvictable worked example in docs/storage.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "storage.md"


def _tiled_example() -> str:
    text = DOCS.read_text()
    section = text.split("## TiledEvictable", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the tiled section has exactly one worked example"
    return blocks[0]


def test_tiled_worked_example_runs() -> None:
    """The example's own asserts (values, residency, budget, gradient) all hold."""
    code = _tiled_example()
    exec(compile(code, str(DOCS), "exec"), {"__name__": "docs_storage_tiled"})  # our own docs
