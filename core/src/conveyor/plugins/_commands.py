"""Commands: ``conveyor`` subcommands contributed by plugins (the ``conveyor_commands`` hook).

A plugin adds a subcommand the way ``llm`` and ``datasette`` plugins do: its
``conveyor_commands`` hook returns ``Command`` records, and ``conveyor NAME ...`` runs the
record's ``run`` with the parsed arguments. The command line loads plugins only when it is asked
for a command it does not have built in, so ``conveyor plugins --no-load`` still imports none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

import attrs

if TYPE_CHECKING:  # the command line's parser; discovering plugins must not import argparse
    import argparse

__all__ = ["Command"]

_NAME: Final = r"[a-z][a-z0-9-]*"  # compiled (and cached) by re on first use


def _name(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not re.fullmatch(_NAME, value):
        msg = f"Command: name must be a lower-case word such as 'demo', got {value!r}"
        raise ValueError(msg)


def _callable(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        msg = f"Command: {attribute.name} must be callable, got {value!r} ({type(value).__name__})"
        raise TypeError(msg)


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """The default ``configure``: the command takes only the common ``--json`` and ``--wide``."""


@final
@attrs.frozen(kw_only=True)
class Command:
    """One ``conveyor`` subcommand a plugin contributes.

    Args:
        name: what users type after ``conveyor`` (lower-case letters, digits and dashes).
        summary: one line for ``conveyor --help``.
        run: ``run(args)`` does the work and returns the exit status (0 ok, 1 problems found,
            2 usage error), as every built-in command does. ``args.json`` and ``args.wide`` are
            always there: print one JSON document under ``--json``, and keep table cells whole
            under ``--wide`` (``conveyor.plugins.table(..., wide=args.wide)``).
        configure: ``configure(parser)`` adds the command's own arguments to its
            ``argparse`` parser.
    """

    name: str = attrs.field(validator=_name)
    summary: str = attrs.field(validator=attrs.validators.instance_of(str))
    run: Callable[[argparse.Namespace], int] = attrs.field(validator=_callable)
    configure: Callable[[argparse.ArgumentParser], None] = attrs.field(
        default=_no_arguments, validator=_callable
    )
