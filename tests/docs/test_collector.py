"""The docs collector itself: the fence scanner, the labelling rule and the failure reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from .fences import Block, blocks, escapes
from .run_blocks import run_page

PAGE = """\
# Title

## First
```python
x = 1
```

- a list item:

  ```python title="f.py"
  y = x + 1
  ```

## Second
````text
```python
not collected: inside a text fence
```
````
~~~
unlabelled
~~~
"""


def _block(language: str, body: str) -> Block:
    return Block("docs/page.md", 3, language, language, body, "")


def test_scanner_finds_every_fence_with_its_line_label_body_and_section(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text(PAGE)
    found = blocks(tmp_path, "page.md")
    assert [(b.line, b.language, b.section) for b in found] == [
        (4, "python", "## First"),
        (10, "python", "## First"),
        (15, "text", "## Second"),
        (20, "", "## Second"),
    ]
    assert found[1].info == 'python title="f.py"'
    assert found[1].body == "y = x + 1\n"  # the list item's indentation is removed
    assert found[2].body.startswith("```python\n")  # a longer fence holds a shorter one


@pytest.mark.parametrize(
    ("language", "body", "reason"),
    [
        ("", "x = 1\n", "an unlabelled fence"),
        ("py", "x = 1\n", "labelled 'py'"),
        ("pycon", ">>> 1 + 1\n2\n", "labelled 'pycon'"),
        ("text", ">>> import conveyor\n", "a '>>>' prompt"),
        ("toml", "import conveyor\n", "Python code labelled 'toml'"),
        ("text", "def f():\n    return 1\n", "Python code labelled 'text'"),
    ],
)
def test_labelling_rule_flags_python_that_would_escape(
    language: str, body: str, reason: str
) -> None:
    why = escapes(_block(language, body))
    assert why is not None and why.startswith(reason)


@pytest.mark.parametrize(
    ("language", "body"),
    [
        ("python", "import conveyor\n"),
        ("console", "$ pip install conveyor\n"),
        ("toml", '[project]\nname = "x"\n'),
        ("text", "result: conforms\n"),
    ],
)
def test_labelling_rule_lets_labelled_non_python_through(language: str, body: str) -> None:
    assert escapes(_block(language, body)) is None


def test_blocks_share_one_namespace_in_page_order(tmp_path: Path) -> None:
    found = [_block("python", "x = 41\n"), _block("python", "assert x + 1 == 42\n")]
    assert run_page("docs/page.md", tmp_path / "page.md", found, tmp_path, 30) is None


def test_blocks_run_in_the_given_folder_with_temp_files_there(tmp_path: Path) -> None:
    code = (
        "import os, tempfile\n"
        f"assert os.getcwd() == {str(tmp_path)!r}\n"
        f"assert tempfile.gettempdir() == {str(tmp_path)!r}\n"
    )
    assert (
        run_page("docs/page.md", tmp_path / "page.md", [_block("python", code)], tmp_path, 30)
        is None
    )


def test_failure_names_the_page_the_block_line_and_the_exception(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```python\nx = 1\n```\n\n```python\n\nraise KeyError('gone')\n```\n")
    found = [b for b in blocks(tmp_path, "page.md")]
    failure = run_page("docs/page.md", page, found, tmp_path, 30)
    assert failure is not None
    assert failure.splitlines()[0] == "docs/page.md, block at line 7: KeyError: 'gone'"
    assert f'File "{page}", line 9' in failure  # the traceback points into the page


def test_a_block_that_hangs_is_killed_and_named(tmp_path: Path) -> None:
    found = [Block("docs/page.md", 12, "python", "python", "import time\ntime.sleep(60)\n", "")]
    failure = run_page("docs/page.md", tmp_path / "page.md", found, tmp_path, 3)
    assert failure == "docs/page.md, block at line 12: did not finish within 3 s"
