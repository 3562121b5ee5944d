"""The fenced code blocks of a Markdown page, found by a small line scanner (no dependency).

A fence opens with three or more backticks or tildes (indented up to three spaces, or inside a
list item) followed by an info string, and closes with a run of the same character at least as
long with nothing after it, as CommonMark says. The opening fence's indentation is removed from
the body's lines. A fence still open at the end of the page runs to the end, as in CommonMark.
``escapes`` is the labelling rule: Python hidden from a collector of ``python`` fences.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

_ALIASES = frozenset({"py", "py3", "python3", "pycon", "ipython", "ipython3"})
_PROMPT = re.compile(r"^\s*>>>( |$)", re.MULTILINE)
_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it opens, its language label, its attributes and its body."""

    page: str  # the page's path relative to the repository root, e.g. "docs/storage.md"
    line: int  # 1-based line number of the opening fence
    language: str  # first word of the info string, lower case; "" for an unlabelled fence
    info: str  # the whole info string, e.g. 'python title="try_acme.py"'
    body: str
    section: str  # the last "## " heading above the block, "" before the first one

    @property
    def first_body_line(self) -> int:
        return self.line + 1


def blocks(root: Path, page: str) -> list[Block]:
    """Every fenced block of ``root / page``, in page order."""
    lines = (root / page).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        opened = _OPEN.match(line)
        if not opened:
            if line.startswith("## "):
                section = line
            index += 1
            continue
        indent, fence = len(opened["indent"]), opened["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            body.append(_dedent(lines[end], indent))
            end += 1
        info = opened["info"].strip()
        language = info.split(maxsplit=1)[0].lower() if info else ""
        found.append(Block(page, index + 1, language, info, "\n".join(body) + "\n", section))
        index = end + 1
    return found


def _dedent(line: str, indent: int) -> str:
    """``line`` without up to ``indent`` leading spaces (the opening fence's indentation)."""
    stripped = len(line) - len(line.lstrip(" "))
    return line[min(stripped, indent) :]


def escapes(block: Block) -> str | None:
    """Why ``block`` holds Python that collecting ``python`` fences would miss, or None."""
    if block.language == "python":
        return None
    if block.language == "":
        return "an unlabelled fence; label it (python, text, console, toml, ...)"
    if block.language in _ALIASES:
        return f"labelled {block.language!r}; Python blocks are labelled 'python' and run as tests"
    if _PROMPT.search(block.body):
        return "a '>>>' prompt in a non-python block; write a python block with asserts"
    try:
        tree = ast.parse(block.body)
    except SyntaxError:
        return None
    if any(isinstance(node, _STATEMENTS) for node in tree.body):
        return f"Python code labelled {block.language!r}; label it 'python' so it runs"
    return None
