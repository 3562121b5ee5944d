"""Every Python example in the Dask docs runs, on the session cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_PAGES = [_ROOT / "docs" / "dask.md", _ROOT / "plugins" / "conveyor-dask" / "README.md"]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _examples() -> list[object]:
    found = []
    for page in _PAGES:
        for index, code in enumerate(_BLOCK.findall(page.read_text())):
            found.append(pytest.param(code, id=f"{page.parent.name}/{page.name}-{index}"))
    return found


@pytest.mark.parametrize("code", _examples())
def test_example_runs(code: str) -> None:
    """The example executes without error (its own asserts check its claims)."""
    exec(compile(code, "<docs>", "exec"), {"__name__": "docs_example"})
