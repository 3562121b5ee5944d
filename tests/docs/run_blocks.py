"""Run one page's Python blocks in order, in one namespace (the child side of the docs test).

Reads ``{"page": ..., "path": ..., "blocks": [[first_body_line, code], ...]}`` as JSON on stdin.
Each block is compiled under the page's own path, shifted to its real line numbers, so a
traceback points into the Markdown page. Before each block a ``# block at line N`` marker goes
to stderr (the parent names the block that was running when a timeout struck). On the first
exception it prints ``<page>, block at line N: <Type>: <message>`` and the traceback, exit 1.
"""

from __future__ import annotations

import json
import sys
import traceback


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
