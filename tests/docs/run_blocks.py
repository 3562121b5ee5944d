"""Run one page's Python blocks in order, in one namespace, in a fresh process.

``run_page`` (the parent side) starts this file as a script in a given folder, under a timeout.

As a script it reads ``{"page", "path", "blocks": [[first_body_line, code], ...]}`` as JSON on
stdin. Each block is compiled under the page's own path, shifted to its real line numbers, so a
traceback points into the Markdown page. Before each block a ``# block at line N`` marker goes
to stderr (the parent names the block that was running when a timeout struck). On the first
exception it prints ``<page>, block at line N: <Type>: <message>`` and the traceback, exit 1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fences import Block


def run_page(page: str, path: Path, found: list[Block], folder: Path, timeout: float) -> str | None:
    """Run ``found`` (blocks of ``path``) with ``folder`` as working and temporary directory.

    Returns None when every block ran, else the failure: page, block line, exception, traceback.
    The child gets the user's default environment: no CONVEYOR_* variable, no PYTHONPATH.
    """
    request = {
        "page": page,
        "path": str(path),
        "blocks": [[b.first_body_line, b.body] for b in found],
    }
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("CONVEYOR_") and k not in {"PYTHONPATH", "TMPDIR"}
    }
    try:
        done = subprocess.run(
            [sys.executable, __file__],
            input=json.dumps(request),
            cwd=folder,
            env={**env, "TMPDIR": str(folder)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as expired:
        err = expired.stderr or b""
        text = err.decode() if isinstance(err, bytes) else err
        started = re.findall(r"^# block at line (\d+)$", text, flags=re.MULTILINE)
        where = f"block at line {started[-1]}" if started else "before the first block"
        return f"{page}, {where}: did not finish within {timeout:g} s"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if not line.startswith("# block at")]
    return "\n".join(lines) or f"{page}: the runner exited {done.returncode}"


def main() -> int:
    request = json.load(sys.stdin)
    page, path = request["page"], request["path"]
    namespace: dict[str, object] = {"__name__": "__main__"}
    for first_body_line, code in request["blocks"]:
        print(f"# block at line {first_body_line - 1}", file=sys.stderr, flush=True)
        try:
            compiled = compile("\n" * (first_body_line - 1) + code, path, "exec")
            exec(compiled, namespace)  # the repository's own documentation examples
        except BaseException as error:  # report anything, SystemExit included, then stop
            print(
                f"{page}, block at line {first_body_line - 1}: {type(error).__name__}: {error}",
                file=sys.stderr,
            )
            # Leave out this runner's own frame: the traceback starts in the page.
            tb = error.__traceback__
            traceback.print_exception(type(error), error, tb.tb_next if tb else None)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
