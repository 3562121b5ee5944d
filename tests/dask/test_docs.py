"""Every Python example in the Dask docs runs, on the session cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    # As a script runs it: the first example keeps its work under a __main__ guard.
    exec(compile(code, "<docs>", "exec"), {"__name__": "__main__"})


def test_first_example_runs_as_a_script_and_exits_without_warnings(tmp_path: Path) -> None:
    """Saved as a file, the first example runs on its own embedded cluster and exits quietly."""
    code = _BLOCK.findall((_ROOT / "docs" / "dask.md").read_text())[0]
    script = tmp_path / "example.py"
    script.write_text(code)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=environment
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(3, 3)"
    assert "WARNING" not in done.stderr and "Nanny failed" not in done.stderr, done.stderr
