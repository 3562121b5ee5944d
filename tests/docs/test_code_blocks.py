"""Every Python example of README.md and docs/*.md runs, so no example can rot.

Collection: every fence labelled ``python`` (first word of the info string) on README.md and on
every ``docs/*.md`` page. One test per page: its blocks run in page order in one shared namespace
(like a doctest session, later blocks see the names earlier ones made), in a fresh Python process
whose working directory is a fresh temporary folder, under a timeout. A block is a plain script:
it proves its claims with ``assert`` (``>>>`` sessions are not supported). The test id names the
page and the first line of each block; a failure names the page, the block's line and the
exception, with the traceback pointing into the page. Examples use no fixed absolute path
(``/data``, ``/tmp/disk.img``): they write under ``tempfile``'s folder, which the test points
into its own temporary folder.

Pages, or sections of a page, that already have a dedicated runner (``DEDICATED_RUNNERS``) are
not collected here, so no block runs twice; a test checks every such runner still exists and
still reads its page.

The labelling rule (``test_no_python_escapes_collection``): Python is labelled ``python`` and
nothing else. Failing: an unlabelled fence (say what it holds: ``text``, ``console``, ``toml``);
an alias label (``py``, ``py3``, ``python3``, ``pycon``, ``ipython``, ``ipython3``); and a block
with another label that holds Python in disguise: a ``>>>`` prompt line, or a body that compiles
as Python and has an ``import``, ``def`` or ``class`` statement.

A last test keeps the repository self-contained: no page and no source file cites a path outside
the checkout (the design notes' folder beside it, or an absolute path of the machine it was
written on), and no page names a design note a clone does not have.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from .fences import Block, blocks, escapes
from .run_blocks import run_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
TIMEOUT_S = 40

# page -> (the test module that runs its blocks, the "## " section it covers or "" for all).
DEDICATED_RUNNERS: dict[str, tuple[str, str]] = {
    "docs/plugin-authors.md": ("tests/plugins/test_plugin_authors_guide.py", ""),
    "docs/storage.md": ("tests/storage/test_tiled_docs.py", "## TiledEvictable"),
    "docs/dask.md": ("tests/dask/test_docs.py", ""),
    "docs/numpy-users.md": ("tests/core/test_numpy_users_doc.py", ""),
}
# Split so that this file does not cite what it forbids.
_OUTSIDE = re.compile(
    r"\.\./shared\b|(?<![\w.])/" + r"work(?:/|\b)|\bshared/(?:DESIGN|STYLE|spec)\b"
)
# Pages may not even name the design notes a clone lacks; docs/contract.md says it instead.
_UNSHIPPED = re.compile(r"\b(?:DESIGN|STYLE|carrier-dispatch)\.md\b")
_SOURCE_TREES = [
    "core",
    "plugins",
    "tests",
    "benchmarks",
    ".ci",
    *[p.name for p in ROOT.glob("carriers_*")],
]
_SKIPPED_DIRS = {".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build"}


def _runner_covers(block: Block) -> bool:
    runner = DEDICATED_RUNNERS.get(block.page)
    return runner is not None and (runner[1] == "" or block.section.startswith(runner[1]))


def _collected(page: str) -> list[Block]:
    return [b for b in blocks(ROOT, page) if b.language == "python" and not _runner_covers(b)]


def _page_params() -> list[object]:
    params: list[object] = []
    for page in PAGES:
        found = _collected(page)
        if found:
            lines = ",".join(f"L{b.line}" for b in found)
            params.append(pytest.param(page, id=f"{page}:{lines}"))
    return params


@pytest.mark.parametrize("page", _page_params())
def test_python_blocks_run(page: str, tmp_path: Path) -> None:
    """The page's python blocks run in order, in one namespace, in a fresh temporary folder."""
    failure = run_page(page, ROOT / page, _collected(page), tmp_path, TIMEOUT_S)
    if failure:
        pytest.fail(failure, pytrace=False)


_ABSOLUTE = re.compile(r"^/[\w.-]+(?:/|$)")


@pytest.mark.parametrize("page", PAGES)
def test_examples_use_no_fixed_absolute_path(page: str) -> None:
    """Examples write under a temporary folder (``tempfile``), never at a fixed path like /data."""
    found = [
        f"{page}:{b.first_body_line + node.lineno - 1}: {node.value!r}"
        for b in blocks(ROOT, page)
        if b.language == "python"
        for node in ast.walk(ast.parse(b.body))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _ABSOLUTE.match(node.value)
    ]
    assert not found, "fixed absolute paths in examples:\n" + "\n".join(found)


@pytest.mark.parametrize("page", PAGES)
def test_no_python_escapes_collection(page: str) -> None:
    """Every fence is labelled, and Python is labelled ``python`` (see the module docstring)."""
    found = [f"{page}:{b.line}: {why}" for b in blocks(ROOT, page) if (why := escapes(b))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page", sorted(DEDICATED_RUNNERS))
def test_dedicated_runner_still_runs_its_page(page: str) -> None:
    """A page left out of collection still has its runner, and the runner still reads it."""
    runner, section = DEDICATED_RUNNERS[page]
    assert (ROOT / runner).is_file(), f"{page} is left to {runner}, which no longer exists"
    assert Path(page).name in (ROOT / runner).read_text(), f"{runner} no longer reads {page}"
    covered = [b for b in blocks(ROOT, page) if b.language == "python" and _runner_covers(b)]
    assert covered, f"{page} has no python block in {section or 'the page'} left to {runner}"


def test_collector_finds_the_examples() -> None:
    """The scanner sees the README's example and skips exactly the dedicated runners' blocks."""
    assert _collected("README.md"), "README.md has no python block"
    storage = [b.section for b in _collected("docs/storage.md")]
    assert storage and not any(s.startswith("## TiledEvictable") for s in storage)
    assert not _collected("docs/plugin-authors.md")


def _repository_files() -> list[Path]:
    found = [ROOT / p for p in PAGES]
    for tree in _SOURCE_TREES:
        for dirpath, dirnames, filenames in os.walk(ROOT / tree):
            dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS and "egg-info" not in d]
            found.extend(Path(dirpath) / name for name in filenames)
    return found


def test_no_file_cites_a_path_outside_the_repository() -> None:
    """Pages and sources cite only what a fresh clone has: nothing outside the checkout."""
    cited = []
    pages = {ROOT / p for p in PAGES}
    for path in _repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable: not prose or source
        page = path in pages
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line) or (page and _UNSHIPPED.search(line)):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not cited, "paths outside the repository:\n" + "\n".join(cited)
