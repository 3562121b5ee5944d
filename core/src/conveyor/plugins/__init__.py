"""The plugin host: carriers and extensions discovered from the ``conveyor.plugins`` entry points.

Importing this package reads no distribution metadata and imports no plugin; the default host
scans on first use (``host().plugins()``, the first tensor naming a carrier, the ``conveyor``
command). A plugin module declares ``CONVEYOR_PLUGIN_API = "1.0"`` and implements hooks with
``@hookimpl``; see ``docs/plugins.md``. Plugins that add ``conveyor`` subcommands
(``Command``) or ``conveyor doctor`` sections (``add_doctor_section``) print their tables with
``table``, as the built-in commands do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conveyor.plugins._config import ENVIRONMENT_VARIABLES
from conveyor.plugins._hookspecs import PLUGIN_API_VERSION, hookimpl, hookspec
from conveyor.plugins._host import PluginHost, host, set_default_host
from conveyor.plugins._state import (
    PluginBrokenWarning,
    PluginConflictWarning,
    PluginError,
    PluginNamespaceWarning,
    PluginRecord,
    PluginState,
    PluginUnavailable,
)

if TYPE_CHECKING:
    from conveyor.plugins._commands import Command
    from conveyor.plugins._doctor import add_doctor_section, doctor_sections
    from conveyor.plugins._tables import table, terminal_width

# What only the command line and plugins that extend it use loads on first access (PEP 562):
# discovery, which every first tensor naming a carrier runs, does not pay for it.
_LAZY = {
    "Command": "_commands",
    "add_doctor_section": "_doctor",
    "doctor_sections": "_doctor",
    "table": "_tables",
    "terminal_width": "_tables",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'conveyor.plugins' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(f"conveyor.plugins.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Command",
    "ENVIRONMENT_VARIABLES",
    "PLUGIN_API_VERSION",
    "PluginBrokenWarning",
    "PluginConflictWarning",
    "PluginError",
    "PluginHost",
    "PluginNamespaceWarning",
    "PluginRecord",
    "PluginState",
    "PluginUnavailable",
    "add_doctor_section",
    "doctor_sections",
    "hookimpl",
    "hookspec",
    "host",
    "set_default_host",
    "table",
    "terminal_width",
]
