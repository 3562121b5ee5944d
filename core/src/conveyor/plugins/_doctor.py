"""Plugin sections of ``conveyor doctor``: registered at plugin import, read by the CLI.

Kept apart from ``conveyor.cli`` so that a plugin registering a section at import (the Dask
plugin names its cluster's dashboard) does not load the CLI's modules (argparse, json, the
tables) into every process that merely discovers carriers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["add_doctor_section", "doctor_sections"]

_Section = Callable[[], Mapping[str, str]]
# Extra lines plugins add to `conveyor doctor`, by section name, in registration order.
_SECTIONS: dict[str, _Section] = {}


def add_doctor_section(name: str, section: _Section) -> None:
    """Let a plugin add a section to ``conveyor doctor`` (e.g. an active cluster's dashboard).

    ``section()`` returns ``{label: value}`` lines, or an empty mapping to print nothing; it is
    called once per doctor run, after the plugins loaded, and must not raise.
    """
    _SECTIONS[name] = section


def doctor_sections() -> dict[str, dict[str, str]]:
    """Every section's lines; a section that raises reports its error instead of its lines."""
    found = {}
    for name, section in _SECTIONS.items():
        try:
            lines = dict(section())
        except Exception as exc:  # a plugin's report must not break the diagnosis
            lines = {"error": f"{type(exc).__name__}: {exc}"}
        if lines:
            found[name] = lines
    return found
