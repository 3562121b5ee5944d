"""conveyor-demo's plugin module: the ``demo`` subcommand of ``conveyor``.

Cheap to import (it names the command only); the demo's own modules, NumPy and the optional
peers load when the command runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from conveyor.plugins import Command, hookimpl

if TYPE_CHECKING:  # discovering plugins must not load the command line's modules
    import argparse

CONVEYOR_PLUGIN_API = "1.0"


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a seconds-long version")
    parser.add_argument("--size", type=int, default=1024, help="MiB of out-of-core data")
    parser.add_argument("--budget", type=int, default=128, help="MiB the tiles may occupy")
    parser.add_argument("--output", default="conveyor-demo", help="report folder")


def _run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from conveyor_demo import DemoOptions, run_demo

    options = DemoOptions(
        quick=args.quick,
        size=args.size << 20,
        budget=args.budget << 20,
        output=Path(args.output),
        json=args.json,
    )
    summary = run_demo(options)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 1 if summary["problems"] else 0


@hookimpl
def conveyor_commands() -> Iterable[Command]:
    return [
        Command(
            name="demo",
            summary="the whole framework at work: train, out of core, evict, siblings",
            run=_run,
            configure=_configure,
        )
    ]
