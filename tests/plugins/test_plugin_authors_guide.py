"""docs/plugin-authors.md runs: its files are extracted, installed and its commands checked.

Every code block with a ``title="path"`` is written to that path in a temporary folder; the
distributions the guide installs are pip-installed into a fresh virtual environment; every
``$ command`` of a ``console`` block runs there, and the lines after it must be its output. The
repository paths the guide cites must exist.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from .fresh_venv import fresh_venv

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]
_GUIDE = _REPO / "docs" / "plugin-authors.md"
_BLOCK = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```', re.MULTILINE | re.DOTALL)
_CITED = re.compile(r"`((?:plugins|tests|docs|core|carriers_\w+)/[\w./-]+)`")
_INSTALL = "python -m pip install "


def _blocks() -> list[tuple[str, str | None, str]]:
    return [(m[1], m[2], m[3]) for m in _BLOCK.finditer(_GUIDE.read_text())]


def _sessions() -> list[tuple[str, list[str]]]:
    """Every ``$ command`` of the console blocks with the output lines the guide shows."""
    found: list[tuple[str, list[str]]] = []
    for language, _, body in _blocks():
        if language != "console":
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif found:
                found[-1][1].append(line)
    return found


@pytest.fixture(scope="module")
def guide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(folder holding the guide's files, the fresh environment's Python) after installing."""
    root = tmp_path_factory.mktemp("guide")
    for _, title, body in _blocks():
        if title:
            path = root / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    installs = [c for c, _ in _sessions() if c.startswith(_INSTALL)]
    folders = [root / f for c in installs for f in shlex.split(c[len(_INSTALL) :])]
    return root, fresh_venv(root, folders)


class TestTheGuideRuns:
    def test_guide_has_both_worked_examples(self) -> None:
        """Both paths have a distribution, a carrier module and a script whose output is shown."""
        titles = {t for _, t, _ in _blocks() if t}
        assert {"acme-carrier/pyproject.toml", "tally-carrier/pyproject.toml"} <= titles
        assert {"try_acme.py", "try_tally.py"} <= titles
        assert any(c.startswith(_INSTALL) for c, _ in _sessions())

    @pytest.mark.parametrize(
        "session", [s for s in _sessions() if not s[0].startswith(_INSTALL)], ids=lambda s: s[0]
    )
    def test_command_prints_what_the_guide_shows(
        self, guide: tuple[Path, Path], session: tuple[str, list[str]]
    ) -> None:
        root, python = guide
        command, expected = session
        args = shlex.split(command)
        assert args[0] == "python", f"the guide's commands run python, got {command!r}"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("CONVEYOR_") and k != "PYTHONPATH"
        }
        done = subprocess.run(
            [str(python), *args[1:]],
            cwd=root,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        if expected:
            assert done.stdout.splitlines() == expected

    def test_listing_shows_both_plugins_loaded(self, guide: tuple[Path, Path]) -> None:
        root, python = guide
        done = subprocess.run(
            [str(python), "-m", "conveyor.cli", "plugins", "--json"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            env={k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")},
        )
        assert done.returncode == 0, done.stderr
        import json

        states = {p["name"]: p["state"] for p in json.loads(done.stdout)["plugins"]}
        assert states["acme"] == states["tally"] == "loaded"

    def test_cited_paths_exist(self) -> None:
        """The guide cites only files and folders that exist in the repository."""
        cited = set(_CITED.findall(_GUIDE.read_text()))
        assert cited
        missing = sorted(p for p in cited if not (_REPO / p).exists())
        assert not missing, f"docs/plugin-authors.md cites missing paths: {missing}"
